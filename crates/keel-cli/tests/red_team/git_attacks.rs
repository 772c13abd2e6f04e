//! The red team's attacks on git's and Keel's metadata, each tried in a
//! workspace that is a repository with one commit and a `.keel/config.toml`:
//! planting a hook or a `core.hooksPath` through `bash`, committing without
//! approval, renaming `.git` away, rewriting `.keel` — plain shell forms
//! (which the analysis classifies as writing metadata, so `auto` asks and
//! the host denies) and python3 forms (opaque to the analysis, so in `auto`
//! they run and the sandbox's read-only `.git` refuses them). And the
//! allowed counterparts: reading git in `plan` and `auto`, and a `git
//! commit` the host approves. docs/security.md lists them.

use super::attacks::{Attack, Effect};

use Effect::{HeadUnchanged, NoFile, NotContaining};

const fn repo_attack(
    name: &'static str,
    tool: &'static str,
    arguments: &'static str,
    effect: Effect,
) -> Attack {
    Attack {
        name,
        tool,
        arguments,
        then: None,
        effect,
        repository: true,
    }
}

pub const GIT_ATTACKS: &[Attack] = &[
    repo_attack(
        "bash plants a hook: echo > .git/hooks/pre-commit",
        "bash",
        r#"{"command": "printf '#!/bin/sh\\ntouch {base}/MARK\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"}"#,
        NoFile("{base}/ws/.git/hooks/pre-commit"),
    ),
    repo_attack(
        "bash appends core.hooksPath to .git/config",
        "bash",
        r#"{"command": "printf '[core]\\n\\thooksPath = /tmp\\n' >> .git/config"}"#,
        NotContaining(".git/config", "hooksPath"),
    ),
    repo_attack(
        "`git config core.hooksPath`",
        "bash",
        r#"{"command": "git config core.hooksPath .githooks"}"#,
        NotContaining(".git/config", "hooksPath"),
    ),
    repo_attack(
        "`git config alias.st` running a command",
        "bash",
        r#"{"command": "git config alias.st '!touch {base}/MARK'"}"#,
        NotContaining(".git/config", "alias"),
    ),
    repo_attack(
        "`git commit` without approval",
        "bash",
        r#"{"command": "git -c user.name=m -c user.email=m@example.com commit -q --allow-empty -m attack"}"#,
        HeadUnchanged,
    ),
    repo_attack(
        "`cp` a hook into .git/hooks",
        "bash",
        r#"{"command": "cp inside.txt .git/hooks/post-checkout"}"#,
        NoFile("{base}/ws/.git/hooks/post-checkout"),
    ),
    repo_attack(
        "python3 plants a hook",
        "bash",
        r#"{"command": "python3 -c \"open('.git/hooks/pre-commit', 'w').write('#!/bin/sh')\""}"#,
        NoFile("{base}/ws/.git/hooks/pre-commit"),
    ),
    repo_attack(
        "python3 appends core.hooksPath to .git/config",
        "bash",
        r#"{"command": "python3 -c \"open('.git/config', 'a').write('[core]\\n\\thooksPath = /tmp\\n')\""}"#,
        NotContaining(".git/config", "hooksPath"),
    ),
    repo_attack(
        "python3 renames .git away and makes its own",
        "bash",
        r#"{"command": "python3 -c \"import os; os.rename('.git', '.git-old'); os.mkdir('.git')\""}"#,
        NoFile("{base}/ws/.git-old"),
    ),
    repo_attack(
        "python3 rewrites .keel/config.toml",
        "bash",
        r#"{"command": "python3 -c \"open('.keel/config.toml', 'w').write('attack = true')\""}"#,
        NotContaining(".keel/config.toml", "attack"),
    ),
    repo_attack(
        "write plants a hook",
        "write",
        r##"{"path": ".git/hooks/pre-push", "content": "#!/bin/sh\ntouch {base}/MARK\n"}"##,
        NoFile("{base}/ws/.git/hooks/pre-push"),
    ),
];

/// Allowed counterparts in a repository: (mode, name, tool, arguments,
/// expected in the result, whether the host approves what is asked).
pub const ALLOWED_IN_A_REPOSITORY: &[(&str, &str, &str, &str, &str, bool)] = &[
    (
        "plan",
        "git log and show",
        "bash",
        r#"{"command": "git log --oneline && git show --stat HEAD"}"#,
        "start",
        false,
    ),
    (
        "auto",
        "git status, log and diff",
        "bash",
        r#"{"command": "echo more >> inside.txt && git status --short && git log --oneline && git diff"}"#,
        "+more",
        false,
    ),
    (
        "auto",
        "an approved git commit",
        "bash",
        concat!(
            r#"{"command": ""#,
            "git -c user.name=m -c user.email=m@example.com commit -q --allow-empty",
            r#" -m approved-commit && git log -1 --format=%s"}"#
        ),
        "approved-commit",
        true,
    ),
];
