//! `keel rpc` and `keel serve`: flags and environment in, keel-server out.
//!
//! The protocol, the framing, the limits and authentication live in
//! keel-server and the broker in keel-host; this module only turns flags
//! and `KEEL_SERVER_TOKEN` into their configuration and waits for a signal.

use std::process::ExitCode;

use keel_host::broker::admission::Quota;
use keel_host::broker::{Authority, Broker, BrokerConfig};
use keel_host::{HostOptions, Settings};
use keel_server::{ServeFlags, ServePlan};

use crate::args::{BrokerArgs, RpcArgs, ServeArgs};
use crate::output::print_json;
use crate::startup::StartupError;

/// The environment variable holding `keel serve`'s default token.
const TOKEN_ENV: &str = "KEEL_SERVER_TOKEN";

/// `keel rpc`: serves stdin/stdout until stdin closes.
pub async fn rpc(args: RpcArgs) -> Result<ExitCode, StartupError> {
    let broker = Broker::new(broker_config(&args.broker))?;
    keel_server::stdio::serve(
        &broker,
        tokio::io::stdin(),
        tokio::io::stdout(),
        keel_server::stdio::StdioLimits::default(),
    )
    .await;
    Ok(ExitCode::SUCCESS)
}

/// `keel serve`: listens until SIGTERM or SIGINT, then drains.
pub async fn serve(args: ServeArgs) -> Result<ExitCode, StartupError> {
    let settings = Settings::load(&args.broker.settings.sources())?;
    let mut flags = ServeFlags::default();
    flags.listen = args.listen.clone();
    flags.token_file = args.token_file.clone();
    flags.token_env = std::env::var(TOKEN_ENV)
        .ok()
        .filter(|token| !token.is_empty());
    flags.max_runs = args.broker.max_runs;
    flags.max_queue = args.broker.max_queue;
    flags.drain_timeout = args.drain_timeout;
    flags.allow_origins = args.allow_origin.clone();
    let plan = ServePlan::resolve(&settings.server, flags)?;
    let mut config = broker_config(&args.broker);
    if let Some(max_runs) = plan.max_runs {
        config.max_runs = max_runs;
    }
    if let Some(max_queue) = plan.max_queue {
        config.max_queue = max_queue;
    }
    for (tenant, quota) in &plan.quotas {
        let mut limits = Quota::unlimited();
        limits.max_active = quota.max_active_runs;
        limits.starts_per_minute = quota.starts_per_minute;
        config.quotas.insert(tenant.clone(), limits);
        let mut authority = Authority::named_default();
        if let Some(max_mode) = quota.max_mode {
            authority.max_mode = max_mode;
        }
        authority.widen = quota.widen;
        authority.workspaces = quota.workspaces.clone();
        config.authorities.insert(tenant.clone(), authority);
    }
    let broker = Broker::new(config)?;
    let server = keel_server::http::bind(plan.serve).await?;
    let shutdown = shutdown_signal();
    let address = server.local_addr();
    tracing::info!(%address, "listening");
    print_json(&serde_json::json!({ "type": "listening", "address": address.to_string() }));
    server.run(broker, shutdown).await;
    Ok(ExitCode::SUCCESS)
}

/// The broker's configuration from the flags shared by `rpc` and `serve`.
fn broker_config(args: &BrokerArgs) -> BrokerConfig {
    let mut host = HostOptions::default();
    host.system_prompt = args.system_prompt.clone();
    host.append_system_prompt = args.append_system_prompt.clone();
    host.context_window = args.context_window;
    host.no_environment = args.no_environment;
    host.sandbox_mode = Some(args.sandbox.into());
    host.sandbox_env = args.sandbox_env.clone();
    let mut config = BrokerConfig::default();
    config.config_file = args.settings.config.clone();
    config.profile = args.settings.profile.clone();
    config.overrides = args.settings.overrides.clone();
    config.provider = args.provider.clone();
    config.model = args.model.clone();
    config.base_url = args.base_url.clone();
    config.script = args.script.clone();
    config.sandbox_read = args.sandbox_read.clone();
    config.host = host;
    config.session_dir = args.store.session_dir.clone();
    if let Some(max_runs) = args.max_runs {
        config.max_runs = max_runs;
    }
    if let Some(max_queue) = args.max_queue {
        config.max_queue = max_queue;
    }
    config
}

/// Installs SIGTERM and SIGINT handlers now (so a signal right after the
/// address is printed is not lost) and resolves on the first of them
/// (never, if they cannot be installed: the signals keep their default
/// action then).
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        match handlers {
            (Ok(mut terminate), Ok(mut interrupt)) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = interrupt.recv() => {}
                }
            }
            _ => {
                tracing::warn!("signal handlers could not be installed");
                std::future::pending::<()>().await;
            }
        }
    }
}
