//! Reads that cannot hang or balloon, through the `Tool` trait: the file
//! tools open only regular files. A FIFO (with or without a writer feeding
//! it), a device reached where outside access was allowed, and a FIFO inside
//! a searched tree are refused or skipped at once, with an error that says
//! what the path is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_protocol::ToolErrorCode;
use keel_tools::builtin::{EditTool, GrepTool, ReadTool};
use keel_tools::{Tool, ToolContext, ToolError, ToolOutput, Workspace};
use serde_json::{Value, json};

fn context(workspace: Workspace) -> ToolContext {
    ToolContext::new("c", Arc::new(workspace))
}

/// Runs one call; fails the test if it hangs (no answer within five seconds).
async fn quick(
    tool: &dyn Tool,
    workspace: Workspace,
    arguments: Value,
) -> Result<ToolOutput, ToolError> {
    tokio::time::timeout(
        Duration::from_secs(5),
        tool.execute(arguments, context(workspace)),
    )
    .await
    .expect("the call hung")
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_fifo_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    mkfifo(&dir.path().join("pipe"));
    let workspace = Workspace::new(dir.path()).unwrap();
    let error = quick(
        &ReadTool::default(),
        workspace.clone(),
        json!({"path": "pipe"}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code, ToolErrorCode::ToolError);
    assert!(
        error
            .message
            .contains("named pipe (FIFO), not a regular file"),
        "{}",
        error.message
    );

    let edits = json!([{"old_text": "a", "new_text": "b"}]);
    let error = quick(
        &EditTool::default(),
        workspace,
        json!({"path": "pipe", "edits": edits}),
    )
    .await
    .unwrap_err();
    assert!(
        error.message.contains("not a regular file"),
        "{}",
        error.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fed_fifo_is_refused_without_loading_what_it_is_fed() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = dir.path().join("pipe");
    mkfifo(&pipe);
    // A writer that would feed an endless line to whoever reads. It is a
    // thread, not a child process: a killed `sh -c 'yes | tr > pipe'` left
    // `yes` and a subshell blocked on the FIFO, holding the test's output
    // pipe open forever (a CI run waited on them until its time ran out).
    let writer = {
        let pipe = pipe.clone();
        std::thread::spawn(move || {
            use std::io::Write as _;
            let Ok(mut fifo) = std::fs::OpenOptions::new().write(true).open(&pipe) else {
                return;
            };
            let line = [b'x'; 4096];
            while fifo.write_all(&line).is_ok() {}
        })
    };
    let workspace = Workspace::new(dir.path()).unwrap();
    let error = quick(&ReadTool::default(), workspace, json!({"path": "pipe"}))
        .await
        .unwrap_err();
    assert!(error.message.contains("named pipe"), "{}", error.message);
    // Release the writer: a reader that comes and goes completes its open,
    // and its next write fails with EPIPE (Rust ignores SIGPIPE). Repeated,
    // in case the writer had not reached its open yet.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !writer.is_finished() {
        assert!(Instant::now() < deadline, "the FIFO's writer never ended");
        open_and_close_for_reading(&pipe);
        std::thread::sleep(Duration::from_millis(10));
    }
    writer.join().unwrap();
}

/// Opens `fifo` for reading without blocking and closes it again, so a
/// writer waiting to open it goes on and then finds no reader.
fn open_and_close_for_reading(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt as _;
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(fifo)
        .unwrap();
    drop(reader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_is_refused_even_where_outside_access_was_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::new(dir.path()).unwrap().allowing_outside();
    for device in ["/dev/zero", "/dev/urandom"] {
        let error = quick(
            &ReadTool::default(),
            workspace.clone(),
            json!({"path": device}),
        )
        .await
        .unwrap_err();
        assert!(
            error.message.contains("a device, not a regular file"),
            "{}",
            error.message
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_skips_a_directory_whose_gitignore_is_a_fifo_or_a_link_and_refuses_such_a_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "needle\n").unwrap();
    for sub in ["fifo", "link"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
        std::fs::write(dir.path().join(sub).join("b.txt"), "needle\n").unwrap();
    }
    mkfifo(&dir.path().join("fifo/.gitignore"));
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("link/.gitignore")).unwrap();
    let workspace = Workspace::new(dir.path()).unwrap();
    // `quick` fails a call that takes seconds: a blocked open or an endless
    // read of the ignore file would.
    let output = quick(
        &GrepTool::default(),
        workspace.clone(),
        json!({"pattern": "needle"}),
    )
    .await
    .unwrap();
    assert_eq!(
        output.details.unwrap()["matches"],
        1,
        "only a.txt is searched"
    );
    let refused = quick(
        &GrepTool::default(),
        workspace,
        json!({"pattern": "needle", "path": "fifo"}),
    )
    .await
    .unwrap_err();
    assert!(
        refused.message.contains("not a regular file"),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_skips_a_fifo_in_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "needle\n").unwrap();
    mkfifo(&dir.path().join("pipe"));
    let workspace = Workspace::new(dir.path()).unwrap();
    let output = quick(
        &GrepTool::default(),
        workspace.clone(),
        json!({"pattern": "needle"}),
    )
    .await
    .unwrap();
    assert_eq!(output.details.unwrap()["matches"], 1);
    let output = quick(
        &GrepTool::default(),
        workspace,
        json!({"pattern": "needle", "path": "pipe"}),
    )
    .await
    .unwrap();
    assert_eq!(output.details.unwrap()["matches"], 0);
}
