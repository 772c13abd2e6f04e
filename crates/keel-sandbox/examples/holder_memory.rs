//! What namespace holders cost in memory: starts one holder per workspace
//! in one pool (N workspaces, default 20), runs one call in each, and
//! prints the RSS and PSS (from `/proc/PID/smaps_rollup`) of every holder's
//! processes — its relay and everything beneath it — then how long the
//! pool's last run guard takes to stop and reap them all.
//!
//! `cargo run --release -p keel-sandbox --example holder_memory -- 20 [MiB]`
//! (MiB: memory the kernel process holds resident, as a busy one would).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use keel_sandbox::{CallSpec, HolderPool, Sandbox, SandboxConfig, SandboxLevel};

/// `pid` and every process beneath it.
fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut index = 0;
    while let Some(&next) = all.get(index) {
        let tasks = std::fs::read_dir(format!("/proc/{next}/task"))
            .into_iter()
            .flatten();
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            all.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
        index += 1;
    }
    all
}

/// (RSS, PSS, private) in KiB of `pid`.
fn memory(pid: u32) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    };
    (
        field("Rss:"),
        field("Pss:"),
        field("Private_Clean:") + field("Private_Dirty:"),
    )
}

/// `VmPTE` (page tables) in KiB of `pid`.
fn page_tables(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|line| line.starts_with("VmPTE:"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

fn call(pool: &HolderPool, sandbox: &Sandbox, workspace: &Path) {
    let (mut out, out_write) = std::io::pipe().unwrap();
    let (_err, err_write) = std::io::pipe().unwrap();
    let spec = CallSpec::new(
        PathBuf::from("/usr/bin/true"),
        vec![OsString::from("true")],
        Vec::new(),
        OwnedFd::from(out_write),
        OwnedFd::from(err_write),
    );
    let call = pool.spawn(sandbox, workspace, spec).unwrap();
    let mut status = std::fs::File::from(call.status().try_clone_to_owned().unwrap());
    status.read_to_end(&mut Vec::new()).unwrap();
    out.read_to_end(&mut Vec::new()).unwrap();
}

fn main() {
    let count: usize = std::env::args()
        .nth(1)
        .map(|arg| arg.parse().expect("N is a number"))
        .unwrap_or(20);
    let resident_mib: usize = std::env::args()
        .nth(2)
        .map(|arg| arg.parse().expect("MiB is a number"))
        .unwrap_or(0);
    // A kernel process of some size: the relay is forked from it.
    let resident = std::hint::black_box(vec![1u8; resident_mib << 20]);
    let sandbox = Sandbox::new(SandboxLevel::WorkspaceWrite)
        .with_config(Arc::new(SandboxConfig::default()))
        .with_metadata_writable(false);
    let workspaces: Vec<_> = (0..count).map(|_| tempfile::tempdir().unwrap()).collect();
    let pool = HolderPool::new();
    let guard = pool.hold();
    for workspace in &workspaces {
        call(&pool, &sandbox, workspace.path());
    }
    let own = memory(std::process::id());
    println!(
        "kernel process itself (holding {resident_mib} MiB on purpose): RSS {} KiB, PSS {} KiB",
        own.0, own.1
    );
    let (mut rss, mut pss, mut private, mut processes) = (0, 0, 0, 0);
    let mut all = Vec::new();
    for (index, relay) in pool.relay_pids().into_iter().enumerate() {
        let pids = tree(relay);
        let (holder_rss, holder_pss, holder_private) = pids
            .iter()
            .map(|&pid| memory(pid))
            .fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2));
        if index == 0 {
            println!(
                "one idle holder: {} processes, RSS {holder_rss} KiB, PSS {holder_pss} KiB, private {holder_private} KiB",
                pids.len()
            );
            for &pid in &pids {
                let (r, p, u) = memory(pid);
                println!("  pid {pid}: RSS {r} KiB, PSS {p} KiB, private {u} KiB");
            }
        }
        rss += holder_rss;
        pss += holder_pss;
        private += holder_private;
        processes += pids.len();
        all.extend(pids);
    }
    println!(
        "{count} holders: {processes} processes, RSS {rss} KiB, PSS {pss} KiB (PSS {} KiB each)",
        pss / count.max(1) as u64
    );
    println!("  (private, not shared with the kernel or each other: {private} KiB)");
    // The kernel writes its memory after the holders were forked from it:
    // copy-on-write leaves the old pages to whoever still maps them.
    let mut resident = resident;
    for page in resident.chunks_mut(4096) {
        page[0] = 2;
    }
    let resident = std::hint::black_box(resident);
    let after: u64 = all.iter().map(|&pid| memory(pid).1).sum();
    let tables: u64 = all.iter().map(|&pid| page_tables(pid)).sum();
    println!(
        "after the kernel rewrote its {resident_mib} MiB: the holders' PSS {after} KiB (the kernel's: {} KiB); \
         their page tables {tables} KiB",
        memory(std::process::id()).1
    );
    let start = Instant::now();
    drop(guard);
    let stopped = start.elapsed();
    let left = all
        .iter()
        .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
        .count();
    println!(
        "the last run guard stopped and reaped them in {stopped:?}; {left} of their processes left"
    );
    drop(resident);
}
