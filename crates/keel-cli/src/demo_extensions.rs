//! `keel demo extensions`: a host's extensions at work on the fixture
//! project (docs/extensions.md).
//!
//! - `success`: a `before_run` hook supplements the project's convention
//!   (check.sh is the test); a `tool_call` hook blocks the model's edit of
//!   check.sh and records each edit it judged as a `guard.audit` entry;
//!   the model fixes calc.sh instead and the run settles.
//! - `ordering`: two extensions transform the same `write` in registration
//!   order — the second sees the first's change — and the file holds both.
//! - `invalid-outcome`: handlers that answer what their point does not
//!   allow (a supplement at `tool_call`, a block at `run_end`), one that
//!   fails, and a transform that breaks the call's arguments: each is
//!   reported, none is applied, the broken call is refused, and the run
//!   settles.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use keel_kernel::extension::{HookError, HookFuture, HookHandler};
use keel_kernel::{Extension, Hook, HookEvent, HookPoint, HookReply};
use serde_json::{Value, json};

use crate::output::Output;
use crate::startup::StartupError;

pub async fn run(case: &str, workspace: &Path, output: &Output) -> Result<ExitCode, StartupError> {
    let (script, extensions) = match case {
        "success" => (
            include_str!("../demos/extensions-success.json"),
            vec![conventions(), guard()],
        ),
        "ordering" => (
            include_str!("../demos/extensions-ordering.json"),
            vec![reviewer("first", None), reviewer("second", Some("first"))],
        ),
        "invalid-outcome" => (
            include_str!("../demos/extensions-invalid-outcome.json"),
            vec![misbehaving()],
        ),
        _ => {
            return Err(StartupError::new(
                "unknown_case",
                format!("unknown case `{case}`"),
            ));
        }
    };
    crate::demo::fix_the_bug(script, workspace, output, |config| {
        config.extensions = extensions;
    })
    .await
}

/// A handler answering from the event alone.
fn answering(
    answer: impl Fn(&HookEvent) -> HookReply + Send + Sync + 'static,
) -> Arc<dyn HookHandler> {
    Arc::new(move |event: HookEvent| {
        let reply = answer(&event);
        async move { Ok::<_, HookError>(reply) }
    })
}

/// States the project's convention before the run's first request.
fn conventions() -> Extension {
    Extension::new("conventions")
        .version("1.0.0")
        .hook(Hook::new(
            [HookPoint::BeforeRun],
            answering(|_| {
                HookReply::supplement(
                    "check.sh is the project's test: fix the code, never the test.",
                )
            }),
        ))
}

/// Blocks edits of check.sh and audits every edit it judges.
fn guard() -> Extension {
    Extension::new("guard")
        .version("1.0.0")
        .entry_kind("guard.audit", |data: &Value| {
            match data["path"].is_string() && data["blocked"].is_boolean() {
                true => Ok(()),
                false => Err("an audit entry needs `path` and `blocked`".into()),
            }
        })
        .hook(
            Hook::new(
                [HookPoint::ToolCall],
                answering(|event| {
                    let path = event.payload["arguments"]["path"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    let blocked = path.trim_start_matches("./") == "check.sh";
                    let reply = match blocked {
                        true => HookReply::block(
                            "protected",
                            "check.sh is the test; change the code it checks instead",
                        ),
                        false => HookReply::observe(),
                    };
                    reply.with_entry("guard.audit", json!({"path": path, "blocked": blocked}))
                }),
            )
            .matching("write|edit"),
        )
}

/// Appends `reviewed by NAME` to every `write`'s content; with `after`,
/// blocks a write the extension `after` did not review first.
fn reviewer(name: &'static str, after: Option<&'static str>) -> Extension {
    Extension::new(name).hook(
        Hook::new(
            [HookPoint::ToolCall],
            answering(move |event| {
                let mut arguments = event.payload["arguments"].clone();
                let content = arguments["content"].as_str().unwrap_or_default().to_owned();
                if let Some(first) = after
                    && !content.contains(&format!("reviewed by {first}"))
                {
                    return HookReply::block("out_of_order", format!("{first} reviews first"));
                }
                arguments["content"] = Value::from(format!("{content}reviewed by {name}\n"));
                HookReply::transform(arguments)
            }),
        )
        .matching("write"),
    )
}

/// A handler that always fails.
struct Fails;

impl HookHandler for Fails {
    fn handle(&self, _event: HookEvent) -> HookFuture<'_> {
        Box::pin(async { Err(HookError::new("its audit database is unreachable")) })
    }
}

/// Answers what its points do not allow, fails, and breaks arguments.
fn misbehaving() -> Extension {
    Extension::new("misbehaving")
        .hook(Hook::new(
            [HookPoint::ToolCall],
            answering(|_| HookReply::supplement("tool_call takes no supplement")),
        ))
        .hook(Hook::new(
            [HookPoint::RunEnd],
            answering(|_| HookReply::block("late", "run_end can only be observed")),
        ))
        .hook(Hook::new([HookPoint::TurnStart], Arc::new(Fails)))
        .hook(Hook::new(
            [HookPoint::ToolCall],
            answering(|event| {
                let mut arguments = event.payload["arguments"].clone();
                if let Some(map) = arguments.as_object_mut() {
                    map.remove("path");
                }
                HookReply::transform(arguments)
            }),
        ))
}
