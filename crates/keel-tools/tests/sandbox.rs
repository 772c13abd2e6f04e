//! The OS sandbox itself, below the policy: commands run through `bash` at
//! each sandbox level, the shell analysis not involved. Each case checks an
//! effect (a file, a connection, a secret in the output), not just an exit
//! code, so a command that failed for another reason cannot pass as blocked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use keel_protocol::UserContent;
use keel_tools::builtin::{BashOptions, BashTool};
use keel_tools::sandbox::{Sandbox, SandboxConfig, SandboxLevel};
use keel_tools::{ShellExecution, Tool, ToolContext, ToolError, ToolOutput, Workspace};
use serde_json::json;

struct Setup {
    workspace: tempfile::TempDir,
    outside: tempfile::TempDir,
}

fn setup() -> Setup {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("inside.txt"), "inside\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "TOP-SECRET\n").unwrap();
    Setup { workspace, outside }
}

async fn bash(root: &Path, level: SandboxLevel, command: &str) -> Result<ToolOutput, ToolError> {
    let context = ToolContext::new("c", Arc::new(Workspace::new(root).unwrap())).with_extension(
        ShellExecution::new(
            Sandbox::new(level)
                .with_config(Arc::new(SandboxConfig::default()))
                .with_metadata_writable(false),
        ),
    );
    BashTool::new(BashOptions::default())
        .execute(json!({ "command": command, "timeout": 20 }), context)
        .await
}

fn text(outcome: &Result<ToolOutput, ToolError>) -> String {
    let content = match outcome {
        Ok(output) => &output.content,
        Err(error) => &error.content,
    };
    content
        .iter()
        .filter_map(|block| match block {
            UserContent::Text { text } => Some(text.as_str()),
            UserContent::Image(_) => None,
        })
        .collect()
}

const CONFINED: [SandboxLevel; 2] = [SandboxLevel::ReadOnly, SandboxLevel::WorkspaceWrite];

#[tokio::test]
async fn confined_commands_cannot_read_outside_the_workspace() {
    let s = setup();
    let secret = s.outside.path().join("secret.txt");
    let commands = [
        format!("cat {}", secret.display()),
        format!("cat /proc/self/root{}", secret.display()),
        format!("python3 -c 'print(open(\"{}\").read())'", secret.display()),
        "ln -s SECRET link; cat link".replace("SECRET", &secret.display().to_string()),
        "cat /proc/$PPID/environ".to_owned(),
        // The host's /tmp (where `outside` is) is not the sandbox's.
        format!("ls {}", s.outside.path().display()),
    ];
    for level in CONFINED {
        for command in &commands {
            let outcome = bash(s.workspace.path(), level, command).await;
            let shown = text(&outcome);
            assert!(outcome.is_err(), "{level:?} `{command}` succeeded: {shown}");
            assert!(
                !shown.contains("TOP-SECRET"),
                "{level:?} `{command}`: {shown}"
            );
            assert!(!shown.contains("PATH="), "{level:?} `{command}`: {shown}");
        }
    }
}

#[tokio::test]
async fn confined_commands_write_only_where_their_level_allows() {
    let s = setup();
    let target = s.outside.path().join("written");
    let outside_writes = [
        format!("echo x > {}", target.display()),
        format!("cp inside.txt {}", target.display()),
        format!("echo x | tee {}", target.display()),
        format!(
            "python3 -c 'open(\"{}\", \"w\").write(\"x\")'",
            target.display()
        ),
    ];
    for level in CONFINED {
        for command in &outside_writes {
            let outcome = bash(s.workspace.path(), level, command).await;
            assert!(outcome.is_err(), "{level:?} `{command}` succeeded");
            assert!(!target.exists(), "{level:?} `{command}` wrote outside");
        }
        // `/tmp` is the sandbox's own tmpfs: writing it reaches nothing outside.
        let outcome = bash(
            s.workspace.path(),
            level,
            "echo x > /tmp/keel-sandbox-escape-test",
        )
        .await;
        assert!(outcome.is_ok(), "{level:?}: {outcome:?}");
        assert!(!Path::new("/tmp/keel-sandbox-escape-test").exists());
        // The private temp dir is always writable, and TMPDIR points there.
        let outcome = bash(
            s.workspace.path(),
            level,
            "echo t > $TMPDIR/t && cat $TMPDIR/t",
        )
        .await;
        assert_eq!(text(&outcome).trim(), "t", "{level:?}");
    }
    let outcome = bash(
        s.workspace.path(),
        SandboxLevel::ReadOnly,
        "echo x > new.txt",
    )
    .await;
    assert!(outcome.is_err());
    assert!(!s.workspace.path().join("new.txt").exists());
    let outcome = bash(
        s.workspace.path(),
        SandboxLevel::ReadOnly,
        "truncate -s 0 inside.txt",
    )
    .await;
    assert!(outcome.is_err());
    assert_eq!(
        std::fs::read_to_string(s.workspace.path().join("inside.txt")).unwrap(),
        "inside\n"
    );
    let outcome = bash(
        s.workspace.path(),
        SandboxLevel::WorkspaceWrite,
        "echo x > new.txt && mkdir -p d/e && mv new.txt d/e/ && cat d/e/new.txt inside.txt",
    )
    .await;
    assert_eq!(text(&outcome), "x\ninside", "{outcome:?}");
}

#[tokio::test]
async fn confined_commands_reach_no_network() {
    let s = setup();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let port = tcp.local_addr().unwrap().port();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let commands = [
        format!("echo hi > /dev/tcp/127.0.0.1/{port}"),
        format!("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))'"),
        format!(
            "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"q\", (\"127.0.0.1\", {udp_port}))'"
        ),
        "python3 -c 'import socket; socket.socket(socket.AF_INET6, socket.SOCK_STREAM)'".to_owned(),
        "python3 -c 'import socket; socket.getaddrinfo(\"example.com\", 80)'".to_owned(),
    ];
    for level in CONFINED {
        for command in &commands {
            let outcome = bash(s.workspace.path(), level, command).await;
            assert!(outcome.is_err(), "{level:?} `{command}` succeeded");
        }
    }
    assert!(tcp.accept().is_err(), "a connection reached the listener");
    let mut buffer = [0u8; 16];
    assert!(
        udp.recv_from(&mut buffer).is_err(),
        "a datagram reached the socket"
    );
    // Unix sockets stay usable (many tools talk to themselves through them).
    let outcome = bash(
        s.workspace.path(),
        SandboxLevel::WorkspaceWrite,
        "python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"ok\"); print(b.recv(2).decode())'",
    )
    .await;
    assert_eq!(text(&outcome).trim(), "ok", "{outcome:?}");
}

#[tokio::test]
async fn confined_commands_cannot_trace_or_signal_the_kernel() {
    let s = setup();
    let commands = [
        "python3 -c 'import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True); sys.exit(0 if libc.ptrace(16, os.getppid(), 0, 0) == 0 else 1)'",
        "kill -0 $PPID",
        "cat /proc/$PPID/mem",
    ];
    for level in CONFINED {
        for command in commands {
            let outcome = bash(s.workspace.path(), level, command).await;
            assert!(outcome.is_err(), "{level:?} `{command}` succeeded");
        }
    }
}

#[tokio::test]
async fn confined_commands_cannot_use_x32_system_calls_or_a_terminal() {
    let s = setup();
    // getpid through the x32 ABI (bit 30 set): the filter answers EPERM (1)
    // before the kernel could say ENOSYS (38) or run it.
    let x32 = "python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); \
               r = libc.syscall(0x40000000 + 39); print(r, ctypes.get_errno())'";
    let unsandboxed = bash(s.workspace.path(), SandboxLevel::Unsandboxed, x32).await;
    assert_ne!(text(&unsandboxed).trim(), "-1 1", "{unsandboxed:?}");
    for level in CONFINED {
        let outcome = bash(s.workspace.path(), level, x32).await;
        assert_eq!(text(&outcome).trim(), "-1 1", "{level:?}: {outcome:?}");
        // No controlling terminal, and no /dev/tty to open.
        let outcome = bash(
            s.workspace.path(),
            level,
            "tty; test -e /dev/tty || echo no-tty",
        )
        .await;
        assert_eq!(
            text(&outcome).trim(),
            "not a tty\nno-tty",
            "{level:?}: {outcome:?}"
        );
    }
}

#[tokio::test]
async fn confined_commands_still_do_ordinary_work() {
    let s = setup();
    let outcome = bash(
        s.workspace.path(),
        SandboxLevel::ReadOnly,
        "cat inside.txt | wc -l && ls /usr/bin >/dev/null && python3 -c 'print(6*7)' && env | grep -c '^PATH='",
    )
    .await;
    assert_eq!(text(&outcome), "1\n42\n1", "{outcome:?}");
}

#[tokio::test]
async fn unsandboxed_level_is_not_confined() {
    let s = setup();
    let secret = s.outside.path().join("secret.txt");
    let outcome = bash(
        s.workspace.path(),
        SandboxLevel::Unsandboxed,
        &format!("cat {}", secret.display()),
    )
    .await;
    assert_eq!(text(&outcome).trim(), "TOP-SECRET");
}
