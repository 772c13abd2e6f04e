//! Names the build for `keel --version` and `keel version --json`: the
//! commit it was made from (`-dirty` when tracked files differed), the date
//! (`SOURCE_DATE_EPOCH` when set) and the crate's enabled features, as
//! `KEEL_BUILD_*` variables the binary reads with `env!`.
//!
//! It runs again when `HEAD`, the branch it names or the index move, so a
//! new commit (or a checkout, or `git add`) is picked up. It does not watch
//! the working tree: an edit made after it last ran shows as `-dirty` only
//! once git's index changes (a `git add`, or a `git status` that refreshes
//! it), so a build
//! never reruns it, and relinks `keel`, merely because a test wrote a file
//! under `crates/`. A release is built from a clean checkout
//! (`scripts/release.sh`), where this does not arise.

#[path = "build/info.rs"]
mod info;

use std::ffi::OsStr;
use std::path::Path;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=build/info.rs");
    println!("cargo::rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".to_owned());
    let dir = Path::new(&manifest_dir);
    let git = OsStr::new("git");

    let commit = info::commit(git, dir, "build.rs");
    if commit.is_some() {
        for path in info::watched_git_files(git, dir) {
            println!("cargo::rerun-if-changed={path}");
        }
    }

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0);
    let epoch = std::env::var("SOURCE_DATE_EPOCH").ok();
    let date = match info::build_date(epoch.as_deref(), now) {
        Ok(date) => date,
        Err(message) => {
            println!("cargo::error={message}");
            return;
        }
    };

    // The crate's own Cargo features (none today), as `cargo` names them.
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(name, _)| {
            name.strip_prefix("CARGO_FEATURE_")
                .map(|feature| feature.to_ascii_lowercase().replace('_', "-"))
        })
        .filter(|feature| feature != "default")
        .collect();
    features.sort();

    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!(
        "cargo::rustc-env=KEEL_BUILD_VERSION_LINE={}",
        info::version_line(&version, commit.as_ref(), &date)
    );
    println!(
        "cargo::rustc-env=KEEL_BUILD_COMMIT={}",
        commit.as_ref().map_or("", |commit| commit.short.as_str())
    );
    println!(
        "cargo::rustc-env=KEEL_BUILD_DIRTY={}",
        commit
            .as_ref()
            .map_or("", |commit| if commit.dirty { "true" } else { "false" })
    );
    println!("cargo::rustc-env=KEEL_BUILD_DATE={date}");
    println!(
        "cargo::rustc-env=KEEL_BUILD_FEATURES={}",
        features.join(",")
    );
}
