//! A 300-turn scripted run in a 16k-token window settles: it compacts
//! several times, no request passes the window, every checkpoint's
//! evidence equals the tool calls actually made in its span, and each
//! summary request holds the previous summary plus the new span only.
//!
//! The model (`common::Sim`) plays 300 turns of real tool calls — `read`
//! (some of missing files), `write`, `edit`, `bash` (some failing) — in a
//! real workspace, counts every request with o200k and refuses none; the
//! test checks the counts. The expected evidence is computed here from the
//! calls the script made and the results the session holds, independently
//! of the kernel's own gathering.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use common::{Reply, Sim};
use keel_kernel::{AgentKernel, Instructions, RunSpec};
use keel_protocol::{
    CheckpointEvidence, CommandEvidence, Entry, EntryPayload, Message, PermissionMode, RunState,
    ToolErrorEvidence, ToolStatus, UserContent,
};
use keel_session::{MemoryStore, SessionStore};
use keel_tools::Workspace;
use keel_tools::builtin::{BashOptions, default_tools};
use serde_json::{Value, json};

const TURNS: usize = 300;
const WINDOW: u64 = 16_384;

/// The call of turn `turn` (1-based): tool name and arguments.
fn call(turn: usize) -> (&'static str, Value) {
    let body = format!(
        "turn {turn}: {}\n",
        "lorem ipsum dolor sit amet ".repeat(40)
    );
    match turn % 6 {
        0 => (
            "bash",
            json!({"command": format!("printf 'row %s\\n' $(seq 1 120); echo turn {turn}")}),
        ),
        1 => (
            "write",
            json!({"path": format!("notes/{}.txt", turn % 9), "content": body}),
        ),
        2 => (
            "read",
            json!({"path": format!("notes/{}.txt", (turn + 8) % 9)}),
        ),
        3 if turn.is_multiple_of(5) => (
            "bash",
            json!({"command": format!("echo failing {turn}; exit 3")}),
        ),
        3 => ("read", json!({"path": format!("missing/{turn}.txt")})),
        4 => (
            "edit",
            json!({"path": format!("notes/{}.txt", (turn + 6) % 9), "edits": [{"old_text": "lorem", "new_text": "LOREM"}]}),
        ),
        _ => (
            "bash",
            json!({"command": format!("ls notes | head -3; echo {turn}")}),
        ),
    }
}

/// The evidence the calls among `covered` must give, from the script's
/// calls and the results the session holds.
fn expected_evidence(
    covered: &[&Entry],
    issued: &HashMap<String, (&'static str, Value)>,
    results: &HashMap<String, keel_protocol::ToolResultMessage>,
) -> CheckpointEvidence {
    let mut expected = CheckpointEvidence::default();
    for entry in covered {
        let EntryPayload::Message {
            message: Message::Assistant(message),
        } = &entry.payload
        else {
            continue;
        };
        for call in message.tool_calls() {
            let (name, arguments) = &issued[&call.id];
            let result = &results[&call.id];
            let path = arguments["path"].as_str().map(str::to_owned);
            if result.status == ToolStatus::Error {
                expected.tool_errors.push(ToolErrorEvidence::new(
                    call.id.clone(),
                    (*name).to_owned(),
                    result.error.as_ref().unwrap().code,
                ));
            }
            let success = result.status == ToolStatus::Success;
            match *name {
                "read" if success => {
                    let path = path.unwrap();
                    if !expected.files_read.contains(&path) {
                        expected.files_read.push(path);
                    }
                }
                "write" | "edit" if success => {
                    let path = path.unwrap();
                    if !expected.files_modified.contains(&path) {
                        expected.files_modified.push(path);
                    }
                }
                "bash" => expected.commands.push(CommandEvidence::new(
                    call.id.clone(),
                    arguments["command"].as_str().unwrap().to_owned(),
                    result.status,
                    result.details.as_ref().unwrap()["exit_code"].as_i64(),
                )),
                _ => {}
            }
        }
    }
    expected
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_turns_in_a_16k_window_settle() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    std::fs::create_dir(dir.path().join("notes")).unwrap();
    let mut issued = HashMap::new();
    let mut replies = Vec::new();
    for turn in 1..=TURNS {
        let (name, arguments) = call(turn);
        let id = format!("call_{turn}");
        replies.push(Reply::call(&id, name, &arguments.to_string()));
        issued.insert(id, (name, arguments));
    }
    replies.push(Reply::text("All 300 steps are done."));
    let sim = Arc::new(Sim::new(replies, vec![], None));
    let store = Arc::new(MemoryStore::new());
    let kernel = AgentKernel::builder()
        .provider(sim.clone())
        .model("sim-16k")
        .context_window(WINDOW)
        .workspace(Workspace::new(dir.path()).unwrap())
        .store(store.clone())
        .tools(default_tools(BashOptions::default()))
        .project_instructions(Instructions::none())
        .build()
        .unwrap();
    let run = kernel
        .create_run(RunSpec::new("Work through the 300 steps.").mode(PermissionMode::Full))
        .await
        .unwrap();
    let mut events = run.events().unwrap();
    let mut compactions = 0;
    while let Some(event) = events.next().await {
        if event.type_name() == "compaction_succeeded" {
            compactions += 1;
        }
    }
    let result = run.result().await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");

    // No request passed the window (counted by the model, with o200k).
    let sizes = sim.sizes.lock().unwrap().clone();
    assert_eq!(sizes.len(), TURNS + 1);
    let largest = sizes.iter().max().copied().unwrap();
    assert!(largest <= WINDOW, "a request of {largest} tokens");

    // It compacted several times, and every compaction wrote a checkpoint.
    let entries = store.entries(&result.session_id).await.unwrap();
    let checkpoints: Vec<&Entry> = entries
        .iter()
        .filter(|entry| matches!(entry.payload, EntryPayload::Checkpoint { .. }))
        .collect();
    eprintln!(
        "{} checkpoints, {} summary requests, largest request {largest} tokens",
        checkpoints.len(),
        summaries_len(&sim)
    );
    assert!(checkpoints.len() >= 5, "{} checkpoints", checkpoints.len());
    assert_eq!(checkpoints.len(), compactions);
    let summaries = sim.summaries.lock().unwrap().clone();
    assert!(summaries.len() >= checkpoints.len());

    // Every checkpoint's evidence equals the calls made in its span.
    let by_id: BTreeMap<&str, &Entry> = entries.iter().map(|e| (e.id.as_str(), e)).collect();
    let results: HashMap<String, keel_protocol::ToolResultMessage> = entries
        .iter()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::Message {
                message: Message::ToolResult(result),
            } => Some((result.call_id.clone(), result.clone())),
            _ => None,
        })
        .collect();
    let mut previous: Option<(&str, &str)> = None;
    for checkpoint in &checkpoints {
        let EntryPayload::Checkpoint {
            first_kept_entry_id,
            covered_entry_ids,
            previous_checkpoint_id,
            evidence,
            ..
        } = &checkpoint.payload
        else {
            unreachable!()
        };
        let covered: Vec<&Entry> = covered_entry_ids
            .iter()
            .map(|id| by_id[id.as_str()])
            .collect();
        let expected = expected_evidence(&covered, &issued, &results);
        assert_eq!(
            evidence.as_deref(),
            Some(&expected),
            "checkpoint {}",
            checkpoint.id
        );
        // Coverage starts where the previous checkpoint's kept part began.
        match previous {
            Some((id, kept)) => {
                assert_eq!(previous_checkpoint_id.as_deref(), Some(id));
                assert_eq!(covered_entry_ids[0], kept);
            }
            None => assert_eq!(previous_checkpoint_id, &None),
        }
        previous = Some((checkpoint.id.as_str(), first_kept_entry_id.as_str()));
    }

    // A later summary request holds the previous summary and only the new
    // span: none of the calls the previous checkpoint covered.
    let mut earlier: Vec<String> = Vec::new();
    for (index, checkpoint) in checkpoints.iter().enumerate() {
        let EntryPayload::Checkpoint {
            covered_entry_ids, ..
        } = &checkpoint.payload
        else {
            unreachable!()
        };
        let request = summaries
            .iter()
            .find(|request| {
                let text = request_text(request);
                covered_entry_ids.iter().any(|id| {
                    let EntryPayload::Message {
                        message: Message::Assistant(m),
                    } = &by_id[id.as_str()].payload
                    else {
                        return false;
                    };
                    m.tool_calls()
                        .any(|call| text.contains(&format!("({})]", call.id)))
                })
            })
            .expect("a summary request for each checkpoint");
        let text = request_text(request);
        if index > 0 {
            let EntryPayload::Checkpoint {
                summary: before, ..
            } = &checkpoints[index - 1].payload
            else {
                unreachable!()
            };
            assert!(
                text.contains(&format!(
                    "<previous-summary>\n{}\n</previous-summary>",
                    before.trim()
                )),
                "checkpoint {index}: the previous summary is not in the request"
            );
        }
        for call in &earlier {
            assert!(
                !text.contains(&format!("({call})]")),
                "checkpoint {index}: {call} was covered before and is summarised again"
            );
        }
        for id in covered_entry_ids {
            if let EntryPayload::Message {
                message: Message::Assistant(m),
            } = &by_id[id.as_str()].payload
            {
                earlier.extend(m.tool_calls().map(|call| call.id.clone()));
            }
        }
    }
}

fn request_text(request: &keel_provider::ModelRequest) -> String {
    request
        .messages
        .iter()
        .filter_map(|message| match message.as_ref() {
            Message::User(user) => Some(
                user.content
                    .iter()
                    .filter_map(|block| match block {
                        UserContent::Text { text } => Some(text.as_str()),
                        UserContent::Image(_) => None,
                    })
                    .collect::<String>(),
            ),
            _ => None,
        })
        .collect()
}

fn summaries_len(sim: &Sim) -> usize {
    sim.summaries.lock().unwrap().len()
}

/// A summary in a model's own format: three headings of its own, none of
/// Keel's eight.
fn own_format(n: usize) -> String {
    format!(
        "### Status\n- summary {n}: working through the numbered steps\n\
         ### Files touched\n- notes/0.txt … notes/8.txt were written, read and edited\n\
         ### Next\n- keep going with the next step"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_steps_with_summaries_in_the_models_own_format_settle() {
    const STEPS: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    std::fs::create_dir(dir.path().join("notes")).unwrap();
    let mut replies: Vec<Reply> = (1..=STEPS)
        .map(|turn| {
            let (name, arguments) = call(turn);
            Reply::call(&format!("call_{turn}"), name, &arguments.to_string())
        })
        .collect();
    replies.push(Reply::text("All 200 steps are done."));
    // Every summary request is answered in the model's own format (the
    // queue outlasts the run; the Sim's default would be Keel's headings).
    let summaries: Vec<Reply> = (1..=1_000).map(|n| Reply::Text(own_format(n))).collect();
    let sim = Arc::new(Sim::new(replies, summaries, None));
    let store = Arc::new(MemoryStore::new());
    let kernel = AgentKernel::builder()
        .provider(sim.clone())
        .model("sim-16k")
        .context_window(WINDOW)
        .workspace(Workspace::new(dir.path()).unwrap())
        .store(store.clone())
        .tools(default_tools(BashOptions::default()))
        .project_instructions(Instructions::none())
        .build()
        .unwrap();
    let run = kernel
        .create_run(RunSpec::new("Work through the 200 steps.").mode(PermissionMode::Full))
        .await
        .unwrap();
    let mut events = run.events().unwrap();
    let (mut compactions, mut failures) = (0, 0);
    while let Some(event) = events.next().await {
        match event.type_name() {
            "compaction_succeeded" => compactions += 1,
            "compaction_failed" => failures += 1,
            _ => {}
        }
    }
    let result = run.result().await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");
    assert_eq!(failures, 0);

    // Every step ran, and no request passed the window.
    let sizes = sim.sizes.lock().unwrap().clone();
    assert_eq!(sizes.len(), STEPS + 1);
    let largest = sizes.iter().max().copied().unwrap();
    assert!(largest <= WINDOW, "a request of {largest} tokens");

    // It compacted along the way; each checkpoint holds the model's own
    // summary as free text, written after one corrective retry.
    let entries = store.entries(&result.session_id).await.unwrap();
    let checkpoints: Vec<&str> = entries
        .iter()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::Checkpoint { summary, .. } => Some(summary.as_str()),
            _ => None,
        })
        .collect();
    assert!(checkpoints.len() >= 3, "{} checkpoints", checkpoints.len());
    assert_eq!(checkpoints.len(), compactions);
    assert!(
        checkpoints
            .iter()
            .all(|summary| summary.starts_with("### Status")),
        "{checkpoints:?}"
    );
    let requests = sim.summaries.lock().unwrap().clone();
    let corrections = requests
        .iter()
        .filter(|request| request_text(request).contains("lacks the heading `Goal`"))
        .count();
    assert!(
        corrections >= 1 && corrections <= compactions,
        "{corrections} corrections"
    );
    eprintln!(
        "{} checkpoints, {} summary requests ({corrections} corrections), largest request {largest} tokens",
        checkpoints.len(),
        requests.len()
    );
}
