//! `keel run --input-format stream-json`: a script drives the whole
//! `AgentRun` seam through standard input, one `HostControl` message per
//! line (`keel schema host_control`), without a server.
//!
//! - `user_message` (and `follow_up`) with no run active starts the next
//!   run (`run/start`), in the same session as the one before; during a
//!   run both queue a follow-up (`run/follow_up`).
//! - `steer` queues a steering message (`run/steer`), `cancel` cancels the
//!   run (`run/cancel`), `permission_answer` answers a
//!   `permission_requested` event by its id (`permission/resolve`). With no run active they are
//!   ignored with a note on stderr.
//! - A line that is not a control message is ignored with a note on stderr
//!   naming its line number; blank lines are skipped.
//! - End of input denies the pending permission requests and every later
//!   one, lets the active run finish, and ends `keel` after it. A prompt
//!   argument starts the first run without waiting for a message; `keel
//!   resume` starts it by continuing the interrupted run (`session/resume`),
//!   and later messages start runs in that session as usual.
//!
//! Each run prints its events, result, workspace changes and session line
//! in the `--output-format` asked for, as `keel run` does. The exit code is the last run's (0 only for
//! `settled`), or 128 + the signal that cancelled it; signals cancel the
//! active run exactly as in text mode, and a signal between runs ends
//! `keel`.
//!
//! Stdin is read on a thread of its own with blocking reads, so a script
//! that keeps its end open never holds `keel` at exit.
//!
//! This is one adapter over keel-host's broker (`keel_host::broker`), the
//! place where every host message is applied: it holds one local
//! connection (tenant `local`) and turns each control line into a broker
//! call (`run/start`, `run/steer`, `run/follow_up`, `run/cancel`,
//! `permission/resolve`, `session/resume`), and each `run/event`
//! notification into printed output. So its behaviour and `keel rpc`'s are
//! defined once. `keel chat` (`chat`) is the other such adapter; what both
//! use is in `broker_run`.

use std::io::BufRead;
use std::process::ExitCode;

use keel_host::broker::{Broker, Caller, Connection, Tenant};
use keel_protocol::rpc::RpcError;
use keel_protocol::rpc::methods::RunStartResponse;
use keel_protocol::{HostControl, RunEventKind, RunResult};
use keel_session::JsonlStore;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

pub use crate::broker_run::Runs;
use crate::broker_run::{Run, startup_error};
use crate::host;
use crate::output::Output;
use crate::signals;
use crate::startup::StartupError;

/// The longest control line read; a longer one is skipped.
const MAX_LINE_BYTES: u64 = 16 * 1024 * 1024;

/// One line of input: a control message, or why the line is not one.
type Input = Result<HostControl, String>;

/// How the first run starts.
pub enum FirstRun {
    /// With the first `user_message` (or `follow_up`) on standard input.
    Wait,
    /// With this prompt, without waiting for a message.
    Prompt(String),
    /// By continuing the session's interrupted run (`session/resume`).
    Resume,
}

/// Runs until input ends with no run active (or a signal); see the module docs.
pub async fn run(
    broker: &Broker,
    store: &JsonlStore,
    output: Output,
    first: FirstRun,
    session: Option<String>,
    runs: Runs,
) -> Result<ExitCode, StartupError> {
    let received = signals::Received::install();
    let (signalled, watched) = watch::channel(false);
    let connection = broker.connect(Tenant::local());
    connection
        .call("initialize", None)
        .await
        .map_err(|error| startup_error(&error))?;
    let driver = Driver {
        caller: connection.caller(),
        connection,
        store,
        output,
        inputs: spawn_reader(),
        open: true,
        signalled: watched,
    };
    let last = tokio::select! {
        last = driver.run_all(first, session, runs) => last?,
        never = signals::on_signal(&received, || { let _ = signalled.send(true); }) => match never {},
    };
    if let Some(code) = received.exit_code() {
        return Ok(ExitCode::from(code));
    }
    match last {
        Some(result) => Ok(host::exit_code(&result)),
        None => Err(StartupError::new(
            "no_prompt",
            "standard input ended before a user_message: send {\"type\": \"user_message\", \"text\": …}",
        )),
    }
}

struct Driver<'a> {
    connection: Connection,
    caller: Caller,
    store: &'a JsonlStore,
    output: Output,
    inputs: mpsc::UnboundedReceiver<Input>,
    /// Whether standard input may still bring messages.
    open: bool,
    /// Becomes `true` on the first signal.
    signalled: watch::Receiver<bool>,
}

impl Driver<'_> {
    /// Runs one run per prompt; returns the last run's result.
    async fn run_all(
        mut self,
        first: FirstRun,
        mut session: Option<String>,
        runs: Runs,
    ) -> Result<Option<RunResult>, StartupError> {
        let mut next = first;
        let mut last = None;
        loop {
            // The next run's prompt; `None` continues the interrupted run.
            let prompt = match std::mem::replace(&mut next, FirstRun::Wait) {
                FirstRun::Wait => match self.next_prompt().await {
                    Some(prompt) => Some(prompt),
                    None => return Ok(last),
                },
                FirstRun::Prompt(prompt) => Some(prompt),
                FirstRun::Resume => None,
            };
            if *self.signalled.borrow() {
                return Ok(last);
            }
            let started = match (prompt, session.clone()) {
                (Some(prompt), session) => {
                    self.caller
                        .call("run/start", Some(runs.start(prompt, session)))
                        .await
                }
                (None, Some(session)) => {
                    self.caller
                        .call("session/resume", Some(runs.resume(session)))
                        .await
                }
                (None, None) => return Err(StartupError::new("usage", "no session to resume")),
            };
            let started = started.and_then(|value| {
                serde_json::from_value::<RunStartResponse>(value).map_err(|error| {
                    RpcError::new(keel_protocol::rpc::ErrorKind::Internal, error.to_string())
                })
            });
            let started = match started {
                Ok(started) => started,
                Err(error) if last.is_none() => return Err(startup_error(&error)),
                Err(error) => {
                    eprintln!("keel: no run started: {}", error.message);
                    continue;
                }
            };
            session = Some(started.session_id.clone());
            let result = self.drive(&started.run_id).await?;
            let changes = match self.caller.workspace_changes(&started.run_id).await {
                Ok(changes) => Some(changes),
                Err(error) => {
                    tracing::warn!(%error, "no workspace changes to report");
                    None
                }
            };
            let stored = host::Stored::of(self.store, &result.session_id)?;
            host::finish(&self.output, &result, changes.as_ref(), Some(stored))?;
            last = Some(result);
            if *self.signalled.borrow() {
                return Ok(last);
            }
        }
    }

    /// Waits for a message that starts a run; `None` at the end of input
    /// or on a signal.
    async fn next_prompt(&mut self) -> Option<String> {
        while self.open {
            let input = tokio::select! {
                input = self.inputs.recv() => input,
                _ = self.signalled.wait_for(|signalled| *signalled) => return None,
            };
            match input {
                None => self.open = false,
                Some(Ok(HostControl::UserMessage { text } | HostControl::FollowUp { text })) => {
                    return Some(text);
                }
                Some(Ok(control)) => {
                    eprintln!("keel: no run is active; `{}` ignored", name(&control));
                }
                Some(Err(problem)) => eprintln!("keel: {problem}"),
            }
        }
        None
    }

    /// Prints the run's events while applying the messages that arrive;
    /// returns its result (carried by its terminal notification).
    async fn drive(&mut self, run_id: &str) -> Result<RunResult, StartupError> {
        let run = Run {
            caller: self.caller.clone(),
            run_id: run_id.to_owned(),
        };
        let mut pending: Vec<String> = Vec::new();
        let mut cancelled = *self.signalled.borrow();
        if cancelled {
            run.cancel().await;
        }
        let mut ticks = tokio::time::interval(crate::view::TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = ticks.tick(), if self.output.wants_ticks() => self.output.tick(),
                note = self.connection.notification() => {
                    let Some(note) = note else {
                        return Err(StartupError::new("host", "the broker connection closed"));
                    };
                    let Some(event) = run.event_of(note).await else { continue };
                    self.output.event(&event.event);
                    if let Some(result) = event.result {
                        return Ok(result);
                    }
                    if let RunEventKind::PermissionRequested { request_id, .. } = &event.event.kind {
                        if self.open {
                            pending.push(request_id.clone());
                        } else if run.deny(request_id).await {
                            self.output.unanswered();
                        }
                    }
                }
                input = self.inputs.recv(), if self.open => match input {
                    None => {
                        self.open = false;
                        for request_id in pending.drain(..) {
                            if run.deny(&request_id).await {
                                self.output.unanswered();
                            }
                        }
                    }
                    Some(Ok(control)) => run.apply(control, &mut pending).await,
                    Some(Err(problem)) => eprintln!("keel: {problem}"),
                },
                _ = self.signalled.wait_for(|signalled| *signalled), if !cancelled => {
                    cancelled = true;
                    run.cancel().await;
                }
            }
        }
    }
}

impl Run {
    /// Applies one control message to the active run.
    async fn apply(&self, control: HostControl, pending: &mut Vec<String>) {
        let what = name(&control);
        let run_id = &self.run_id;
        let outcome = match &control {
            HostControl::UserMessage { text } | HostControl::FollowUp { text } => {
                self.call("run/follow_up", json!({ "run_id": run_id, "text": text }))
                    .await
            }
            HostControl::Steer { text } => {
                self.call("run/steer", json!({ "run_id": run_id, "text": text }))
                    .await
            }
            HostControl::Cancel => self.call("run/cancel", json!({ "run_id": run_id })).await,
            HostControl::PermissionAnswer {
                request_id,
                decision,
                scope,
            } => {
                let params = json!({ "run_id": run_id, "request_id": request_id,
                    "decision": decision, "scope": scope });
                let outcome = self.call("permission/resolve", params).await;
                match &outcome {
                    Err(error) if error.kind_name() == Some("invalid_params") => {
                        eprintln!(
                            "keel: answers with scope {scope:?} are not supported; request {request_id} is denied"
                        );
                        self.deny(request_id).await;
                        pending.retain(|pending| pending != request_id);
                    }
                    Err(error) if error.kind_name() == Some("not_found") => {}
                    _ => pending.retain(|pending| pending != request_id),
                }
                outcome
            }
            _ => {
                eprintln!("keel: `{what}` is not supported here; ignored");
                Ok(Value::Null)
            }
        };
        if let Err(error) = outcome {
            eprintln!("keel: `{what}` not applied: {}", error.message);
        }
    }
}

/// The message's `type`, for notes.
fn name(control: &HostControl) -> String {
    serde_json::to_value(control)
        .ok()
        .and_then(|value| value.get("type")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "message".to_owned())
}

/// Reads standard input on its own thread, one parsed line at a time; the
/// channel closes at the end of input (or a read error, reported first).
fn spawn_reader() -> mpsc::UnboundedReceiver<Input> {
    let (sender, receiver) = mpsc::unbounded_channel();
    let spawned = std::thread::Builder::new()
        .name("keel-stdin".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            let mut reader = stdin.lock();
            let mut number = 0usize;
            loop {
                number += 1;
                let mut line = Vec::new();
                let read = std::io::Read::take(&mut reader, MAX_LINE_BYTES + 1)
                    .read_until(b'\n', &mut line);
                let input = match read {
                    Ok(0) => return,
                    Ok(_) if !line.ends_with(b"\n") && line.len() as u64 > MAX_LINE_BYTES => {
                        // Skip the rest of the overlong line.
                        let _ = reader.skip_until(b'\n');
                        Err(format!(
                            "standard input line {number} is longer than {MAX_LINE_BYTES} bytes; ignored"
                        ))
                    }
                    Ok(_) if line.trim_ascii().is_empty() => continue,
                    Ok(_) => serde_json::from_slice::<HostControl>(&line).map_err(|error| {
                        format!(
                            "standard input line {number} is not a control message ({error}); ignored"
                        )
                    }),
                    Err(error) => {
                        let _ = sender.send(Err(format!("cannot read standard input: {error}")));
                        return;
                    }
                };
                if sender.send(input).is_err() {
                    return;
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "no thread to read standard input; it is treated as ended");
    }
    receiver
}
