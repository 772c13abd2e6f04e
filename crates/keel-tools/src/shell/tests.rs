//! Tests for the shell analysis.

use super::*;

#[test]
fn explore() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/main.rs"), "").unwrap();
    std::fs::write(root.join("README.md"), "").unwrap();
    let tmp = root.join(".tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let cmds = std::fs::read_to_string("/tmp/shell-cmds.txt").unwrap();
    for cmd in cmds.split("\n---\n") {
        let a = analyze(cmd, &root, Some(&tmp));
        println!(
            "{:?} | {:?}/{:?} | {:?} | {:?}",
            cmd, a.kind, a.scope, a.targets, a.reasons
        );
    }
}
