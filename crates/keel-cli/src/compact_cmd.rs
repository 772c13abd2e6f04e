//! `keel session compact ID [--instructions TEXT]`: a manual compaction.
//!
//! The settings resolve as `keel run`'s do (config.toml, `--profile`, `-c`,
//! the project layer of the session's workspace); the session's own
//! provider and model (from its last `configuration` entry) are the default
//! unless `--provider`/`--model`, a profile or a `-c provider=`/`model=`
//! choose. They summarise the oldest part of its context into a checkpoint
//! appended at its leaf, through `AgentKernel::compact`. Prints a sentence
//! (`--output-format text`, the default), or with `json`/`stream-json` one
//! typed JSON line (`"type": "compaction"`); exit code 0 when a checkpoint
//! was written, 1
//! when the compaction failed (`"type": "compaction_failed"`, nothing
//! written: among others a summary that is empty, mostly repeats Keel's
//! summary instructions, or does not make the context smaller — the same
//! checks a run's compaction applies), 2 for a startup error.

use std::process::ExitCode;
use std::sync::Arc;

use keel_host::{Choices, Settings, sessions};
use keel_kernel::KernelError;
use keel_protocol::{CompactionFailedLine, CompactionLine, EntryPayload, HostLine};

use crate::args::CompactArgs;
use crate::output::{print_json, say};
use crate::session_cmd::{open_store, resolve_session};
use crate::startup::StartupError;

pub async fn run(args: CompactArgs) -> Result<ExitCode, StartupError> {
    let format = args.format.data();
    let store = open_store(&args.store)?;
    let id = resolve_session(&store, &args.id).await?;
    let (provider, model, workspace) = {
        let reader = store.reader(&id)?;
        let mut last = None;
        for entry in reader.active_entries() {
            if let EntryPayload::Configuration {
                provider, model, ..
            } = entry?.payload
            {
                last = Some((provider, model));
            }
        }
        let (provider, model) = last.unzip();
        (provider, model, reader.workspace().map(str::to_owned))
    };
    // The session's workspace frames the summary request (its environment)
    // and carries the project layer; a session whose workspace is gone is
    // compacted from the current directory's.
    let workspace = workspace
        .map(std::path::PathBuf::from)
        .filter(|path| path.is_dir());
    // The settings resolve as `keel run`'s do (config.toml, --profile, -c,
    // the project layer); the session's own provider and model are the
    // default only where neither a flag nor a layer the user named chooses.
    let layered = args.settings.profile.is_some()
        || args.settings.overrides.iter().any(|text| {
            text.split_once('=')
                .is_some_and(|(key, _)| matches!(key.trim(), "provider" | "model"))
        });
    let mut sources = args.settings.sources();
    sources.workspace = workspace.clone().or_else(|| std::env::current_dir().ok());
    let settings = Settings::load(&sources)?;
    let (provider, model) = match (&args.provider, layered) {
        (Some(_), _) | (None, true) => (args.provider, args.model),
        (None, false) => (provider, args.model.or(model)),
    };
    if provider.is_none() && settings.defaults.provider.is_none() && args.script.is_none() {
        return Err(StartupError::new(
            "no_provider",
            "the session never ran, so it names no provider: pass --provider",
        ));
    }
    let mut config = settings
        .resolve({
            let mut choices = Choices::default();
            choices.provider = provider;
            choices.model = model;
            choices.base_url = args.base_url;
            choices.script = args.script;
            choices.workspace = workspace.clone();
            choices
        })?
        .config;
    config.workspace = workspace;
    config.context_window = args.context_window;
    let store = Arc::new(store);
    let kernel = config.kernel(store.clone())?;
    let terminal = format == crate::args::DataFormat::Text;
    match kernel.compact(&id, args.instructions.as_deref()).await {
        Ok(report) => {
            if terminal {
                say(format!(
                    "session {id}: checkpoint {} covers {} entries; context ~{} → ~{} tokens",
                    report.checkpoint_id,
                    report.covered_entries,
                    report.tokens_before,
                    report.tokens_after
                ));
            } else {
                print_json(&HostLine::Compaction({
                    let mut compaction_line = CompactionLine::default();
                    compaction_line.session_id = id.clone();
                    compaction_line.checkpoint_id = report.checkpoint_id;
                    compaction_line.covered_entries = report.covered_entries as u64;
                    compaction_line.tokens_before = report.tokens_before;
                    compaction_line.tokens_after = report.tokens_after;
                    compaction_line.path =
                        sessions::session_file(&store, &id)?.display().to_string();
                    compaction_line
                }));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(KernelError::Compaction(error)) => {
            if terminal {
                say(format!("session {id}: {} ({})", error.message, error.code));
            } else {
                print_json(&HostLine::CompactionFailed(CompactionFailedLine::new(
                    id.clone(),
                    error,
                )));
            }
            Ok(ExitCode::from(1))
        }
        Err(error) => Err(error.into()),
    }
}
