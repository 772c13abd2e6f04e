//! A namespace holder is not a copy of the process that started it: it is
//! the executable re-executed in its holder mode, so its command line is
//! the holder marker, its environment is empty, and nothing the kernel
//! process held in memory before (keys, tokens, prompts) is in its memory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use keel_sandbox::{CallSpec, HolderPool, Sandbox, SandboxConfig, SandboxLevel};

/// Every descendant of `root` (its children, theirs, ...), with `root`.
fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_string_lossy().parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The parent is the second field after the command's `)`.
            let after = &stat[stat.rfind(')')? + 1..];
            let parent = after.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, parent))
        })
        .collect();
    let mut found = vec![root];
    let mut index = 0;
    while let Some(&pid) = found.get(index) {
        found.extend(
            parents
                .iter()
                .filter(|(_, parent)| *parent == pid)
                .map(|(child, _)| *child),
        );
        index += 1;
    }
    found
}

/// Whether `needle` is anywhere in the readable memory of `pid`, and how
/// many bytes were searched (so a process whose memory could not be read
/// is not taken for one without the needle).
fn memory_holds(pid: u32, needle: &[u8]) -> (bool, usize) {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return (false, 0);
    };
    let mut memory = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut searched = 0;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(permissions)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !permissions.starts_with('r') || line.ends_with("[vvar]") {
            continue;
        }
        let (start, end) = range.split_once('-').unwrap();
        let start = u64::from_str_radix(start, 16).unwrap();
        let end = u64::from_str_radix(end, 16).unwrap();
        let mut bytes = vec![0u8; usize::try_from(end - start).unwrap()];
        if memory.seek(SeekFrom::Start(start)).is_err() || memory.read_exact(&mut bytes).is_err() {
            continue;
        }
        searched += bytes.len();
        if bytes.windows(needle.len()).any(|window| window == needle) {
            return (true, searched);
        }
    }
    (false, searched)
}

#[test]
fn a_holder_is_a_fresh_image_with_no_copy_of_its_starters_memory_or_environment() {
    // A secret on this process's heap before any holder starts, as a key
    // or token would be on the kernel process's.
    let secret: Vec<u8> = format!("keel-test-secret-{}", std::process::id())
        .bytes()
        .chain(*b"-4f1d8c0a9e")
        .collect();
    let kept = std::hint::black_box(secret.clone());
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxLevel::WorkspaceWrite)
        .with_config(Arc::new(SandboxConfig::default()))
        .with_metadata_writable(false);
    let pool = HolderPool::new();
    let _run = pool.hold();
    let (mut out, out_write) = std::io::pipe().unwrap();
    let (_err, err_write) = std::io::pipe().unwrap();
    let spec = CallSpec::new(
        PathBuf::from("/bin/sh"),
        ["sh", "-c", "echo ran"].map(OsString::from).to_vec(),
        Vec::new(),
        OwnedFd::from(out_write),
        OwnedFd::from(err_write),
    );
    let call = pool.spawn(&sandbox, workspace.path(), spec).unwrap();
    let mut text = String::new();
    out.read_to_string(&mut text).unwrap();
    assert_eq!(text, "ran\n");
    drop(call);

    let relays = pool.relay_pids();
    assert_eq!(relays.len(), 1);
    let processes = descendants(relays[0]);
    // The relay, the holder and its ready call (init and command) at least.
    assert!(processes.len() >= 2, "{processes:?}");
    for pid in processes {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue; // gone meanwhile (a call ending)
        };
        assert_eq!(
            cmdline, b"keel-sandbox-holder\0--keel-sandbox-holder-v1\0",
            "process {pid} of the holder shows another command line"
        );
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        assert!(
            environ.is_empty(),
            "process {pid} of the holder has an environment"
        );
        let (holds, searched) = memory_holds(pid, &secret);
        assert!(
            !holds,
            "process {pid} of the holder holds a copy of the starter's memory"
        );
        if std::fs::metadata(format!("/proc/{pid}")).is_ok() {
            assert!(
                searched > 0,
                "the memory of process {pid} could not be read"
            );
        }
    }
    // The secret is findable where it is: the check can see it.
    assert!(memory_holds(std::process::id(), &kept).0);
}

/// The dynamic loader this process was loaded by, from its own mappings.
fn dynamic_loader() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.contains("/ld-linux"))
        .map(PathBuf::from)
        .expect("a dynamically linked test binary has a loader mapped")
}

#[test]
fn started_through_the_dynamic_loader_a_holder_is_refused_not_another_program_run() {
    const INNER: &str = "KEEL_TEST_THROUGH_THE_LOADER";
    let sandbox = Sandbox::new(SandboxLevel::WorkspaceWrite)
        .with_config(Arc::new(SandboxConfig::default()))
        .with_metadata_writable(false);
    if std::env::var_os(INNER).is_some() {
        // Here `/proc/self/exe` is the loader, not this test binary.
        let workspace = tempfile::tempdir().unwrap();
        let pool = HolderPool::new();
        let (_out, out_write) = std::io::pipe().unwrap();
        let (_err, err_write) = std::io::pipe().unwrap();
        let spec = CallSpec::new(
            PathBuf::from("/bin/sh"),
            ["sh", "-c", "true"].map(OsString::from).to_vec(),
            Vec::new(),
            OwnedFd::from(out_write),
            OwnedFd::from(err_write),
        );
        let error = pool.spawn(&sandbox, workspace.path(), spec).unwrap_err();
        match error {
            keel_sandbox::SandboxError::Unavailable { reason } => {
                assert!(reason.contains("dynamic loader"), "{reason}");
            }
            other => panic!("not refused as unavailable: {other:?}"),
        }
        return;
    }
    let status = std::process::Command::new(dynamic_loader())
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "started_through_the_dynamic_loader_a_holder_is_refused_not_another_program_run",
            "--test-threads",
            "1",
        ])
        .env(INNER, "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the inner test failed: {status}");
}
