//! Dispatching hooks: each handler at a point in registration order, its
//! answer checked against what the point allows, every step reported.
//!
//! Invariants:
//! - A handler runs in a task of its own with its time budget; one that
//!   fails, panics, hangs or is cut short by the run's cancel is reported
//!   (`hook_failed`) and its outcome ignored — or, fail-closed at a point
//!   that can block, what the point guards is blocked. The run never waits
//!   longer than the budget and never unwinds from a handler's panic.
//! - An outcome the point does not allow, a transformed value that fails
//!   the point's check, and an entry of a kind the handler's extension did
//!   not register (or that fails the kind's validator) are rejected
//!   (`hook_outcome_rejected`), never applied — and a fail-closed handler
//!   whose answer is rejected blocks, as if it had failed. At `tool_call` a transform
//!   that fails the tool's schema refuses the call: the handler meant to
//!   change it, and running the original instead would fail open.
//! - Transforms chain: each handler sees the value the previous one left.
//!   The first block ends the dispatch.
//! - A point with no handler costs one lookup: nothing is serialised.
//! - Entries a handler gives are held until the turn loop appends them
//!   between groups (`take_entries`), never inside a tool batch's group.
//!
//! Cancel safety: dropping a dispatch aborts the handler's task.

use std::sync::Mutex;

use keel_protocol::{EntryPayload, HookOutcomeKind, HookPoint, RunEventKind};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::emitter::Emitter;
use crate::extension::{Hook, HookEvent, HookOutcome, HookReply, Hooks};

/// The longest supplement a handler may give, in bytes.
pub(crate) const MAX_SUPPLEMENT_BYTES: usize = 64 * 1024;

/// What a point's value is, for a point whose outcome may transform it.
pub(crate) struct Subject<'a> {
    /// The payload key holding the value.
    pub(crate) key: &'static str,
    /// The check a transformed value must pass; the error says why not.
    pub(crate) check: &'a (dyn Fn(&Value) -> Result<(), String> + Sync),
    /// Whether a value that fails the check blocks (tool arguments) or is
    /// only rejected.
    pub(crate) strict: bool,
}

/// A block: which extension, its code and its message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Blocked {
    pub(crate) extension: String,
    pub(crate) code: String,
    pub(crate) message: String,
    /// The block is a strict subject's failed check, not the handler's own.
    pub(crate) invalid: bool,
}

/// What a dispatch left.
#[derive(Debug, Default)]
pub(crate) struct Dispatched {
    /// The subject's value when a handler transformed it.
    pub(crate) transformed: Option<Value>,
    /// Supplements, in handler order, each headed by its extension.
    pub(crate) supplements: Vec<(String, String)>,
    /// The first block.
    pub(crate) blocked: Option<Blocked>,
}

/// One run's view of the kernel's hooks.
pub(crate) struct HookScope<'a> {
    pub(crate) hooks: &'a Hooks,
    pub(crate) emitter: &'a Emitter,
    pub(crate) cancel: &'a CancellationToken,
    pub(crate) run_id: &'a str,
    pub(crate) session_id: &'a str,
    /// Entries handlers gave, held for the turn loop.
    pub(crate) entries: &'a Mutex<Vec<EntryPayload>>,
}

impl HookScope<'_> {
    /// Whether any handler is registered at `point`; callers skip building
    /// the payload when not.
    pub(crate) fn handles(&self, point: HookPoint) -> bool {
        self.hooks.handles(point)
    }

    /// The entries handlers gave since the last call.
    pub(crate) fn take_entries(&self) -> Vec<EntryPayload> {
        self.entries
            .lock()
            .map(|mut entries| std::mem::take(&mut *entries))
            .unwrap_or_default()
    }

    /// Dispatches `payload` at `point` to each matching handler in turn.
    /// `call` is the tool call's (tool name, call id) at the tool points.
    pub(crate) async fn dispatch(
        &self,
        point: HookPoint,
        call: Option<(&str, &str)>,
        mut payload: Value,
        subject: Option<Subject<'_>>,
    ) -> Dispatched {
        let mut dispatched = Dispatched::default();
        let call_id = call.map(|(_, id)| id.to_owned());
        for (extension, hook) in &self.hooks.hooks {
            if !hook.points.contains(&point) {
                continue;
            }
            if let (Some(matcher), Some((tool, _))) = (&hook.matcher, call)
                && !matcher.matches(tool)
            {
                continue;
            }
            let event = HookEvent {
                point,
                run_id: self.run_id.to_owned(),
                session_id: self.session_id.to_owned(),
                payload: payload.clone(),
            };
            let reply = match answer(hook, event, self.cancel).await {
                Ok(reply) => reply,
                Err(reason) => {
                    let blocks = hook.fail_closed && point.allows(HookOutcomeKind::Block);
                    self.emitter.emit(RunEventKind::HookFailed {
                        extension: extension.to_string(),
                        point,
                        call_id: call_id.clone(),
                        reason: reason.clone(),
                        blocked: blocks,
                    });
                    if blocks {
                        dispatched.blocked = Some(Blocked {
                            extension: extension.to_string(),
                            code: "hook_failed".into(),
                            message: format!(
                                "blocked: the fail-closed hook of extension `{extension}` \
                                 failed ({reason})"
                            ),
                            invalid: false,
                        });
                        break;
                    }
                    continue;
                }
            };
            let HookReply { outcome, entries } = reply;
            let kind = outcome.kind();
            let reject = |reason: String| {
                self.emitter.emit(RunEventKind::HookOutcomeRejected {
                    extension: extension.to_string(),
                    point,
                    call_id: call_id.clone(),
                    outcome: kind,
                    reason,
                });
            };
            for (entry_kind, data) in entries {
                match self.entry(extension, &entry_kind, data) {
                    Ok(entry) => {
                        if let Ok(mut held) = self.entries.lock() {
                            held.push(entry);
                        }
                    }
                    Err(reason) => reject(reason),
                }
            }
            // A fail-closed handler whose answer is rejected closed too: it
            // meant to guard the action, and its answer cannot be used.
            let closes = hook.fail_closed && point.allows(HookOutcomeKind::Block);
            let closed = |reason: &str| Blocked {
                extension: extension.to_string(),
                code: "answer_rejected".into(),
                message: format!(
                    "blocked: the fail-closed hook of extension `{extension}` gave an answer \
                     that was rejected ({reason})"
                ),
                invalid: false,
            };
            if !point.allows(kind) {
                let allowed: Vec<&str> = point.allowed().iter().map(|kind| kind.as_str()).collect();
                let reason = format!(
                    "`{}` allows only {}, not {}",
                    point.as_str(),
                    allowed.join(", "),
                    kind.as_str()
                );
                reject(reason.clone());
                if closes {
                    dispatched.blocked = Some(closed(&reason));
                    break;
                }
                continue;
            }
            match outcome {
                HookOutcome::Observe => {}
                HookOutcome::Transform(value) => {
                    let Some(subject) = &subject else {
                        let reason = format!("`{}` has nothing to transform", point.as_str());
                        reject(reason.clone());
                        if closes {
                            dispatched.blocked = Some(closed(&reason));
                            break;
                        }
                        continue;
                    };
                    if let Err(reason) = (subject.check)(&value) {
                        let reason = format!("the transformed value is refused: {reason}");
                        reject(reason.clone());
                        if subject.strict {
                            dispatched.blocked = Some(Blocked {
                                extension: extension.to_string(),
                                code: "invalid_transform".into(),
                                message: format!(
                                    "refused: extension `{extension}` changed the {} and {reason}",
                                    subject.key
                                ),
                                invalid: true,
                            });
                            break;
                        }
                        if closes {
                            dispatched.blocked = Some(closed(&reason));
                            break;
                        }
                        continue;
                    }
                    if let Value::Object(map) = &mut payload {
                        map.insert(subject.key.to_owned(), value.clone());
                    }
                    dispatched.transformed = Some(value);
                }
                HookOutcome::Supplement(text) => {
                    if text.len() > MAX_SUPPLEMENT_BYTES {
                        let reason = format!(
                            "the supplement is {} bytes, past the {MAX_SUPPLEMENT_BYTES}-byte limit",
                            text.len()
                        );
                        reject(reason.clone());
                        if closes {
                            dispatched.blocked = Some(closed(&reason));
                            break;
                        }
                        continue;
                    }
                    dispatched.supplements.push((extension.to_string(), text));
                }
                HookOutcome::Block { code, message } => {
                    self.emitter.emit(RunEventKind::HookBlocked {
                        extension: extension.to_string(),
                        point,
                        call_id: call_id.clone(),
                        code: code.clone(),
                        message: message.clone(),
                    });
                    dispatched.blocked = Some(Blocked {
                        extension: extension.to_string(),
                        code,
                        message,
                        invalid: false,
                    });
                    break;
                }
            }
            self.emitter.emit(RunEventKind::HookDispatched {
                extension: extension.to_string(),
                point,
                call_id: call_id.clone(),
                outcome: kind,
            });
        }
        dispatched
    }

    /// A `custom` entry of `kind` from `extension`, if the kind is its own
    /// and the data passes the kind's validator.
    fn entry(&self, extension: &str, kind: &str, data: Value) -> Result<EntryPayload, String> {
        let Some((owner, validator)) = self.hooks.kinds.get(kind) else {
            return Err(format!("entry kind `{kind}` is not registered"));
        };
        if owner.as_ref() != extension {
            return Err(format!(
                "entry kind `{kind}` belongs to extension `{owner}`, not `{extension}`"
            ));
        }
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| validator(&data)));
        match checked {
            Ok(Ok(())) => Ok(EntryPayload::Custom {
                custom_kind: kind.to_owned(),
                data,
            }),
            Ok(Err(reason)) => Err(format!("the `{kind}` entry is invalid: {reason}")),
            Err(_) => Err(format!("the validator of entry kind `{kind}` panicked")),
        }
    }
}

/// Runs one handler in its own task within its budget; the error says why
/// there is no answer.
async fn answer(
    hook: &Hook,
    event: HookEvent,
    cancel: &CancellationToken,
) -> Result<HookReply, String> {
    let handler = hook.handler.clone();
    let task = tokio::spawn(async move { handler.handle(event).await });
    // Aborts the handler when this dispatch is dropped or gives up on it.
    let _abort = AbortOnDrop(task.abort_handle());
    let budget = hook.timeout;
    tokio::select! {
        joined = tokio::time::timeout(budget, task) => match joined {
            Err(_) => Err(format!(
                "it did not answer within its {} ms budget",
                budget.as_millis()
            )),
            Ok(Err(error)) if error.is_panic() => Err("it panicked".into()),
            Ok(Err(_)) => Err("its task was cancelled".into()),
            Ok(Ok(Err(error))) => Err(error.to_string()),
            Ok(Ok(Ok(reply))) => Ok(reply),
        },
        () = cancel.cancelled() => Err("the run was cancelled before it answered".into()),
    }
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
