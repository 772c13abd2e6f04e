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
        .project_instructions({
            let mut instructions = Instructions::default();
            instructions.enabled = true;
            instructions.global_dir = Some(global.clone());
            instructions.max_bytes = cap;
            instructions
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

/// Instruction files a command could have planted (issue 21): a symlink
/// from the workspace to `/proc/self/environ`, to a key file outside, or
/// through a directory symlink out of it, and a symlink as the file of a
/// directory above the workspace, are refused — named with the reason in a
/// `warning` event, never sent to the provider. A symlink that stays inside
/// the workspace is the project's own and loads.
#[tokio::test]
async fn symlinks_out_of_the_workspace_are_refused_with_a_warning() {
    const SECRET: &str = "PLANTED-KEY-7d1e";
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::write(outside.join("id_rsa"), SECRET).unwrap();
    std::fs::write(outside.join("AGENTS.md"), SECRET).unwrap();
    let run_in = |workspace: std::path::PathBuf| async move {
        let provider = Arc::new(Recorder::new(vec![Reply::text("ok")]));
        let kernel = AgentKernel::builder()
            .provider(provider.clone())
            .workspace(Workspace::new(&workspace).unwrap())
            .store(Arc::new(MemoryStore::new()))
            .project_instructions({
                let mut instructions = Instructions::default();
                instructions.enabled = true;
                instructions.global_dir = None;
                instructions.max_bytes = 4096;
                instructions
            })
            .build()
            .unwrap();
        let run = kernel.create_run(RunSpec::new("hi")).await.unwrap();
        let mut events = run.events().unwrap();
        let (mut files, mut warnings) = (Vec::new(), Vec::new());
        while let Some(event) = events.next().await {
            match event.kind {
                RunEventKind::RunStarted { instructions, .. } => files = instructions,
                RunEventKind::Warning { code, message } => warnings.push((code, message)),
                _ => {}
            }
        }
        assert_eq!(run.result().await.state, RunState::Settled);
        let system = provider.requests()[0].system_prompt.clone();
        (files, warnings, system)
    };
    let cases: [(&str, std::path::PathBuf); 4] = [
        ("environ", "/proc/self/environ".into()),
        ("key", outside.join("id_rsa")),
        ("climb", "../../outside/id_rsa".into()),
        ("through", "link_out/AGENTS.md".into()),
    ];
    for (name, target) in cases {
        let workspace = repo.join(name);
        std::fs::create_dir_all(&workspace).unwrap();
        std::os::unix::fs::symlink(&outside, workspace.join("link_out")).unwrap();
        std::os::unix::fs::symlink(&target, workspace.join("AGENTS.md")).unwrap();
        let (files, warnings, system) = run_in(workspace.clone()).await;
        assert!(files.is_empty(), "{name}: {files:?}");
        assert!(!system.contains(SECRET), "{name}: {system}");
        assert!(
            !system.contains("PATH="),
            "{name}: the environment was sent"
        );
        let (code, message) = &warnings[0];
        assert_eq!(code, "instruction_file_refused", "{name}");
        assert!(
            message.contains(&workspace.join("AGENTS.md").display().to_string())
                && message.contains("outside"),
            "{name}: {message}"
        );
        assert!(!message.contains(SECRET), "{name}: {message}");
    }

    // Above the workspace, the file itself must not be a symlink.
    let nested = repo.join("above/ws");
    std::fs::create_dir_all(&nested).unwrap();
    std::os::unix::fs::symlink(outside.join("id_rsa"), repo.join("above/CLAUDE.md")).unwrap();
    let (files, warnings, system) = run_in(nested).await;
    assert!(files.is_empty() && !system.contains(SECRET), "{files:?}");
    assert!(warnings[0].1.contains("symbolic link"), "{warnings:?}");

    // Inside the workspace, a symlink is fine.
    let inside = repo.join("inside");
    std::fs::create_dir_all(inside.join("docs")).unwrap();
    std::fs::write(inside.join("docs/agents.md"), "LINKED: use tabs.\n").unwrap();
    std::os::unix::fs::symlink("docs/agents.md", inside.join("AGENTS.md")).unwrap();
    let (files, warnings, system) = run_in(inside.clone()).await;
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(files.len(), 1);
    assert!(system.contains("LINKED: use tabs."), "{system}");
}

/// A global directory whose links cannot be resolved — a chain a command
/// planted that resolves past `PATH_MAX`, which `realpath` gives up on but
/// `open` still follows — is never read as the user's own: the global
/// `AGENTS.md` at the end of it, a link to `/proc/self/environ`, sends
/// nothing. Inside the workspace (a workspace that is the home directory)
/// it is read beneath the root and refused as leading out; outside by its
/// path (a user's link into the workspace), it is refused as unresolved.
#[tokio::test]
async fn a_global_directory_that_cannot_be_resolved_is_refused_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let level = "d".repeat(200);
    let first: std::path::PathBuf = std::iter::repeat_n(level.as_str(), 12).collect();
    let rest: std::path::PathBuf = std::iter::repeat_n(level.as_str(), 13).collect();
    std::fs::create_dir_all(home.join(&first)).unwrap();
    std::os::unix::fs::symlink(&first, home.join("L")).unwrap();
    std::fs::create_dir_all(home.join("L").join(&rest)).unwrap();
    std::os::unix::fs::symlink(&rest, home.join("L/M")).unwrap();
    std::os::unix::fs::symlink("/proc/self/environ", home.join("L/M/AGENTS.md")).unwrap();
    std::fs::create_dir_all(home.join(".config")).unwrap();
    std::os::unix::fs::symlink("../L/M", home.join(".config/keel")).unwrap();
    assert!(
        std::fs::canonicalize(home.join(".config/keel")).is_err(),
        "the chain resolves past PATH_MAX"
    );
    // A user's link from outside the workspace into it.
    std::os::unix::fs::symlink(home.join("L/M"), dir.path().join("cfg")).unwrap();
    for global in [home.join(".config/keel"), dir.path().join("cfg")] {
        let provider = Arc::new(Recorder::new(vec![Reply::text("ok")]));
        let kernel = AgentKernel::builder()
            .provider(provider.clone())
            .workspace(Workspace::new(&home).unwrap())
            .store(Arc::new(MemoryStore::new()))
            .project_instructions({
                let mut instructions = Instructions::default();
                instructions.enabled = true;
                instructions.global_dir = Some(global.clone());
                instructions.max_bytes = 64 * 1024;
                instructions
            })
            .build()
            .unwrap();
        let run = kernel.create_run(RunSpec::new("hi")).await.unwrap();
        let mut events = run.events().unwrap();
        let (mut files, mut warnings) = (Vec::new(), Vec::new());
        while let Some(event) = events.next().await {
            match event.kind {
                RunEventKind::RunStarted { instructions, .. } => files = instructions,
                RunEventKind::Warning { code, message } => warnings.push((code, message)),
                _ => {}
            }
        }
        assert_eq!(run.result().await.state, RunState::Settled);
        let system = provider.requests()[0].system_prompt.clone();
        assert!(files.is_empty(), "{global:?}: {files:?}");
        assert!(
            !system.contains("PATH="),
            "{global:?}: the environment was sent"
        );
        assert!(
            warnings
                .iter()
                .any(|(code, _)| code == "instruction_file_refused"),
            "{global:?}: {warnings:?}"
        );
    }
}
