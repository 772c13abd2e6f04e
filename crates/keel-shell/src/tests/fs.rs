//! Cases that depend on the file system: symlinks, hard links, globs, the
//! temp dir and directory changes through symlinks.

use std::os::unix::fs::symlink;

use super::*;

/// A directory outside the workspace holding a file `secret`.
fn outside_dir() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), "s").unwrap();
    dir
}

#[test]
fn symlinks_pointing_outside_are_outside() {
    let ws = Ws::new();
    let outside = outside_dir();
    symlink(outside.path(), ws.path("link")).unwrap();
    symlink(outside.path().join("secret"), ws.path("file_link")).unwrap();
    for command in [
        "cat link/secret",
        "cat file_link",
        "echo x > link/new",
        "cat link/../README.md",
        "cd link && ls",
        "ls *",
        "cat fil*",
        "cp README.md li?k/",
    ] {
        let analysis = ws.analyze(command);
        assert_eq!(analysis.scope, O, "{command}: {analysis:?}");
    }
    assert_eq!(ws.analyze("cat src/*").scope, W);
}

#[test]
fn the_reason_names_the_real_location() {
    let ws = Ws::new();
    let outside = outside_dir();
    symlink(outside.path().join("secret"), ws.path("file_link")).unwrap();
    let analysis = ws.analyze("cat file_link");
    let real = std::fs::canonicalize(outside.path().join("secret")).unwrap();
    assert_eq!(analysis.targets, vec![real.display().to_string()]);
    assert!(analysis.reasons[0].contains("resolves outside the workspace"));
}

#[test]
fn symlinks_inside_are_followed() {
    let ws = Ws::new();
    symlink(ws.path("sub"), ws.path("alias")).unwrap();
    for command in [
        "cat alias/file.txt",
        "echo x > alias/new",
        "cd alias && cat ../README.md",
        "cd alias && cat $PWD/file.txt",
        "ls al*",
    ] {
        assert_eq!(ws.analyze(command).scope, W, "{command}");
    }
}

#[test]
fn cd_dot_dot_is_logical_like_bash() {
    let ws = Ws::new();
    std::fs::create_dir_all(ws.path("a/b/c")).unwrap();
    symlink(ws.path("a/b/c"), ws.path("deep")).unwrap();
    // `cd deep; cd ..` returns to the root (bash follows $PWD), where
    // `cat sub/file.txt` is inside.
    assert_eq!(ws.analyze("cd deep && cd .. && cat sub/file.txt").scope, W);
    // The kernel resolves `deep/..` physically, to `a/b`.
    std::fs::write(ws.path("a/b/x"), "x").unwrap();
    let analysis = ws.analyze("cat deep/../x");
    assert_eq!(analysis.scope, W);
    assert_eq!(analysis.targets, vec!["a/b/x".to_owned()]);
    // Lexically `deep/../../../README.md` climbs out of the root, which is
    // enough to be outside even though the kernel would land inside.
    assert_eq!(ws.analyze("cat deep/../../../README.md").scope, O);
}

#[test]
fn dangling_symlinks_are_outside() {
    let ws = Ws::new();
    symlink("/nonexistent/keel/target", ws.path("dangling")).unwrap();
    let analysis = ws.analyze("echo x > dangling");
    assert_eq!(analysis.scope, O);
    assert!(
        analysis.reasons[0].contains("dangling symlink"),
        "{analysis:?}"
    );
}

#[test]
fn hard_linked_files_are_outside() {
    let ws = Ws::new();
    let outside = outside_dir();
    let Ok(()) = std::fs::hard_link(outside.path().join("secret"), ws.path("linked")) else {
        // Different file systems: nothing to test.
        return;
    };
    let analysis = ws.analyze("cat linked");
    assert_eq!(analysis.scope, O);
    assert!(
        analysis.reasons[0].contains("has 2 hard links"),
        "{analysis:?}"
    );
    assert_eq!(ws.analyze("cat README.md").scope, W);
}

#[test]
fn the_temp_dir_counts_as_inside() {
    let ws = Ws::new();
    let temp = ws.temp.display();
    let inside = ws.analyze(&format!("echo x > {temp}/out && cat {temp}/out"));
    assert_eq!((inside.kind, inside.scope), (S, W));
    assert_eq!(inside.targets, vec![format!("{temp}/out")]);
    assert_eq!(ws.analyze("cd $TMPDIR && ls").scope, W);
    assert_eq!(ws.analyze("cat ${TMPDIR:-/tmp}/x").scope, W);
    assert_eq!(ws.analyze(&format!("cat {temp}/../x")).scope, O);
    // Without a temp dir, `$TMPDIR` is unknown.
    let without = analyze_in(&ws.root, "echo $TMPDIR/x > $TMPDIR/y");
    assert_eq!((without.kind, without.scope), (S, X));
    // A command that may reassign it cannot rely on it.
    assert_eq!(ws.analyze("TMPDIR=$X; cat $TMPDIR/y").scope, X);
}

#[test]
fn proc_paths_back_into_the_root_are_outside() {
    let ws = Ws::new();
    let root = ws.root.display();
    for command in [
        format!("cat /proc/self/root{root}/README.md"),
        "cat /proc/1/cwd/README.md".to_owned(),
        "cat /proc/self/cwd/../x".to_owned(),
    ] {
        assert_eq!(ws.analyze(&command).scope, O, "{command}");
    }
    assert_eq!(ws.analyze(&format!("cat {root}/README.md")).scope, W);
}

#[test]
fn cd_that_may_fail_keeps_the_old_directory() {
    let ws = Ws::new();
    // With `;` the cd may fail, so `../README.md` may be outside.
    assert_eq!(ws.analyze("cd sub; cat ../README.md").scope, O);
    assert_eq!(ws.analyze("cd sub || true; cat ../README.md").scope, O);
    // With `&&` it cannot.
    assert_eq!(ws.analyze("cd sub && cat ../README.md").scope, W);
    // A failure branch runs from where the shell was.
    assert_eq!(ws.analyze("cd sub || cat ../x").scope, O);
    // A background or piped cd does not move the shell…
    assert_eq!(ws.analyze("cd sub & cat ../x").scope, O);
    // …except the last element of a pipeline may (lastpipe).
    assert_eq!(ws.analyze("true | cd sub; cat ../README.md").scope, O);
}

#[test]
fn loops_that_change_directory_make_it_unknown() {
    let ws = Ws::new();
    assert_eq!(ws.analyze("for d in a b; do cd sub; done; cat x").scope, X);
    assert_eq!(ws.analyze("while true; do cd ..; done").scope, O);
    assert_eq!(ws.analyze("for d in a b; do cat x; done").scope, W);
}

#[test]
fn functions_run_in_the_callers_directory() {
    let ws = Ws::new();
    // Defined in `sub`, called from the root: `../README.md` is outside.
    let command = "cd sub && f() { cat ../README.md; }; cd .. && f";
    assert_eq!(ws.analyze(command).scope, O);
    // A function's cd moves its caller.
    assert_eq!(
        ws.analyze("f() { cd sub; }; f && cat ../README.md").scope,
        W
    );
    assert_eq!(ws.analyze("f() { cd /tmp; }; f; ls").scope, O);
}

#[test]
fn targets_list_paths_relative_to_the_root() {
    let ws = Ws::new();
    let parent = ws.root.parent().unwrap().display().to_string();
    let analysis = ws.analyze("cat README.md ./src/../src/main.rs ../x nonexistent > out.txt");
    assert_eq!(
        analysis.targets,
        vec![
            "out.txt".to_owned(),
            "README.md".to_owned(),
            "src/main.rs".to_owned(),
            format!("{parent}/x"),
        ]
    );
}
