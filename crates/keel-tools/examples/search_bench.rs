//! Benchmarks `grep` and `find` on generated trees, through the `Tool` trait.
//!
//! `grep`: 20,000 files of 5 KB of text (100 MB) in 200 directories, a
//! literal that occurs in 1 of every 100 files; `find`: 100,000 empty files
//! in 1,000 directories, a name glob. Each search runs 7 times on a warm
//! page cache; the median, minimum and maximum are printed in milliseconds.
//!
//! Run with `cargo run --release -p keel-tools --example search_bench [DIR]`
//! (the trees are generated under DIR, default a temporary directory, and
//! reused when present).
// A benchmark may panic on setup failure: a broken fixture must stop it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_tools::builtin::{FindTool, GrepTool};
use keel_tools::{Tool, ToolContext, Workspace};
use serde_json::{Value, json};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let base = std::env::args().nth(1).map(std::path::PathBuf::from);
    let temporary = tempfile::tempdir().unwrap();
    let base = base.unwrap_or_else(|| temporary.path().to_path_buf());
    let grep_tree = base.join("grep-tree");
    let find_tree = base.join("find-tree");
    generate_grep_tree(&grep_tree);
    generate_find_tree(&find_tree);

    let grep = measure(
        &GrepTool::default(),
        &grep_tree,
        json!({"pattern": "needle_in_haystack", "literal": true, "limit": 1000}),
    )
    .await;
    report(
        "grep, 100 MB in 20,000 files (literal, 200 matching files)",
        &grep.0,
        &grep.1,
    );
    let regex = measure(
        &GrepTool::default(),
        &grep_tree,
        json!({"pattern": "needle_[a-z]+_haystack", "limit": 1000}),
    )
    .await;
    report("grep, same tree, regex", &regex.0, &regex.1);
    let find = measure(
        &FindTool::default(),
        &find_tree,
        json!({"pattern": "*_7.rs", "limit": 100000}),
    )
    .await;
    report(
        "find, 100,000 files (name glob, 10,000 results)",
        &find.0,
        &find.1,
    );
}

fn generate_grep_tree(root: &Path) {
    if root.join(".done").exists() {
        return;
    }
    let words = [
        "alpha", "beta", "gamma", "delta", "kernel", "session", "tool", "event", "branch", "patch",
    ];
    let mut line = String::new();
    for n in 0..20_000usize {
        let dir = root.join(format!("d{:03}", n % 200));
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::with_capacity(5200);
        let mut k = n;
        while text.len() < 5000 {
            line.clear();
            for _ in 0..10 {
                k = k
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                line.push_str(words[(k >> 33) % words.len()]);
                line.push(' ');
            }
            text.push_str(&line);
            text.push('\n');
        }
        if n % 100 == 0 {
            text.push_str("the needle_in_haystack is here\n");
        }
        std::fs::write(dir.join(format!("f{n}.txt")), text).unwrap();
    }
    std::fs::write(root.join(".done"), "").unwrap();
}

fn generate_find_tree(root: &Path) {
    if root.join(".done").exists() {
        return;
    }
    for n in 0..100_000usize {
        let dir = root.join(format!("a{:02}/b{:02}", n % 100, (n / 100) % 10));
        if n < 1000 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("file{n}_{}.rs", n % 10)), "").unwrap();
    }
    std::fs::write(root.join(".done"), "").unwrap();
}

/// Seven timed runs (after one warm-up), and the last output's details.
async fn measure(tool: &dyn Tool, root: &Path, arguments: Value) -> (Vec<Duration>, Value) {
    let workspace = Arc::new(Workspace::new(root).unwrap());
    let mut times = Vec::new();
    let mut details = Value::Null;
    for run in 0..8 {
        let context = ToolContext::new("bench", workspace.clone());
        let started = Instant::now();
        let output = tool.execute(arguments.clone(), context).await.unwrap();
        if run > 0 {
            times.push(started.elapsed());
        }
        details = output.details.unwrap_or_default();
    }
    times.sort();
    (times, details)
}

fn report(name: &str, times: &[Duration], details: &Value) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name}: median {:.0} ms (min {:.0}, max {:.0}); {details}",
        ms(times[times.len() / 2]),
        ms(times[0]),
        ms(times[times.len() - 1])
    );
}
