//! Tests for the shell analysis: a table of commands with their expected
//! classification, then file-system cases (`fs.rs`), results in detail
//! (`details.rs`) and a no-panic fuzz run (`fuzz.rs`).

mod details;
mod fs;
mod fuzz;
mod git;

use std::path::{Path, PathBuf};

use keel_protocol::{IntentKind, IntentScope};
use tempfile::TempDir;

use super::{ShellAnalysis, analyze};

/// A workspace with a few files and a private temp dir outside it.
pub(super) struct Ws {
    _dir: TempDir,
    _temp: TempDir,
    pub(super) root: PathBuf,
    pub(super) temp: PathBuf,
}

impl Ws {
    /// A fresh workspace.
    pub(super) fn new() -> Ws {
        let dir = tempfile::tempdir().unwrap();
        let temp_dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let temp = std::fs::canonicalize(temp_dir.path()).unwrap();
        for file in [
            "src/main.rs",
            "src/lib.rs",
            "README.md",
            "req.txt",
            "sub/file.txt",
        ] {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
        Ws {
            _dir: dir,
            _temp: temp_dir,
            root,
            temp,
        }
    }

    /// Analyzes `command` in this workspace with its temp dir.
    pub(super) fn analyze(&self, command: &str) -> ShellAnalysis {
        analyze(command, &self.root, Some(&self.temp))
    }

    /// A path under the root.
    pub(super) fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }
}

/// Analyzes `command` in a fresh workspace without a temp dir.
pub(super) fn analyze_in(root: &Path, command: &str) -> ShellAnalysis {
    analyze(command, root, None)
}

use IntentKind::{Network as N, Shell as S, Unknown as U};
use IntentScope::{Outside as O, Unknown as X, Workspace as W};

/// Commands with their expected kind and scope.
const TABLE: &[(&str, IntentKind, IntentScope)] = &[
    // The brief's cases.
    ("ls -la", S, W),
    ("cargo test", S, W),
    ("grep -rn foo src | head", S, W),
    ("echo hi > out.txt", S, W),
    ("echo x > /tmp/x", S, O),
    ("cp a /tmp/b", S, O),
    ("tee /tmp/x", S, O),
    ("cat ../x", S, O),
    ("cat ~/.ssh/id_rsa", S, O),
    ("cat $HOME/.ssh/id_rsa", S, X),
    ("cat $(echo /etc/passwd)", S, X),
    ("curl http://127.0.0.1:8080", N, W),
    ("python3 -c \"import socket\"", S, W),
    ("bash -c 'echo > /dev/tcp/127.0.0.1/80'", N, W),
    ("exec 3<>/dev/tcp/h/80", N, W),
    ("git status", S, W),
    ("git -C sub fetch origin", N, W),
    ("pip install -r req.txt", N, W),
    ("cd src && cat ../README.md", S, W),
    ("cd /tmp && ls", S, O),
    ("(cd /tmp); cat x", S, O),
    ("FOO=1 make", S, W),
    ("cat <<EOF > f.txt\n$(curl x)\nEOF", N, W),
    ("cat <<'EOF'\n$(curl x)\nEOF", S, W),
    ("echo 'x", U, X),
    ("sudo ls", U, X),
    ("eval \"$X\"", U, X),
    ("for f in *.rs; do wc -l \"$f\"; done", S, X),
    ("ls /proc/self/root/etc", S, O),
    ("cat /dev/null", S, W),
    ("echo $? $$ $#", S, W),
    ("echo $TMPDIR/x > $TMPDIR/y", S, W),
    ("find . -name '*.rs' -exec cat {} \\;", S, W),
    ("awk '{print $1}' file", S, W),
    ("sed -i 's/a/b/' f", S, W),
    ("printf '%s\\n' a", S, W),
    ("echo \"a;b|c\"", S, W),
    ("test -f /etc/x && echo y", S, O),
    ("[[ -f ../x ]]", S, O),
    // Quoting and words.
    ("echo 'a b' \"c d\" e\\ f", S, W),
    ("cat $'\\x2fetc\\x2fpasswd'", S, O),
    ("cat $'\\057etc/passwd'", S, O),
    ("cat \"/etc/\"passwd", S, O),
    ("cat /e\\tc/passwd", S, O),
    ("cat \\\n../x", S, O),
    ("cat {/etc/passwd,README.md}", S, O),
    ("{curl,example.com}", N, W),
    ("ls src/{main,lib}.rs", S, W),
    ("echo {1..5}", S, W),
    ("ls {-9223372036854775808..9223372036854775807}", S, X),
    (
        "ls {-9000000000000000000..9000000000000000000..300000000000000000}",
        S,
        W,
    ),
    ("ls {9223372036854775807..9223372036854775806}", S, W),
    ("ls {a..z..-3}", S, W),
    ("cat x{1..3}", S, W),
    ("echo a#b", S, W),
    ("ls # ../x", S, W),
    ("echo hi; # cat /etc/passwd", S, W),
    ("echo \"$(printf '%s' x)\"", S, X),
    // Operators.
    ("ls; ls && ls || ls", S, W),
    ("ls & ls", S, W),
    ("ls |& cat", S, W),
    ("ls | grep x | wc -l", S, W),
    ("! false", S, W),
    ("time ls", S, W),
    ("time -p ls", S, W),
    ("ls\nls /etc", S, O),
    // Redirections.
    ("ls 2>&1 >/dev/null", S, W),
    ("ls &> /dev/null", S, W),
    ("ls &>> log.txt", S, W),
    ("echo hi >&2", S, W),
    ("exec 3>&-", S, W),
    ("cat < /etc/hosts", S, O),
    ("cat 0</etc/hosts", S, O),
    ("cmd {fd}>out.txt", S, W),
    ("echo x >| /etc/x", S, O),
    ("echo x > /dev/udp/h/53", N, W),
    ("cat <<< /etc/passwd", S, W),
    ("cat <<< \"$(curl -s http://x)\"", N, W),
    ("echo x > \"$OUT\"", S, X),
    ("echo x > /etc/$NAME", S, O),
    ("cat < /dev/tcp/$HOST/80", N, W),
    // Here-documents.
    ("cat <<-EOF\n\tbody\n\tEOF", S, W),
    ("cat <<\"EOF\"\n$(curl x)\nEOF", S, W),
    ("cat <<EOF\n`curl x`\nEOF", N, W),
    ("cat <<EOF\n$HOME is data\nEOF", S, W),
    ("cat <<EOF\nunterminated", U, X),
    ("cat <<A; cat <<B\na\nA\nb\nB", S, W),
    ("cat <<EOF | sh\ncurl x\nEOF", U, X),
    // Compound commands.
    ("(ls; cd /; ls)", S, O),
    ("{ ls; pwd; }", S, W),
    (
        "if [ -f README.md ]; then cat README.md; else echo no; fi",
        S,
        W,
    ),
    ("if true; then curl x; fi", N, W),
    ("while true; do sleep 1; done", S, W),
    ("until false; do break; done", S, W),
    ("for x in a b c; do echo $x; done", S, X),
    ("for x in /etc/*; do :; done", S, O),
    ("for ((i=0;i<3;i++)); do echo; done", S, W),
    ("case x in a|b) ls;; *) curl x;; esac", N, W),
    ("case /etc/passwd in *) ls;; esac", S, W),
    ("select x in a b; do break; done", S, W),
    ("f() { ls; }; f", S, W),
    ("function g { curl x; }", N, W),
    ("(( x = 1 + 2 ))", S, W),
    ("echo $((1+2))", S, W),
    ("[[ $x == /etc/* ]]", S, X),
    ("[[ -d src ]] && cd src && ls", S, W),
    ("{ ls", U, X),
    ("ls )", U, X),
    ("if true; then ls", U, X),
    ("echo $(ls", U, X),
    ("echo `ls", U, X),
    ("echo ${x", U, X),
    // Wrappers.
    ("env -i PATH=/usr/bin curl x", N, O),
    ("env FOO=bar ls", S, W),
    ("nice -n 10 ls", S, W),
    ("nohup curl x &", N, W),
    ("timeout -s KILL 5 wget x", N, W),
    ("stdbuf -oL grep x src", S, W),
    ("xargs -n1 echo < req.txt", S, X),
    ("command curl x", N, W),
    ("command -v curl", S, W),
    ("builtin cd /tmp", S, O),
    ("exec ls", S, W),
    ("watch -n 1 ls", S, W),
    ("watch 'curl x'", N, W),
    ("strace ls", U, X),
    ("sh -c \"curl x\"", N, W),
    ("bash -c \"$CMD\"", U, X),
    ("bash script.sh", S, W),
    ("bash ../script.sh", S, O),
    ("sh -c 'cd /tmp && ls'; ls", S, O),
    ("bash -euo pipefail -c 'ls'", S, W),
    ("env -C /tmp ls", S, O),
    ("busybox wget x", N, W),
    ("doas ls", U, X),
    ("su -c ls", U, X),
    ("nice $OPTS ls", U, X),
    // Network.
    ("wget https://x/y.tar.gz", N, W),
    ("ssh host ls", N, W),
    ("scp f host:/tmp/", N, W),
    ("rsync -a src/ host:dst/", N, W),
    ("rsync -a src/ dst/", S, W),
    ("nc -l 8080", N, W),
    ("dig example.com", N, W),
    ("git clone https://github.com/a/b", N, W),
    ("git pull", N, W),
    ("git push origin main", N, W),
    ("git remote update", N, W),
    ("git submodule update --init", N, W),
    ("git ls-remote origin", N, W),
    ("git -c core.editor=vim commit", U, X),
    ("git $SUB", U, X),
    ("git log --oneline", S, W),
    ("git diff HEAD~1", S, W),
    ("git commit -m 'fix: see https://x'", S, W),
    ("pip install -r req.txt --no-index", S, W),
    ("pip3 download x", N, W),
    ("python -m pip install x", N, W),
    ("uv pip install x", N, W),
    ("uv run pytest", N, W),
    ("poetry install", N, W),
    ("npm install", N, W),
    ("npm i", N, W),
    ("npm ci", N, W),
    ("npm -w pkg install", N, W),
    ("npm run build", S, W),
    ("npm test", S, W),
    ("pnpm add lodash", N, W),
    ("yarn", N, W),
    ("yarn build", S, W),
    ("bun install", N, W),
    ("npx create-react-app x", N, W),
    ("cargo install ripgrep", N, W),
    ("cargo fetch", N, W),
    ("cargo +nightly update", N, W),
    ("cargo build --offline", S, W),
    ("go get x", N, W),
    ("go mod download", N, W),
    ("go build ./...", S, W),
    ("gem install rails", N, W),
    ("apt-get install -y curl", N, W),
    ("brew install jq", N, W),
    ("docker pull alpine", N, W),
    ("docker ps", S, W),
    ("docker compose up -d", N, W),
    ("kubectl get pods", N, W),
    ("gh pr list", N, W),
    ("python3 fetch.py https://x", N, W),
    ("python3 -m http.server", N, W),
    ("pip install git+https://github.com/a/b", N, W),
    // Paths and scope.
    ("ls /", S, O),
    ("cat /dev/stdin", S, W),
    ("ls -la --color=auto", S, W),
    ("gcc -I/usr/include x.c", S, O),
    ("gcc -I./include x.c", S, W),
    ("ls --dir=../x", S, O),
    ("cat -- -x", S, W),
    ("rm -rf ./build", S, W),
    ("rm -rf ../", S, O),
    ("touch a/b/../../../x", S, O),
    ("ls ~root", S, O),
    ("cat ~+/README.md", S, W),
    ("cat ~-/x", S, X),
    ("cd ~ && ls", S, O),
    ("cd", S, O),
    ("cd - && ls", S, X),
    ("cd src; cat ../README.md", S, O),
    ("cd nowhere && cat x", S, W),
    ("pushd src && ls && popd", S, W),
    ("popd; ls x", S, X),
    ("cat $PWD/README.md", S, W),
    ("cd src && cat $PWD/main.rs", S, W),
    ("PWD=$X; cat $PWD/passwd", S, X),
    ("echo ${#PATH}", S, W),
    ("cat \"$@\"", S, W),
    ("cat $1", S, W),
    ("$1 curl x", N, W),
    ("\"$1\" curl x", S, W),
    ("$@ curl x", N, W),
    ("set -- /etc/passwd; cat \"$1\"", S, O),
    ("set -- README.md; cat \"$1\"", S, W),
    ("bash -c 'cat \"$1\"' _ README.md", S, W),
    ("bash -c 'cat \"$0\"' README.md", S, W),
    ("f() { cd ..; }; f; ls", S, O),
    ("f() { cat \"$1\"; }; f README.md", S, W),
    ("f() { cat \"$1\"; }; f /etc/passwd", S, O),
    ("alias ll='ls -l'; ll", S, W),
    ("shopt -s expand_aliases", U, X),
    ("enable -f x.so y", U, X),
    ("trap 'curl x' EXIT", N, W),
    ("trap \"$X\" EXIT", U, X),
    ("declare -x FOO=/etc/x", S, O),
    ("export FOO=bar", S, W),
    ("export \"$X\"", U, X),
    ("export PATH=\"$PATH:bin\"", S, W),
    ("local x=$(curl x)", N, W),
    ("X=$(cat /etc/passwd)", S, O),
    ("x=(a b /etc/x)", S, O),
    ("EDITOR='curl x' git commit", N, W),
    ("GIT_PAGER='cat /etc/passwd' git log", S, O),
    ("BASH_ENV=../x bash -c ls", S, O),
    ("$CMD", U, X),
    ("\"$CMD\" arg", U, X),
    ("${CMD:-ls}", U, X),
    ("ls $(curl x)", N, X),
    ("cat <(curl x)", N, W),
    ("diff <(ls src) <(ls src)", S, W),
    ("./script.sh", S, W),
    ("../script.sh", S, O),
    ("/usr/bin/python3 x.py", S, W),
    ("/usr/bin/curl x", N, W),
    ("c?t x", U, X),
    ("[ -f README.md ] && echo y", S, W),
    // Code hidden in places that run it.
    ("echo $(case x in a) curl x;; esac)", N, X),
    ("((ls); curl x)", N, W),
    ("x=$(cat <<EOF\nhi\nEOF\n); echo \"$x\"", S, X),
    ("echo $(( $(curl -s x) + 1 ))", N, W),
    (". /dev/stdin <<< 'cat /etc/passwd'", S, O),
    ("source <(echo 'cat /etc/passwd')", U, X),
    ("bash /dev/fd/3 3<script", U, X),
    ("bash <<'EOF'\ncurl x\nEOF", N, W),
    ("x='a[$(cat /etc/passwd)]'; echo $((x))", U, X),
    ("x='$(ls)'; echo \"$x\"", S, X),
    ("for ((i=0; i<3; i++)); do echo $i; done", S, X),
    // Attempts to hide what runs.
    ("c\\url x", N, W),
    ("$'\\x63url' x", N, W),
    ("cu{r,}l x", N, W),
    ("eval 'cat /etc/passwd'", S, O),
    ("bash -c 'eval \"$1\"' _ 'curl x'", N, W),
    ("bash -c 'eval \"$1\"' _ \"$X\"", U, X),
    ("read PWD <<< /etc; cat $PWD/passwd", S, X),
    ("curl file:///etc/passwd", N, O),
    ("find . -newer /etc/passwd", S, O),
    ("git --git-dir=/etc/.git log", S, O),
    ("rsync -a $SRC dst/", U, X),
    ("docker -H tcp://h:2375 ps", N, W),
    ("go -C sub mod download", N, W),
    ("exec {fd}<>/dev/tcp/h/80", N, W),
    ("xargs -I{} curl {}", N, X),
    ("watch -x curl x", N, W),
    ("pacman -Syu", N, W),
    ("uv --offline run pytest", S, W),
    // Directory tracking.
    ("cd -P src && cat ../README.md", S, W),
    ("(cd src && cat ../README.md)", S, W),
    ("! cd src && cat ../README.md", S, O),
    ("env -C src cat ../README.md", S, W),
    ("env -C src cat ../../x", S, O),
    // Syntax the analyzer refuses.
    ("", U, X),
    ("   \n  ", U, X),
    ("# only a comment", U, X),
    (";", U, X),
    ("ls ;; ls", U, X),
    ("ls &&", U, X),
    ("| ls", U, X),
    ("coproc x", U, X),
    ("echo $[1+2]", U, X),
];

#[test]
fn table() {
    let ws = Ws::new();
    let mut failures = Vec::new();
    for &(command, kind, scope) in TABLE {
        let analysis = ws.analyze(command);
        if (analysis.kind, analysis.scope) != (kind, scope) {
            failures.push(format!(
                "{command:?}: expected {kind:?}/{scope:?}, got {:?}/{:?} {:?}",
                analysis.kind, analysis.scope, analysis.reasons
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        TABLE.len(),
        failures.join("\n")
    );
}

#[test]
fn plain_commands_have_no_reasons_and_others_do() {
    let ws = Ws::new();
    for &(command, kind, scope) in TABLE {
        let analysis = ws.analyze(command);
        let plain = kind == S && scope == W;
        assert_eq!(
            analysis.reasons.is_empty(),
            plain,
            "{command:?}: {analysis:?}"
        );
    }
}
