//! Each kernel has its own store of full tool outputs: a run of one kernel
//! cannot `read` a `keel-output:` reference another kernel's run was given,
//! even in the same process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{Recorder, Reply};
use keel_kernel::{AgentKernel, RunSpec};
use keel_protocol::{Message, RunState};
use keel_tools::Workspace;
use keel_tools::builtin::{BashOptions, all_tools};
use keel_tools::outputs::OutputStore;

/// What the run's last request held as its last tool result.
fn last_result(provider: &Recorder) -> String {
    let requests = provider.requests();
    let request = requests.last().expect("the model was asked");
    request
        .messages
        .iter()
        .rev()
        .find_map(|message| match message.as_ref() {
            Message::ToolResult(result) => Some(result.text()),
            _ => None,
        })
        .expect("a tool result")
}

/// A kernel over `root` whose model makes one call, then stops.
fn kernel(
    root: &std::path::Path,
    outputs: OutputStore,
    call: Reply,
) -> (AgentKernel, Arc<Recorder>) {
    let provider = Arc::new(Recorder::new(vec![call, Reply::text("done.")]));
    let kernel = AgentKernel::builder()
        .provider(provider.clone())
        .workspace(Workspace::new(root).unwrap())
        .tools(all_tools(BashOptions::default()))
        .outputs(outputs)
        .build()
        .unwrap();
    (kernel, provider)
}

async fn run(kernel: &AgentKernel) {
    let run = kernel.create_run(RunSpec::new("go")).await.unwrap();
    let result = run.result().await;
    assert_eq!(result.state, RunState::Settled, "{result:?}");
}

#[tokio::test]
async fn a_run_cannot_read_another_kernels_saved_output() {
    let temp = tempfile::tempdir().unwrap();
    let (root_a, root_b) = (temp.path().join("a"), temp.path().join("b"));
    std::fs::create_dir_all(&root_a).unwrap();
    std::fs::create_dir_all(&root_b).unwrap();
    let line = format!("secret-of-b {}\n", "x".repeat(300));
    std::fs::write(root_b.join("big.txt"), line.repeat(1000)).unwrap();

    // Kernel B's grep result is cut; its full output is saved in B's store
    // (kept after the run, as `--keep-outputs` does).
    let store_b = OutputStore::new(temp.path());
    store_b.keep_after_runs(true);
    let grep = Reply::call("g", "grep", r#"{"pattern":"secret-of-b","limit":1000}"#);
    let (kernel_b, provider_b) = kernel(&root_b, store_b.clone(), grep);
    run(&kernel_b).await;
    let text = last_result(&provider_b);
    let start = text
        .find("keel-output:")
        .expect("the grep result was cut and saved");
    let reference: String = text[start..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '`')
        .collect();

    // Kernel A, in the same process, is given B's reference.
    let read = format!(r#"{{"path":"{reference}"}}"#);
    let (kernel_a, provider_a) = kernel(
        &root_a,
        OutputStore::new(temp.path()),
        Reply::call("r", "read", &read),
    );
    run(&kernel_a).await;
    let seen_by_a = last_result(&provider_a);
    assert!(
        !seen_by_a.contains("secret-of-b"),
        "kernel A read kernel B's output: {seen_by_a}"
    );

    // B itself still reads it: the reference is valid, only not A's.
    let (kernel_b2, provider_b2) = kernel(&root_b, store_b, Reply::call("r", "read", &read));
    run(&kernel_b2).await;
    assert!(last_result(&provider_b2).contains("secret-of-b"));
    drop((kernel_b, kernel_b2));
}
