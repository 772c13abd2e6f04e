//! Every command in README.md's `sh` blocks runs as written, unless the
//! README marks what it needs that a test machine lacks: a trailing
//! `# needs: …` on the command, or `<!-- needs: … -->` on the line before
//! its block. `# exits N` marks a command that exits N on purpose.
//!
//! `cargo run --` and `keel` mean the `keel` binary under test (a `cargo`
//! wrapper and a `keel` link come first on PATH); every other word runs as
//! the shell reads it, from the repository root, with a temporary HOME and
//! XDG directories so nothing of the user's is read or written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

/// One command of the README, and what its comment says.
#[derive(Debug)]
struct Readme {
    command: String,
    needs: Option<String>,
    exits: i32,
}

/// The commands of every `sh` block, in order.
fn commands(readme: &str) -> Vec<Readme> {
    let mut found = Vec::new();
    let mut block: Option<Option<String>> = None;
    let mut previous = "";
    let mut pending = String::new();
    for line in readme.lines() {
        match &block {
            None if line.trim() == "```sh" => {
                let needs = previous
                    .trim()
                    .strip_prefix("<!-- needs:")
                    .and_then(|rest| rest.strip_suffix("-->"))
                    .map(|reason| reason.trim().to_owned());
                block = Some(needs);
            }
            None => {}
            Some(_) if line.trim() == "```" => {
                assert!(pending.is_empty(), "an unfinished command: {pending}");
                block = None;
            }
            Some(block_needs) => {
                if pending.is_empty() && (line.trim().is_empty() || line.trim().starts_with('#')) {
                    previous = line;
                    continue;
                }
                if !pending.is_empty() {
                    pending.push('\n');
                }
                pending.push_str(line);
                if let Some((command, comment)) = complete(&pending) {
                    let needs = block_needs.clone().or_else(|| {
                        comment
                            .strip_prefix("needs:")
                            .map(|reason| reason.trim().to_owned())
                    });
                    let exits = comment
                        .strip_prefix("exits ")
                        .and_then(|rest| rest.split_whitespace().next())
                        .map_or(0, |code| code.parse().unwrap());
                    found.push(Readme {
                        command,
                        needs,
                        exits,
                    });
                    pending.clear();
                }
            }
        }
        previous = line;
    }
    found
}

/// The command and its trailing comment, once `text` is a whole command
/// (no open quote, no continuation backslash).
fn complete(text: &str) -> Option<(String, String)> {
    let (mut single, mut double, mut escaped) = (false, false, false);
    let mut comment_at = None;
    let mut last = ' ';
    for (at, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if !single => escaped = true,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && last.is_whitespace() => {
                comment_at = Some(at);
                break;
            }
            _ => {}
        }
        last = c;
    }
    let (command, comment) = match comment_at {
        Some(at) => (&text[..at], text[at + 1..].trim()),
        None => (text, ""),
    };
    let open = single || double || command.trim_end().ends_with('\\');
    (!open).then(|| (command.trim().to_owned(), comment.to_owned()))
}

/// A folder for PATH with `keel` and a `cargo` that runs `keel` for `cargo run --`.
fn shims(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let keel = assert_cmd::cargo::cargo_bin!("keel");
    std::os::unix::fs::symlink(keel, bin.join("keel")).unwrap();
    let real_cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let wrapper = format!(
        "#!/bin/sh\nif [ \"$1\" = run ] && [ \"$2\" = -- ]; then shift 2; exec '{}' \"$@\"; fi\nexec '{real_cargo}' \"$@\"\n",
        keel.display()
    );
    let cargo = bin.join("cargo");
    std::fs::write(&cargo, wrapper).unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

#[test]
fn every_readme_command_that_needs_nothing_more_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let all = commands(&readme);
    let home = tempfile::tempdir().unwrap();
    let bin = shims(home.path());
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    let mut failures = Vec::new();
    for readme in &all {
        if readme.needs.is_some() {
            continue;
        }
        let output = Command::new("timeout")
            .args(["120", "sh", "-c", &readme.command])
            .current_dir(&root)
            .env("PATH", &path)
            .env("HOME", home.path())
            .env("XDG_DATA_HOME", home.path().join("data"))
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env_remove("KEEL_LOG")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        ran += 1;
        if output.status.code() != Some(readme.exits) {
            failures.push(format!(
                "`{}` exited {:?}, not {}:\n{}\n{}",
                readme.command,
                output.status.code(),
                readme.exits,
                String::from_utf8_lossy(&output.stdout)
                    .chars()
                    .take(2000)
                    .collect::<String>(),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    let skipped: Vec<_> = all.iter().filter_map(|r| r.needs.as_deref()).collect();
    println!(
        "readme: {ran} commands ran, {} need more: {skipped:?}",
        skipped.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(ran >= 15, "only {ran} README commands ran: {all:#?}");
}

#[test]
fn the_parser_reads_continuations_quotes_and_markers() {
    let readme = "x\n<!-- needs: a server -->\n```sh\nserve \\\n  --port 1\n```\n```sh\n# a comment\nkeel run 'two\nlines' # exits 1\nkeel demo   # needs: a key\necho '# not a comment'\n```\n";
    let found = commands(readme);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert_eq!(found[0].needs.as_deref(), Some("a server"));
    assert_eq!(found[1].command, "keel run 'two\nlines'");
    assert_eq!((found[1].exits, found[1].needs.is_none()), (1, true));
    assert_eq!(found[2].needs.as_deref(), Some("a key"));
    assert_eq!(found[3].command, "echo '# not a comment'");
}

/// The service example ("Keel as a service") runs for real: a Python
/// client with the `websockets` package against `keel serve`. It may skip
/// only where python3 is missing, and never on CI (`CI` set), where
/// `.ci/run` installs `websockets`; a missing package fails here, naming it.
#[test]
fn the_service_example_runs_with_python_websockets() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    // The Python shown is the file the example runs.
    let client = std::fs::read_to_string(root.join("docs/examples/service_client.py")).unwrap();
    assert!(
        readme.contains(&format!("```python\n{client}```")),
        "README's Python block differs from docs/examples/service_client.py"
    );
    let example = commands(&readme)
        .into_iter()
        .find(|readme| {
            readme
                .needs
                .as_deref()
                .is_some_and(|n| n.starts_with("python3"))
        })
        .expect("the README's service example, marked as needing python3");
    let has_python = Command::new("python3")
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .is_ok_and(|output| output.status.success());
    if !has_python {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 is missing on CI: the service example cannot run"
        );
        eprintln!("note: the service example skipped: python3 is missing");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let bin = shims(home.path());
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("timeout")
        .args(["120", "sh", "-c", &example.command])
        .current_dir(&root)
        .env("PATH", &path)
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env_remove("KEEL_LOG")
        .env_remove("KEEL_SERVER_TOKEN")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("No module named 'websockets'"),
        "the `websockets` package is missing: `python3 -m pip install 'websockets==17.*'` \
         (and PYTHONPATH if installed with --target)"
    );
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("0 run_started\n"), "{stdout}");
    assert!(stdout.contains(" run_settled\n"), "{stdout}");
    assert!(
        stdout.ends_with(
            "settled - This folder holds Keel's documentation: one Markdown file per subject.\n"
        ),
        "{stdout}"
    );
}
