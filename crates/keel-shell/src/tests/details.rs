//! Targets, reasons and limits in detail.

use std::time::{Duration, Instant};

use super::*;

#[test]
fn reasons_say_why() {
    let ws = Ws::new();
    let cases = [
        ("curl x", "`curl` reaches the network"),
        ("cat /etc/passwd", "`/etc/passwd` is outside the workspace"),
        ("cat $HOME/x", "`$HOME` cannot be resolved statically"),
        ("echo 'x", "cannot parse: unterminated quote"),
        ("echo $(ls", "cannot parse: unterminated `$(`"),
        (
            "cat <<EOF\nx",
            "cannot parse: unterminated here-document `EOF`",
        ),
        ("", "the command is empty"),
        (
            "sudo ls",
            "`sudo` runs a command with other privileges or in another root",
        ),
        ("git fetch", "`git fetch` reaches the network"),
        ("go mod download", "`go mod download` reaches the network"),
        (
            "cat ~/.ssh/id_rsa",
            "`~/.ssh/id_rsa` is in a home directory, outside the workspace",
        ),
        (
            "echo > /dev/tcp/h/80",
            "a redirection to `/dev/tcp/h/80` reaches the network",
        ),
        (
            "$X y",
            "cannot tell which command runs: `$X` cannot be resolved statically",
        ),
    ];
    for (command, reason) in cases {
        let analysis = ws.analyze(command);
        assert!(
            analysis.reasons.iter().any(|r| r == reason),
            "{command:?}: {:?}",
            analysis.reasons
        );
    }
}

#[test]
fn network_targets_are_listed() {
    let ws = Ws::new();
    assert_eq!(
        ws.analyze("curl -s https://example.com/x").targets,
        vec!["https://example.com/x"]
    );
    assert_eq!(ws.analyze("ssh user@host uptime").targets, vec!["host"]);
    assert_eq!(ws.analyze("scp f.txt host:/tmp/").targets, vec!["host"]);
    assert_eq!(ws.analyze("ping -c 1 8.8.8.8").targets, vec!["8.8.8.8"]);
}

#[test]
fn targets_and_reasons_hold_no_url_secrets() {
    let ws = Ws::new();
    let commands = [
        "curl https://user:TOKEN1@example.com/api?access_token=TOKEN2#TOKEN3",
        "git clone https://x-access-token:TOKEN1@github.com/o/r.git",
        "wget --header=x 'https://example.com/f?key=TOKEN2'",
        "curl --url=https://TOKEN1@example.com/",
        "pip install git+https://u:TOKEN1@example.com/r.git",
        "rsync -a rsync://u:TOKEN1@example.com/mod/ out/",
        "scp f.txt TOKEN1@example.com:/tmp/",
        "X=https://u:TOKEN1@example.com/ curl $X",
    ];
    for command in commands {
        let analysis = ws.analyze(command);
        let shown = format!("{:?} {:?}", analysis.targets, analysis.reasons);
        assert!(!shown.contains("TOKEN"), "{command}: {shown}");
        assert!(
            shown.contains("example.com") || shown.contains("github.com"),
            "{command}: {shown}"
        );
    }
}

#[test]
fn unknown_kind_means_unknown_scope() {
    let ws = Ws::new();
    for command in [
        "sudo cat /etc/passwd",
        "$X /etc/passwd",
        "eval $Y; cat ../x",
    ] {
        let analysis = ws.analyze(command);
        assert_eq!((analysis.kind, analysis.scope), (U, X), "{command}");
    }
}

#[test]
fn unknown_beats_network_beats_shell() {
    let ws = Ws::new();
    assert_eq!(ws.analyze("curl x; sudo ls").kind, U);
    assert_eq!(ws.analyze("ls; curl x; ls").kind, N);
    assert_eq!(ws.analyze("cat $X /etc/passwd").scope, O);
}

#[test]
fn targets_are_deduplicated_and_capped() {
    let ws = Ws::new();
    assert_eq!(
        ws.analyze("cat /etc/a /etc/a /etc/a").targets,
        vec!["/etc/a"]
    );
    let many: Vec<String> = (0..40).map(|i| format!("/x{i}")).collect();
    let analysis = ws.analyze(&format!("cat {}", many.join(" ")));
    assert_eq!(analysis.targets.len(), 32);
    assert_eq!(analysis.targets[0], "/x0");
}

#[test]
fn oversized_input_is_unknown() {
    let ws = Ws::new();
    let command = "ls ".repeat(30_000);
    let analysis = ws.analyze(&command);
    assert_eq!((analysis.kind, analysis.scope), (U, X));
    assert!(analysis.reasons[0].contains("64 KiB"));
}

#[test]
fn deep_nesting_is_unknown_not_a_crash() {
    let ws = Ws::new();
    let cases = [
        format!("{}ls{}", "$(".repeat(200), ")".repeat(200)),
        format!("{}ls{}", "( ".repeat(500), " )".repeat(500)),
        format!("{}ls{}", "{ ".repeat(300), "; }".repeat(300)),
        format!("echo {}", "${x:-".repeat(300)),
        format!("{}ls{}", "if true; then ".repeat(200), "; fi".repeat(200)),
        format!("{}x", "`".repeat(100)),
        format!("echo {}", "$((".repeat(20_000)),
        format!("echo {}", "${x:-".repeat(20_000)),
        format!("echo {}1{}", "$(( $((".repeat(12), ") )".repeat(12)),
        format!("{}ls{}", "(( ".repeat(5_000), " )".repeat(10_000)),
    ];
    for command in cases {
        let analysis = ws.analyze(&command);
        assert_eq!(analysis.kind, U, "{}", &command[..40]);
    }
    // Function calls count too.
    let chain: String = (1..60)
        .map(|i| format!("f{i}() {{ f{}; }}; ", i + 1))
        .collect();
    assert_eq!(ws.analyze(&format!("{chain}f1")).kind, U);
    let mut shallow = "curl x".to_owned();
    for _ in 0..3 {
        shallow = format!("sh -c {}", shell_quote(&shallow));
    }
    assert_eq!(ws.analyze(&shallow).kind, N);
}

/// Single-quotes `text` for the shell.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[test]
fn large_inputs_take_linear_time() {
    let ws = Ws::new();
    let cases = [
        "ls src; ".repeat(7_000),
        format!("echo {}", "a".repeat(60_000)),
        format!("echo {}", "{a,b}".repeat(5_000)),
        format!("f() {{ f; f; }}; {}", "f; ".repeat(5_000)),
        (0..300)
            .map(|i| format!("f{}() {{ f{i}; f{i}; }}; ", i + 1))
            .collect::<String>()
            + "f300",
        format!("cat {}", "../".repeat(20_000)),
        format!("cat <<EOF\n{}EOF\n", "$(ls)\n".repeat(8_000)),
        "for x in a; do cd sub; ".repeat(1_000) + &"done; ".repeat(1_000),
        format!("echo {}x{}", "$(( ".repeat(30), " )".repeat(30)),
        format!("echo {}x{}", "$( (".repeat(30), ") )".repeat(30)),
    ];
    for command in cases {
        let start = Instant::now();
        let _ = ws.analyze(&command);
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{}… took {:?}",
            &command[..30],
            start.elapsed()
        );
    }
}

#[test]
fn positional_parameters_are_tracked() {
    let ws = Ws::new();
    // Unknown positional parameters on their own are values given
    // elsewhere, not paths…
    assert_eq!(ws.analyze("f() { cat \"$1\"; }").scope, W);
    // …but mixed into a word they are unknown.
    assert_eq!(ws.analyze("f() { cat \"$1.bak\"; }").scope, X);
    // `shift` moves known values.
    assert_eq!(
        ws.analyze("set -- README.md /etc/x; shift; cat \"$1\"")
            .scope,
        O
    );
    // An unquoted value that would split is unknown.
    assert_eq!(ws.analyze("set -- 'a /etc/x'; cat $1").scope, X);
    assert_eq!(ws.analyze("IFS=:; set -- a; cat $1").scope, X);
}

#[test]
fn command_valued_variables_are_analyzed() {
    let ws = Ws::new();
    assert_eq!(
        ws.analyze("GIT_SSH_COMMAND='ssh -i key' git status").kind,
        N
    );
    assert_eq!(ws.analyze("PAGER=$P git log").kind, U);
    assert_eq!(ws.analyze("LD_PRELOAD=/tmp/x.so ls").scope, O);
}

/// What the sandbox of a workspace command would refuse is never hidden by
/// an unknown kind: `confinable` is false as soon as one finding names it.
#[test]
fn confinable_only_without_a_need_the_sandbox_refuses() {
    let ws = Ws::new();
    let confinable = [
        "ls -la",
        "echo $HOME",
        "echo \"today is $(date)\"",
        "export X=1; echo $X",
        "find . -name '*.txt' | xargs wc -l",
        "for f in *.txt; do wc -l \"$f\"; done",
        "eval \"$CMD\"",
        "$CMD --version",
        "cp req.txt $OUT",
    ];
    for command in confinable {
        let analysis = ws.analyze(command);
        assert!(analysis.confinable, "{command}: {analysis:?}");
    }
    let refused = [
        // Known needs, alone or beside something unknown.
        "curl https://example.com",
        "eval \"$CMD\"; curl https://example.com",
        "x=$(curl -s https://example.com); echo $x",
        "cp req.txt ../outside.txt",
        "eval \"$CMD\"; cp req.txt /etc/x",
        "eval \"$CMD\"; cat /etc/hostname",
        "touch ~/x",
        "$CMD > ~/.bashrc",
        "touch .git/x",
        "eval \"$CMD\"; touch .git/x",
        "sudo ls",
        "eval \"$CMD\"; strace ls",
        // The command as a whole could not be analyzed.
        "echo 'x",
        "",
    ];
    for command in refused {
        let analysis = ws.analyze(command);
        assert!(!analysis.confinable, "{command}: {analysis:?}");
    }
    let long = "x".repeat(crate::MAX_INPUT + 1);
    assert!(!ws.analyze(&long).confinable);
}
