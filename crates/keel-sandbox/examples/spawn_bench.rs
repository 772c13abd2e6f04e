//! What starting one sandboxed command costs, measured in process: the
//! namespace holder ([`keel_sandbox::HolderPool::spawn`], the `bash` tool's path), a
//! command confined on its own ([`keel_sandbox::confine`] + `apply`: relay,
//! init and command, every namespace and the view created and torn down),
//! and a plain fork and exec for reference; each runs `/usr/bin/true` and
//! is timed until its end is known, interleaved, from a process holding
//! 16 MiB of touched memory (about the kernel process's resident size).
//! Also times the per-call planning alone (`confine`: the view and a
//! Landlock ruleset) and a run's first call, which starts the holder
//! (creating its namespaces and building the view).
//!
//! Usage: `cargo run --release -p keel-sandbox --example spawn_bench [N]`
//! (N = 200 rounds after 10 of warm-up). Linux with user namespaces and
//! Landlock ABI 4 only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use keel_sandbox::{CallSpec, HolderPool, Sandbox, SandboxConfig, SandboxLevel, confine};

/// Milliseconds since `start`.
fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// The median of `values`.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Starts `/usr/bin/true` through the holder and waits for its end record.
fn holder_call(pool: &HolderPool, sandbox: &Sandbox, workspace: &std::path::Path) {
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
    let mut record = Vec::new();
    status.read_to_end(&mut record).unwrap();
    out.read_to_end(&mut Vec::new()).unwrap();
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|arg| arg.parse().expect("N is a number"))
        .unwrap_or(200);
    let resident = std::hint::black_box(vec![1u8; 16 << 20]);
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxLevel::WorkspaceWrite)
        .with_config(Arc::new(SandboxConfig::default()))
        .with_metadata_writable(false);
    let pool = HolderPool::new();
    let _holders = pool.hold();
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average before: {}", load().trim());
    let (mut planning, mut holder, mut per_call, mut plain) = (vec![], vec![], vec![], vec![]);
    for round in 0..rounds + 10 {
        let start = Instant::now();
        drop(confine(&sandbox, workspace.path()).unwrap());
        let planned = ms(start);
        let start = Instant::now();
        holder_call(&pool, &sandbox, workspace.path());
        let held = ms(start);
        let start = Instant::now();
        let confinement = confine(&sandbox, workspace.path()).unwrap();
        let mut command = Command::new("/usr/bin/true");
        confinement.apply(&mut command);
        assert!(command.status().unwrap().success());
        let alone = ms(start);
        let start = Instant::now();
        assert!(Command::new("/usr/bin/true").status().unwrap().success());
        let forked = ms(start);
        if round >= 10 {
            planning.push(planned);
            holder.push(held);
            per_call.push(alone);
            plain.push(forked);
        }
    }
    let mut first = Vec::new();
    for _ in 0..20 {
        let fresh = Sandbox::new(SandboxLevel::WorkspaceWrite)
            .with_config(Arc::new(SandboxConfig::default()))
            .with_metadata_writable(false);
        let start = Instant::now();
        holder_call(&pool, &fresh, workspace.path());
        first.push(ms(start));
    }
    println!("load average after: {}", load().trim());
    println!(
        "medians of {rounds}: holder {:.2} ms, per-call namespaces {:.2} ms, plain fork+exec {:.2} ms; \
         planning alone (view + Landlock ruleset) {:.2} ms; a first call, starting a holder, {:.2} ms (median of 20)",
        median(holder),
        median(per_call),
        median(plain),
        median(planning),
        median(first),
    );
    drop(resident);
}
