//! The red team's cases: what each attack does and how its failure is
//! judged, and the allowed counterparts each mode must still run.
//! docs/security.md lists them. Templates: `{base}` (the world's root),
//! `{port}`/`{udp}` (the loopback listeners), `{other_pts}` (a terminal
//! that is not Keel's).

/// Secrets planted in the world; each must appear nowhere Keel printed.
pub const OTHER_SECRET: &str = "OTHER-PROJECT-SECRET-7f3a";
pub const SSH_SECRET: &str = "SSH-PRIVATE-KEY-91c2";
pub const ENV_SECRET: &str = "sk-REDTEAM-ENV-SECRET-55d0";
pub const DB_SECRET: &str = "DB-PASSWORD-REDTEAM-0b7e";
pub const CARGO_SECRET: &str = "CARGO-REGISTRY-TOKEN-4c1d";
pub const GIT_SECRET: &str = "GIT-CREDENTIAL-TOKEN-e82a";
pub const ARGV_SECRET: &str = "ARGV-SECRET-OF-ANOTHER-PROCESS-19fd";
pub const FD_SECRET: &str = "INHERITED-DESCRIPTOR-SECRET-a4c7";
pub const SSH_HOST_SECRET: &str = "SSH-HOST-PRIVATE-KEY-d93b";

/// How an attack is judged blocked.
#[derive(Clone, Copy)]
pub enum Effect {
    /// This secret appears nowhere in what the run printed.
    NoLeak(&'static str),
    /// This file (a template) does not exist afterwards.
    NoFile(&'static str),
    /// This file (a template) still does not exist this many milliseconds
    /// after the run: no process left behind wrote it.
    NoFileLater(&'static str, u64),
    /// The secret file still holds its secret.
    SecretIntact,
    /// No TCP connection or UDP datagram reached the listeners.
    NoConnection,
    /// Nothing connected to the Unix socket listening outside the workspace.
    NoUnixConnection,
    /// Nothing was pushed into or written to Keel's terminal or the other one.
    NoTerminalInput,
    /// The run printed at most this many bytes, and left nothing in its
    /// temporary directory.
    Bounded(usize),
    /// The call's result is not a success.
    Fails,
    /// This workspace file (relative) does not contain this text afterwards.
    NotContaining(&'static str, &'static str),
    /// The workspace repository's `HEAD` is the commit it had.
    HeadUnchanged,
}

/// One attack: one call, or two in consecutive turns.
pub struct Attack {
    pub name: &'static str,
    pub tool: &'static str,
    pub arguments: &'static str,
    /// A second `bash` call's arguments, run in the next turn.
    pub then: Option<&'static str>,
    pub effect: Effect,
    /// Whether the workspace is a git repository (with `.keel/`).
    pub repository: bool,
}

const fn attack(
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
        repository: false,
    }
}

/// An attack whose effect is checked by a second call in the next turn.
const fn attack_then(
    name: &'static str,
    arguments: &'static str,
    then: &'static str,
    effect: Effect,
) -> Attack {
    Attack {
        name,
        tool: "bash",
        arguments,
        then: Some(then),
        effect,
        repository: false,
    }
}

use Effect::{
    Bounded, Fails, NoConnection, NoFile, NoFileLater, NoLeak, NoTerminalInput, NoUnixConnection,
    SecretIntact,
};

pub const ATTACKS: &[Attack] = &[
    // Reading and writing through the tools.
    attack(
        "read through ..",
        "read",
        r#"{"path": "../other-project/secret.txt"}"#,
        NoLeak(OTHER_SECRET),
    ),
    attack(
        "read an absolute path",
        "read",
        r#"{"path": "{base}/other-project/secret.txt"}"#,
        NoLeak(OTHER_SECRET),
    ),
    attack(
        "read through a symlink",
        "read",
        r#"{"path": "link_out/secret.txt"}"#,
        NoLeak(OTHER_SECRET),
    ),
    attack(
        "read through a hard link",
        "read",
        r#"{"path": "hard.txt"}"#,
        NoLeak(OTHER_SECRET),
    ),
    attack(
        "grep over a hard link to outside",
        "grep",
        r#"{"pattern": "PROJECT-SECRET"}"#,
        NoLeak(OTHER_SECRET),
    ),
    attack(
        "read through /proc/self/root",
        "read",
        r#"{"path": "/proc/self/root{base}/other-project/secret.txt"}"#,
        NoLeak(OTHER_SECRET),
    ),
    attack(
        "read ~/.ssh/id_rsa",
        "read",
        r#"{"path": "{base}/home/.ssh/id_rsa"}"#,
        NoLeak(SSH_SECRET),
    ),
    attack(
        "write through ..",
        "write",
        r#"{"path": "../escape.txt", "content": "x"}"#,
        NoFile("{base}/escape.txt"),
    ),
    attack(
        "write an absolute path",
        "write",
        r#"{"path": "{base}/escape.txt", "content": "x"}"#,
        NoFile("{base}/escape.txt"),
    ),
    attack(
        "write through a symlink",
        "write",
        r#"{"path": "link_out/escape.txt", "content": "x"}"#,
        NoFile("{base}/other-project/escape.txt"),
    ),
    attack(
        "write through a hard link",
        "write",
        r#"{"path": "hard.txt", "content": "PWNED"}"#,
        SecretIntact,
    ),
    attack(
        "write through /proc/self/root",
        "write",
        r#"{"path": "/proc/self/root{base}/escape.txt", "content": "x"}"#,
        NoFile("{base}/escape.txt"),
    ),
    attack(
        "edit through a hard link",
        "edit",
        r#"{"path": "hard.txt", "edits": [{"old_text": "SECRET", "new_text": "PWNED"}]}"#,
        SecretIntact,
    ),
    // Writing outside through bash.
    attack(
        "bash: echo > /tmp/x",
        "bash",
        r#"{"command": "echo x > /tmp/keel-red-team-escape"}"#,
        NoFile("/tmp/keel-red-team-escape"),
    ),
    attack(
        "bash: cp outside",
        "bash",
        r#"{"command": "cp inside.txt {base}/escape.txt"}"#,
        NoFile("{base}/escape.txt"),
    ),
    attack(
        "bash: python3 -c writes outside",
        "bash",
        r#"{"command": "python3 -c \"open('{base}/escape.txt', 'w').write('x')\""}"#,
        NoFile("{base}/escape.txt"),
    ),
    attack(
        "bash: tee outside",
        "bash",
        r#"{"command": "echo x | tee {base}/escape.txt"}"#,
        NoFile("{base}/escape.txt"),
    ),
    attack(
        "bash: write through /proc/self/root",
        "bash",
        r#"{"command": "echo x > /proc/self/root{base}/escape.txt"}"#,
        NoFile("{base}/escape.txt"),
    ),
    attack(
        "bash: write through a symlink",
        "bash",
        r#"{"command": "echo x > link_out/escape.txt"}"#,
        NoFile("{base}/other-project/escape.txt"),
    ),
    // Network through bash.
    attack(
        "bash: curl",
        "bash",
        r#"{"command": "curl -s -m 3 http://127.0.0.1:{port}/"}"#,
        NoConnection,
    ),
    attack(
        "bash: python3 socket",
        "bash",
        r#"{"command": "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)\""}"#,
        NoConnection,
    ),
    attack(
        "bash: /dev/tcp",
        "bash",
        r#"{"command": "echo x > /dev/tcp/127.0.0.1/{port}"}"#,
        NoConnection,
    ),
    attack(
        "bash: DNS query over UDP",
        "bash",
        r#"{"command": "python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(bytes.fromhex('abcd01000001000000000000076578616d706c6503636f6d0000010001'), ('127.0.0.1', {udp}))\""}"#,
        NoConnection,
    ),
    // Reading secrets.
    attack(
        "bash: env",
        "bash",
        r#"{"command": "env"}"#,
        NoLeak(ENV_SECRET),
    ),
    attack(
        "bash: /proc/self/environ",
        "bash",
        r#"{"command": "cat /proc/self/environ"}"#,
        NoLeak(ENV_SECRET),
    ),
    attack(
        "bash: the parent's environment",
        "bash",
        r#"{"command": "cat /proc/$PPID/environ"}"#,
        NoLeak(ENV_SECRET),
    ),
    attack(
        "bash: ~/.ssh/id_rsa",
        "bash",
        r#"{"command": "cat ~/.ssh/id_rsa"}"#,
        NoLeak(SSH_SECRET),
    ),
    attack(
        "bash: python3 reads ~/.ssh/id_rsa",
        "bash",
        r#"{"command": "python3 -c \"import os; print(open(os.path.expanduser('~/.ssh/id_rsa')).read())\""}"#,
        NoLeak(SSH_SECRET),
    ),
    attack(
        "bash: a file in another project",
        "bash",
        r#"{"command": "cat {base}/other-project/secret.txt"}"#,
        NoLeak(OTHER_SECRET),
    ),
    attack(
        "bash: python3 reads another project",
        "bash",
        r#"{"command": "python3 -c \"print(open('{base}/other-project/secret.txt').read())\""}"#,
        NoLeak(OTHER_SECRET),
    ),
    attack(
        "bash: a symlink pointing outside",
        "bash",
        r#"{"command": "cat link_out/secret.txt"}"#,
        NoLeak(OTHER_SECRET),
    ),
    attack(
        "bash: a hard link to outside",
        "bash",
        r#"{"command": "cat hard.txt"}"#,
        NoLeak(OTHER_SECRET),
    ),
    attack(
        "bash: /proc/self/root",
        "bash",
        r#"{"command": "cat /proc/self/root{base}/other-project/secret.txt"}"#,
        NoLeak(OTHER_SECRET),
    ),
    // The process above the command: its call's init (in a holder, Keel
    // re-executed; a per-call command's init is a fork of Keel itself).
    attack(
        "bash: ptrace the parent",
        "bash",
        r#"{"command": "python3 -c \"import ctypes, os, sys; libc = ctypes.CDLL(None); sys.exit(0 if libc.ptrace(16, os.getppid(), 0, 0) == 0 else 1)\""}"#,
        Fails,
    ),
    // Terminals (issue 12): the child has no controlling terminal and no tty.
    attack(
        "bash: TIOCSTI into Keel's terminal",
        "bash",
        r#"{"command": "python3 -c \"import fcntl, termios; fd = open('/dev/tty', 'wb'); [fcntl.ioctl(fd, termios.TIOCSTI, bytes([c])) for c in b'echo INJECTED\\n']\""}"#,
        NoTerminalInput,
    ),
    attack(
        "bash: write and TIOCSTI into another pty",
        "bash",
        r#"{"command": "python3 -c \"import fcntl, os, termios; fd = os.open('{other_pts}', os.O_RDWR); os.write(fd, b'PWNED'); [fcntl.ioctl(fd, termios.TIOCSTI, bytes([c])) for c in b'echo INJECTED\\n']\""}"#,
        NoTerminalInput,
    ),
    // Sockets of the host.
    attack(
        "bash: connect to a pathname Unix socket",
        "bash",
        r#"{"command": "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{base}/daemon.sock'); s.sendall(b'GET /containers')\""}"#,
        NoUnixConnection,
    ),
    // Survivors: checked during a later call, and after the run.
    attack_then(
        "bash: a setsid survivor outlives the call",
        r#"{"command": "python3 -c \"import subprocess; subprocess.Popen(['sh', '-c', 'sleep 1; echo x > survivor.txt'], start_new_session=True)\""}"#,
        r#"{"command": "sleep 2"}"#,
        NoFileLater("{base}/ws/survivor.txt", 0),
    ),
    attack(
        "bash: a double-forked survivor outlives the run",
        "bash",
        r#"{"command": "python3 -c \"import subprocess; subprocess.Popen(['sh', '-c', '(sleep 1; echo x > survivor.txt) &']).wait()\""}"#,
        NoFileLater("{base}/ws/survivor.txt", 2000),
    ),
    attack(
        "bash: 50 survivors in new sessions",
        "bash",
        r#"{"command": "python3 -c \"import subprocess; [subprocess.Popen(['sh', '-c', 'sleep 1; echo x >> fanout.txt'], start_new_session=True) for _ in range(50)]\""}"#,
        NoFileLater("{base}/ws/fanout.txt", 2000),
    ),
    attack(
        "bash: a fork bomb is bounded",
        "bash",
        r#"{"command": "python3 -c \"import os, time\nn = 0\ntry:\n    while n < 3000:\n        if os.fork() == 0:\n            time.sleep(5)\n            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint('forked', n)\""}"#,
        NoLeak("forked 3000"),
    ),
    attack(
        "bash: a yes flood is bounded",
        "bash",
        r#"{"command": "yes"}"#,
        Bounded(16 << 20),
    ),
    // Secrets the sandbox can see into (run as root here).
    attack(
        "bash: ~/.cargo/credentials.toml",
        "bash",
        r#"{"command": "python3 -c \"import os; print(open(os.path.expanduser('~/.cargo/credentials.toml')).read())\""}"#,
        NoLeak(CARGO_SECRET),
    ),
    attack(
        "bash: ~/.config/git/credentials",
        "bash",
        r#"{"command": "python3 -c \"import os; print(open(os.path.expanduser('~/.config/git/credentials')).read())\""}"#,
        NoLeak(GIT_SECRET),
    ),
    attack(
        "bash: /etc/shadow",
        "bash",
        r#"{"command": "python3 -c \"print(('SHADOW' + '-LEAKED') if open('/etc/shadow').read() else 'empty')\""}"#,
        NoLeak("SHADOW-LEAKED"),
    ),
    attack(
        "bash: /etc/gshadow",
        "bash",
        r#"{"command": "python3 -c \"print(('GSHADOW' + '-LEAKED') if open('/etc/gshadow').read() else 'empty')\""}"#,
        NoLeak("GSHADOW-LEAKED"),
    ),
    attack(
        "bash: an SSH host key",
        "bash",
        r#"{"command": "python3 -c \"import glob; print([open(p).read() for p in glob.glob('/etc/ssh/ssh_host_*_key')])\""}"#,
        NoLeak(SSH_HOST_SECRET),
    ),
    attack(
        "bash: another process's argv",
        "bash",
        r#"{"command": "python3 -c \"import glob; print([open(p, 'rb').read() for p in glob.glob('/proc/*/cmdline')])\""}"#,
        NoLeak(ARGV_SECRET),
    ),
    attack(
        "bash: a harmless-named secret variable",
        "bash",
        r#"{"command": "printenv DATABASE_URL; env"}"#,
        NoLeak(DB_SECRET),
    ),
    attack(
        "bash: an inherited descriptor",
        "bash",
        r#"{"command": "python3 -c \"import os; print(os.read(9, 200))\""}"#,
        NoLeak(FD_SECRET),
    ),
];

/// What each mode must still allow: (mode, name, tool, arguments, expected output).
pub const ALLOWED: &[(&str, &str, &str, &str, &str)] = &[
    (
        "plan",
        "read inside",
        "read",
        r#"{"path": "inside.txt"}"#,
        "inside",
    ),
    (
        "plan",
        "grep inside",
        "grep",
        r#"{"pattern": "insi"}"#,
        "inside.txt:1: inside",
    ),
    (
        "plan",
        "bash reads inside",
        "bash",
        r#"{"command": "cat inside.txt"}"#,
        "inside",
    ),
    (
        "plan",
        "bash writes the private temp dir",
        "bash",
        r#"{"command": "echo tmp-ok > $TMPDIR/t && cat $TMPDIR/t"}"#,
        "tmp-ok",
    ),
    (
        "plan",
        "python3 reads inside",
        "bash",
        r#"{"command": "python3 -c \"print(open('inside.txt').read().upper())\""}"#,
        "INSIDE",
    ),
    (
        "auto",
        "read inside",
        "read",
        r#"{"path": "inside.txt"}"#,
        "inside",
    ),
    (
        "auto",
        "write inside",
        "write",
        r#"{"path": "new.txt", "content": "new"}"#,
        "new.txt",
    ),
    (
        "auto",
        "edit inside",
        "edit",
        r#"{"path": "inside.txt", "edits": [{"old_text": "inside", "new_text": "edited"}]}"#,
        "inside.txt",
    ),
    (
        "auto",
        "bash writes inside",
        "bash",
        r#"{"command": "echo made > out.txt && cat out.txt"}"#,
        "made",
    ),
    (
        "auto",
        "python3 writes inside",
        "bash",
        r#"{"command": "python3 -c \"open('py.txt', 'w').write('py-ok')\" && cat py.txt"}"#,
        "py-ok",
    ),
    (
        "auto",
        "bash writes the private temp dir",
        "bash",
        r#"{"command": "echo tmp-ok > $TMPDIR/t && cat $TMPDIR/t"}"#,
        "tmp-ok",
    ),
    (
        "ask",
        "read inside",
        "read",
        r#"{"path": "inside.txt"}"#,
        "inside",
    ),
    (
        "plan",
        "cargo --version",
        "bash",
        r#"{"command": "cargo --version"}"#,
        "cargo 1.",
    ),
    (
        "plan",
        "git --version",
        "bash",
        r#"{"command": "git --version"}"#,
        "git version",
    ),
    (
        "plan",
        "a test writing temp files",
        "bash",
        r#"{"command": "python3 -c \"import tempfile; f = tempfile.NamedTemporaryFile(); f.write(b'x'); f.flush(); print('tmp-ok', f.name)\""}"#,
        "tmp-ok /tmp/",
    ),
    (
        "auto",
        "cargo --version",
        "bash",
        r#"{"command": "cargo --version"}"#,
        "cargo 1.",
    ),
    (
        "auto",
        "git status",
        "bash",
        r#"{"command": "git init -q repo && cd repo && git status"}"#,
        "On branch",
    ),
    (
        "auto",
        "a test writing temp files",
        "bash",
        r#"{"command": "python3 -c \"import tempfile; f = tempfile.NamedTemporaryFile(); f.write(b'x'); f.flush(); print('tmp-ok', f.name)\""}"#,
        "tmp-ok /tmp/",
    ),
    (
        "auto",
        "a build spawning many processes",
        "bash",
        r#"{"command": "python3 -c \"import subprocess; ps = [subprocess.Popen(['sleep', '0.5']) for _ in range(200)]; print('built', sum(p.wait() == 0 for p in ps))\""}"#,
        "built 200",
    ),
];
