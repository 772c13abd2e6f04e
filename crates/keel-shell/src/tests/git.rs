//! `git` and `.git`: which commands write git's or Keel's metadata, in a
//! workspace that holds a repository, below one, and beside none.

use super::*;

use IntentScope::Metadata as M;

/// Commands in a workspace with a `.git` at its root, with their expected
/// kind and scope.
const IN_A_REPOSITORY: &[(&str, IntentKind, IntentScope)] = &[
    // Reading git runs as plain shell.
    ("git status", S, W),
    ("git status --short", S, W),
    ("git diff HEAD~1 -- src", S, W),
    ("git log --oneline -5", S, W),
    ("git show HEAD:README.md", S, W),
    ("git blame src/main.rs", S, W),
    ("git rev-parse --show-toplevel", S, W),
    ("git ls-files", S, W),
    ("git grep -n foo", S, W),
    ("git branch", S, W),
    ("git branch -avv", S, W),
    ("git branch --list 'feat*'", S, W),
    ("git branch --merged main", S, W),
    ("git tag", S, W),
    ("git tag -l 'v*'", S, W),
    ("git stash list", S, W),
    ("git config user.name", S, W),
    ("git config --get core.hooksPath", S, W),
    ("git config --list", S, W),
    ("git config get user.email", S, W),
    ("git remote -v", S, W),
    ("git worktree list", S, W),
    ("git reflog", S, W),
    ("git symbolic-ref HEAD", S, W),
    ("git hash-object src/main.rs", S, W),
    ("git apply --check p.diff", S, W),
    ("git apply p.diff", S, W),
    ("git submodule status", S, W),
    ("git --version", S, W),
    ("git clean -n", S, W),
    ("git --git-dir=other log", S, W),
    ("cat .git/config", S, W),
    ("cat .git/HEAD > head.txt", S, W),
    ("ls .git/hooks", S, W),
    ("cp .git/config backup.cfg", S, W),
    ("git init sub", S, W),
    ("git config -f my.cfg a.b c", S, W),
    // Writing the repository is writing its metadata.
    ("git commit -m x", S, M),
    ("git commit -am 'fix: see https://x'", S, M),
    ("git add .", S, M),
    ("git checkout main", S, M),
    ("git switch -c topic", S, M),
    ("git reset --hard", S, M),
    ("git merge topic", S, M),
    ("git rebase main", S, M),
    ("git cherry-pick abc", S, M),
    ("git stash", S, M),
    ("git stash pop", S, M),
    ("git branch topic", S, M),
    ("git branch -D topic", S, M),
    ("git tag v1", S, M),
    ("git tag -a v1 -m release", S, M),
    ("git config core.hooksPath hooks", S, M),
    ("git config set core.fsmonitor true", S, M),
    ("git config --unset core.bare", S, M),
    ("git config -f .git/config core.bare true", S, M),
    ("git remote add origin x", S, M),
    ("git hash-object -w src/main.rs", S, M),
    ("git apply --index p.diff", S, M),
    ("git init", S, M),
    ("git gc", S, M),
    ("git frobnicate", S, M),
    ("git -C sub commit -m x", S, M),
    ("cd sub && git add -A", S, M),
    ("git --git-dir=.git commit -m x", S, M),
    ("git commit -m \"$MSG\"", S, M),
    ("cd \"$D\" && git commit", S, M),
    ("git fetch", N, M),
    ("git pull", N, M),
    ("git push origin main", N, M),
    ("git clone https://example.com/r", N, W),
    ("git config --global user.name me", S, O),
    ("git worktree add ../elsewhere", S, O),
    ("git $SUB", U, X),
    // So is writing into `.git` or `.keel` with the shell.
    ("echo x > .git/hooks/pre-commit", S, M),
    ("echo '[core]' >> .git/config", S, M),
    ("printf x | tee .git/hooks/post-commit", S, M),
    ("cp hook.sh .git/hooks/pre-commit", S, M),
    ("cp -t .git/hooks hook.sh", S, M),
    ("chmod +x .git/hooks/pre-commit", S, M),
    ("rm -rf .git", S, M),
    ("mv .git .git-old", S, M),
    ("ln hook.sh .git/hooks/pre-push", S, M),
    ("git init --bare .git/x", S, M),
    ("git init -b main .", S, M),
    ("touch .keel/config.toml", S, M),
    ("cd .git && echo x > config", S, M),
    ("echo x > sub/.git/config", S, M),
];

fn repository() -> Ws {
    let ws = Ws::new();
    std::fs::create_dir_all(ws.path(".git/hooks")).unwrap();
    std::fs::create_dir_all(ws.path(".keel")).unwrap();
    ws
}

#[test]
fn git_and_metadata_in_a_repository() {
    let ws = repository();
    let mut failures = Vec::new();
    for &(command, kind, scope) in IN_A_REPOSITORY {
        let analysis = ws.analyze(command);
        if (analysis.kind, analysis.scope) != (kind, scope) {
            failures.push(format!(
                "{command:?}: expected {kind:?}/{scope:?}, got {:?}/{:?} {:?}",
                analysis.kind, analysis.scope, analysis.reasons
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_metadata_write_says_why_and_names_the_repository() {
    let ws = repository();
    let analysis = ws.analyze("git commit -m x");
    assert_eq!(analysis.targets, [".git"]);
    assert_eq!(
        analysis.reasons,
        ["`git commit` writes the repository's metadata (`.git`), read-only for commands"]
    );
    let analysis = ws.analyze("echo x > .git/hooks/pre-commit");
    assert!(
        analysis.reasons[0].contains("`.git/hooks/pre-commit` is git's or Keel's metadata"),
        "{analysis:?}"
    );
}

#[test]
fn without_a_repository_git_writes_only_what_it_makes() {
    let ws = Ws::new();
    for command in [
        "git init",
        "git init && git add -A && git commit -m x",
        "git commit -m x",
        "git config core.hooksPath hooks",
    ] {
        let analysis = ws.analyze(command);
        assert_eq!(
            (analysis.kind, analysis.scope),
            (S, W),
            "{command}: {analysis:?}"
        );
    }
}

#[test]
fn a_repository_above_the_workspace_is_outside() {
    let repo = tempfile::tempdir().unwrap();
    let top = std::fs::canonicalize(repo.path()).unwrap();
    std::fs::create_dir_all(top.join(".git")).unwrap();
    std::fs::create_dir_all(top.join("ws/src")).unwrap();
    let root = top.join("ws");
    let analysis = analyze_in(&root, "git commit -m x");
    assert_eq!(analysis.scope, O, "{analysis:?}");
    assert_eq!(analysis.targets, [top.join(".git").display().to_string()]);
    assert_eq!(analyze_in(&root, "git status").scope, W);
}
