//! Project instructions: the global file, then the repository root down to
//! the workspace; `CLAUDE.md` where a directory has no `AGENTS.md`; the
//! size cap with its notice; files that are not regular are skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{Recorder, Reply};
use keel_kernel::{AgentKernel, Instructions, RunSpec};
use keel_protocol::{InstructionScope, PermissionMode, RunEventKind, RunState};
use keel_session::MemoryStore;
use keel_tools::Workspace;

#[tokio::test]
async fn global_then_root_down_claude_md_as_fallback_and_a_visible_cap() {
    let dir = tempfile::tempdir().unwrap();
    let global = dir.path().join("config/keel");
    let repo = dir.path().join("repo");
    let workspace = repo.join("crates/app");
    std::fs::create_dir_all(&global).unwrap();
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir(repo.join(".git")).unwrap();
    // Outside the repository: never read.
    std::fs::write(dir.path().join("AGENTS.md"), "OUTSIDE\n").unwrap();
    std::fs::write(global.join("AGENTS.md"), "GLOBAL: be brief.\n").unwrap();
    std::fs::write(repo.join("CLAUDE.md"), "ROOT: run make test.\n").unwrap();
    // A FIFO where a file is expected must not block loading.
    nix::unistd::mkfifo(
        &repo.join("crates/AGENTS.md"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let long = format!("APP: {}\nTAIL-NOT-SHOWN\n", "use tabs. ".repeat(20));
    std::fs::write(workspace.join("AGENTS.md"), &long).unwrap();

    let provider = Arc::new(Recorder::new(vec![Reply::text("ok")]));
    let cap = "GLOBAL: be brief.\n".len() + "ROOT: run make test.\n".len() + 60;
    let kernel = AgentKernel::builder()
        .provider(provider.clone())
        .workspace(Workspace::new(&workspace).unwrap())
        .store(Arc::new(MemoryStore::new()))
        .system_prompt("base")
        .project_instructions(Instructions {
            enabled: true,
            global_dir: Some(global.clone()),
            max_bytes: cap,
        })
        .build()
        .unwrap();
    let run = kernel
        .create_run(RunSpec::new("hi").mode(PermissionMode::Auto))
        .await
        .unwrap();
    let mut events = run.events().unwrap();
    let mut files = None;
    while let Some(event) = events.next().await {
        if let RunEventKind::RunStarted { instructions, .. } = event.kind {
            files = Some(instructions);
        }
    }
    assert_eq!(run.result().await.state, RunState::Settled);
    let files = files.unwrap();
    let listed: Vec<(String, InstructionScope, bool)> = files
        .iter()
        .map(|file| (file.path.clone(), file.scope, file.truncated))
        .collect();
    assert_eq!(
        listed,
        [
            (
                global.join("AGENTS.md").display().to_string(),
                InstructionScope::Global,
                false
            ),
            (
                repo.join("CLAUDE.md").display().to_string(),
                InstructionScope::Project,
                false
            ),
            (
                workspace.join("AGENTS.md").display().to_string(),
                InstructionScope::Project,
                true
            ),
        ]
    );
    assert_eq!(files[2].bytes, long.len() as u64);

    let system = provider.requests()[0].system_prompt.clone();
    let order: Vec<usize> = ["base", "GLOBAL:", "ROOT:", "APP:", "# Environment"]
        .iter()
        .map(|needle| {
            system
                .find(needle)
                .unwrap_or_else(|| panic!("{needle} in {system}"))
        })
        .collect();
    assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "{system}");
    assert!(!system.contains("OUTSIDE"), "{system}");
    assert!(!system.contains("TAIL-NOT-SHOWN"), "{system}");
    assert!(
        system.contains(&format!(
            "[Truncated: this file has {} bytes; only the first 60 are shown",
            long.len()
        )),
        "{system}"
    );

    // Turned off, nothing is loaded or reported; nor is the environment.
    let quiet = AgentKernel::builder()
        .provider(provider.clone())
        .workspace(Workspace::new(&workspace).unwrap())
        .project_instructions(Instructions::none())
        .environment(false)
        .build()
        .unwrap();
    let run = quiet.create_run(RunSpec::new("hi")).await.unwrap();
    let mut events = run.events().unwrap();
    while let Some(event) = events.next().await {
        if let RunEventKind::RunStarted { instructions, .. } = event.kind {
            assert!(instructions.is_empty());
        }
    }
    let last = provider.requests().last().unwrap().system_prompt.clone();
    assert!(!last.contains("GLOBAL:"), "{last}");
    assert!(!last.contains("# Environment"), "{last}");
}
