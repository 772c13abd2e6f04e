//! What the broker's local adapters share (`keel run --input-format
//! stream-json` in `stream_input`, and `keel chat` in `chat`): the
//! parameters of each run they start, the active run as the broker knows
//! it (cancel, deny, its events), and broker errors as startup errors. The
//! host semantics stay in keel-host's broker; these only call it.

use keel_host::broker::Caller;
use keel_protocol::rpc::methods::{
    EVENTS_LAGGED, EventsLaggedNotification, RUN_EVENT, RunEventNotification, RunStartParams,
    SessionResumeParams,
};
use keel_protocol::rpc::{Notification, RpcError};
use serde_json::{Value, json};

use crate::startup::StartupError;

/// What every run of this invocation asks the broker for: the workspace,
/// mode, tools and limits of `keel run`'s flags and configuration (the
/// prompt and session change per run).
pub struct Runs {
    /// `run/start`'s parameters without prompt and session.
    pub template: RunStartParams,
}

impl Runs {
    /// `run/start`'s parameters for `prompt` in `session` (a new one for `None`).
    pub fn start(&self, prompt: String, session: Option<String>) -> Value {
        let mut params = self.template.clone();
        params.prompt = prompt;
        params.session_id = session;
        params.subscribe = Some(true);
        serde_json::to_value(params).unwrap_or(Value::Null)
    }

    /// `session/resume`'s parameters for `session`.
    pub fn resume(&self, session: String) -> Value {
        let template = &self.template;
        let params = {
            let mut session_resume_params = SessionResumeParams::default();
            session_resume_params.session_id = session;
            session_resume_params.workspace = Some(template.workspace.clone());
            session_resume_params.provider = template.provider.clone();
            session_resume_params.model = template.model.clone();
            session_resume_params.mode = template.mode;
            session_resume_params.tools = template.tools.clone();
            session_resume_params.max_turns = template.max_turns;
            session_resume_params.max_cost_usd = template.max_cost_usd;
            session_resume_params.subscribe = Some(true);
            session_resume_params
        };
        serde_json::to_value(params).unwrap_or(Value::Null)
    }
}

/// A broker error as a startup error: the kernel's or the host's own code
/// when it names one (`session_interrupted`, `invalid_script`, …).
pub fn startup_error(error: &RpcError) -> StartupError {
    let data = error.data.as_ref();
    let code = ["kernel_code", "host_code", "code"]
        .iter()
        .find_map(|key| data?.get(*key)?.as_str())
        .unwrap_or("host");
    StartupError::new(code, error.message.clone())
}

/// The active run, as the broker knows it.
pub struct Run {
    /// The connection's caller.
    pub caller: Caller,
    /// The run's id.
    pub run_id: String,
}

impl Run {
    /// Calls `method` on the broker.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        self.caller.call(method, Some(params)).await
    }

    /// Cancels the run (`run/cancel`), noting on stderr when that fails.
    pub async fn cancel(&self) {
        if let Err(error) = self
            .call("run/cancel", json!({ "run_id": self.run_id }))
            .await
        {
            eprintln!("keel: `cancel` not applied: {}", error.message);
        }
    }

    /// This run's event in `note`; a lagged subscription is picked up
    /// again from the last event printed, so nothing is lost.
    pub async fn event_of(&self, note: Notification) -> Option<RunEventNotification> {
        match note.method.as_str() {
            RUN_EVENT => {
                let event: RunEventNotification = serde_json::from_value(note.params).ok()?;
                (event.run_id == self.run_id).then_some(event)
            }
            EVENTS_LAGGED => {
                let lagged: EventsLaggedNotification = serde_json::from_value(note.params).ok()?;
                let params = json!({ "run_id": lagged.run_id, "after_seq": lagged.last_seq });
                if let Err(error) = self.call("run/subscribe", params).await {
                    eprintln!("keel: the run's events were lost: {}", error.message);
                }
                None
            }
            _ => None,
        }
    }

    /// Denies a request; whether it was still pending (a stale id means
    /// the run already moved on, e.g. it was cancelled).
    pub async fn deny(&self, request_id: &str) -> bool {
        let params = json!({ "run_id": self.run_id, "request_id": request_id, "decision": "deny" });
        self.call("permission/resolve", params).await.is_ok()
    }
}
