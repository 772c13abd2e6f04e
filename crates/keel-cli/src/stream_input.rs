//! `keel run --input-format stream-json`: a script drives the whole
//! `AgentRun` seam through standard input, one `HostControl` message per
//! line (`keel schema host_control`), without a server.
//!
//! - `user_message` (and `follow_up`) with no run active starts the next
//!   run, in the same session as the one before; during a run both queue a
//!   follow-up (`AgentRun::follow_up`).
//! - `steer` queues a steering message (`AgentRun::steer`), `cancel`
//!   cancels the run (`AgentRun::cancel`), `permission_answer` answers a
//!   `permission_requested` event by its id. With no run active they are
//!   ignored with a note on stderr.
//! - A line that is not a control message is ignored with a note on stderr
//!   naming its line number; blank lines are skipped.
//! - End of input denies the pending permission requests and every later
//!   one, lets the active run finish, and ends `keel` after it. A prompt
//!   argument starts the first run without waiting for a message; `keel
//!   resume` starts it by continuing the interrupted run (`FirstRun::Resume`),
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

use std::io::BufRead;
use std::process::ExitCode;

use keel_host::sessions;
use keel_kernel::{AgentKernel, AgentRun, ControlError, RunSpec};
use keel_protocol::{HostControl, PermissionResolution, RunEventKind, RunResult, SessionLine};
use keel_session::JsonlStore;
use keel_tools::changes::WorkspaceChanges;
use tokio::sync::{mpsc, watch};

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
    /// By continuing the session's interrupted run (`AgentKernel::resume_with`).
    Resume,
}

/// Runs until input ends with no run active (or a signal); see the module docs.
pub async fn run(
    kernel: &AgentKernel,
    store: &JsonlStore,
    output: Output,
    first: FirstRun,
    session: Option<String>,
    spec: impl Fn(String, Option<String>) -> RunSpec,
) -> Result<ExitCode, StartupError> {
    let received = signals::Received::install();
    let (signalled, watched) = watch::channel(false);
    let driver = Driver {
        kernel,
        store,
        output,
        inputs: spawn_reader(),
        open: true,
        signalled: watched,
    };
    let last = tokio::select! {
        last = driver.run_all(first, session, spec) => last?,
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
    kernel: &'a AgentKernel,
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
        spec: impl Fn(String, Option<String>) -> RunSpec,
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
            let started = match prompt {
                Some(prompt) => self.kernel.create_run(spec(prompt, session.clone())).await,
                None => {
                    self.kernel
                        .resume_with(spec(String::new(), session.clone()))
                        .await
                }
            };
            let run = match started {
                Ok(run) => run,
                Err(error) if last.is_none() => {
                    return Err(StartupError::new(error.code(), error.to_string()));
                }
                Err(error) => {
                    eprintln!("keel: no run started: {error}");
                    continue;
                }
            };
            session = Some(run.session_id().to_owned());
            let (result, changes) = self.drive(&run).await?;
            let path = sessions::session_file(self.store, &result.session_id)?;
            let line = SessionLine {
                id: result.session_id.clone(),
                path: path.display().to_string(),
            };
            host::finish(&self.output, &result, changes.as_ref(), Some(line))?;
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
    /// returns its result and the workspace's changes.
    async fn drive(
        &mut self,
        run: &AgentRun,
    ) -> Result<(RunResult, Option<WorkspaceChanges>), StartupError> {
        let mut events = run
            .events()
            .map_err(|error| StartupError::new("host", error.to_string()))?;
        let mut pending: Vec<String> = Vec::new();
        let mut cancelled = *self.signalled.borrow();
        if cancelled {
            run.cancel();
        }
        let mut ticks = tokio::time::interval(crate::view::TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = ticks.tick(), if self.output.wants_ticks() => self.output.tick(),
                event = events.next() => {
                    let Some(event) = event else { break };
                    self.output.event(&event);
                    if let RunEventKind::PermissionRequested { request_id, .. } = &event.kind {
                        if self.open {
                            pending.push(request_id.clone());
                        } else {
                            deny(run, request_id);
                        }
                    }
                }
                input = self.inputs.recv(), if self.open => match input {
                    None => {
                        self.open = false;
                        for request_id in pending.drain(..) {
                            deny(run, &request_id);
                        }
                    }
                    Some(Ok(control)) => apply(run, control, &mut pending),
                    Some(Err(problem)) => eprintln!("keel: {problem}"),
                },
                _ = self.signalled.wait_for(|signalled| *signalled), if !cancelled => {
                    cancelled = true;
                    run.cancel();
                }
            }
        }
        Ok(host::end(run).await)
    }
}

/// Applies one control message to the active run.
fn apply(run: &AgentRun, control: HostControl, pending: &mut Vec<String>) {
    let what = name(&control);
    let outcome = match &control {
        HostControl::UserMessage { text } | HostControl::FollowUp { text } => {
            run.follow_up(text.clone())
        }
        HostControl::Steer { text } => run.steer(text.clone()),
        HostControl::Cancel => {
            run.cancel();
            Ok(())
        }
        _ => match control.permission_answer() {
            Some((request_id, answer)) => {
                let outcome = run.resolve_permission(request_id, answer);
                if let Err(ControlError::UnsupportedScope(scope)) = &outcome {
                    eprintln!(
                        "keel: answers with scope {scope:?} are not supported; request {request_id} is denied"
                    );
                    deny(run, request_id);
                }
                if !matches!(outcome, Err(ControlError::UnknownPermissionRequest(_))) {
                    pending.retain(|pending| pending != request_id);
                }
                outcome
            }
            None => {
                eprintln!("keel: `{what}` is not supported here; ignored");
                Ok(())
            }
        },
    };
    if let Err(error) = outcome {
        eprintln!("keel: `{what}` not applied: {error}");
    }
}

fn deny(run: &AgentRun, request_id: &str) {
    // A stale id means the run already moved on (e.g. it was cancelled).
    let _ = run.resolve_permission(request_id, PermissionResolution::Denied);
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
