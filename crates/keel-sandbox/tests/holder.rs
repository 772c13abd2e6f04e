//! The namespace holder's seam: [`spawn`] commands through the namespaces
//! held for a sandbox and check, by their effects, that each call is still
//! isolated — its own `/tmp`, its own processes, nothing left behind — that
//! the holder is reused while the view stays the same, and that a host
//! change to what the view masks gets a fresh view.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_sandbox::{CallEnd, CallSpec, END_LEN, Sandbox, SandboxConfig, SandboxLevel, read_end};

/// The pool every call of this file runs in (a kernel owns one).
static POOL: std::sync::LazyLock<keel_sandbox::HolderPool> =
    std::sync::LazyLock::new(keel_sandbox::HolderPool::new);

/// What one call printed and how it ended.
struct Ran {
    stdout: String,
    stderr: String,
    end: CallEnd,
}

fn spec(script: &str) -> (CallSpec, std::io::PipeReader, std::io::PipeReader) {
    let (out_read, out_write) = std::io::pipe().unwrap();
    let (err_read, err_write) = std::io::pipe().unwrap();
    let spec = CallSpec::new(
        PathBuf::from("/bin/sh"),
        ["sh", "-c", script].map(OsString::from).to_vec(),
        vec![("PATH".into(), "/usr/bin:/bin".into())],
        OwnedFd::from(out_write),
        OwnedFd::from(err_write),
    );
    (spec, out_read, err_read)
}

fn run(sandbox: &Sandbox, workspace: &Path, script: &str) -> Ran {
    let (spec, mut out, mut err) = spec(script);
    let call = POOL.spawn(sandbox, workspace, spec).unwrap();
    let mut stdout = String::new();
    out.read_to_string(&mut stdout).unwrap();
    let mut stderr = String::new();
    err.read_to_string(&mut stderr).unwrap();
    let mut status = std::fs::File::from(call.status().try_clone_to_owned().unwrap());
    let mut record = Vec::new();
    status.read_to_end(&mut record).unwrap();
    assert!(record.len() == END_LEN || record.is_empty());
    Ran {
        stdout,
        stderr,
        end: read_end(&record),
    }
}

fn sandbox(level: SandboxLevel, config: SandboxConfig) -> Sandbox {
    Sandbox::new(level)
        .with_config(Arc::new(config))
        .with_metadata_writable(false)
}

fn exit_code(end: &CallEnd) -> Option<i32> {
    match end {
        CallEnd::Exited(status) => status.code(),
        _ => None,
    }
}

#[test]
fn a_call_runs_confined_and_reports_its_output_and_exit_code() {
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = sandbox(SandboxLevel::WorkspaceWrite, SandboxConfig::default());
    let ran = run(
        &sandbox,
        workspace.path(),
        "echo out; echo err >&2; echo x > made.txt; pwd; exit 3",
    );
    assert_eq!(exit_code(&ran.end), Some(3), "{:?} {}", ran.end, ran.stderr);
    assert_eq!(ran.stdout, format!("out\n{}\n", workspace.path().display()));
    assert!(workspace.path().join("made.txt").exists());
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escaped");
    let ran = run(
        &sandbox,
        workspace.path(),
        &format!("echo x > {}", target.display()),
    );
    assert_eq!(exit_code(&ran.end), Some(2));
    assert!(!target.exists());
}

#[test]
fn calls_share_the_held_namespaces_but_not_tmp_or_processes() {
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = sandbox(SandboxLevel::WorkspaceWrite, SandboxConfig::default());
    let script = "readlink /proc/self/ns/net /proc/self/ns/pid; ls -A /tmp /dev/shm; \
                  echo $$; touch /tmp/mark /dev/shm/mark";
    let first = run(&sandbox, workspace.path(), script);
    let second = run(&sandbox, workspace.path(), script);
    assert_eq!(exit_code(&first.end), Some(0), "{}", first.stderr);
    let lines = |ran: &Ran| ran.stdout.lines().map(str::to_owned).collect::<Vec<_>>();
    let (first, second) = (lines(&first), lines(&second));
    // One network namespace (held), a PID namespace per call.
    assert_eq!(first[0], second[0]);
    assert_ne!(first[1], second[1]);
    // The second call saw neither mark: /tmp and /dev/shm were fresh.
    assert!(!second.iter().any(|line| line == "mark"), "{second:?}");
    // The shell is not PID 1: the call's own init is.
    assert_ne!(second.last().map(String::as_str), Some("1"));
}

#[test]
fn nothing_a_call_started_outlives_it() {
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = sandbox(SandboxLevel::WorkspaceWrite, SandboxConfig::default());
    let ran = run(
        &sandbox,
        workspace.path(),
        "setsid sh -c 'sleep 1; echo x > survivor.txt' >/dev/null 2>&1 & \
         (sh -c 'sleep 1; echo x > orphan.txt' &) ; echo started",
    );
    assert_eq!(ran.stdout, "started\n");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!workspace.path().join("survivor.txt").exists());
    assert!(!workspace.path().join("orphan.txt").exists());
}

#[test]
fn killing_a_call_ends_every_process_of_it() {
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = sandbox(SandboxLevel::WorkspaceWrite, SandboxConfig::default());
    let (spec, _out, _err) = spec("(sleep 1; echo x > late.txt) & sleep 30");
    let call = POOL.spawn(&sandbox, workspace.path(), spec).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    call.kill();
    // The pidfd turns readable once the init and its namespace are gone.
    let mut poll = [nix_poll(call.pidfd().as_fd())];
    // SAFETY: one live pollfd.
    #[allow(unsafe_code)]
    let ready = unsafe { libc::poll(poll.as_mut_ptr(), 1, 5000) };
    assert_eq!(ready, 1);
    let mut status = std::fs::File::from(call.status().try_clone_to_owned().unwrap());
    let mut record = Vec::new();
    status.read_to_end(&mut record).unwrap();
    assert!(matches!(read_end(&record), CallEnd::Killed));
    assert!(started.elapsed() < Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(1200));
    assert!(!workspace.path().join("late.txt").exists());
}

fn nix_poll(fd: std::os::fd::BorrowedFd<'_>) -> libc::pollfd {
    use std::os::fd::AsRawFd;
    libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }
}

#[test]
fn a_secret_replaced_on_the_host_stays_masked() {
    let workspace = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let secret = home.path().join("credentials");
    std::fs::write(&secret, "first-secret\n").unwrap();
    let mut config = SandboxConfig::default();
    config.readable.push(home.path().to_path_buf());
    config.masked.push(secret.clone());
    let sandbox = sandbox(SandboxLevel::WorkspaceWrite, config);
    let read = format!("cat {}; echo .", secret.display());
    assert_eq!(run(&sandbox, workspace.path(), &read).stdout, ".\n");
    // Replaced the way editors and `cargo login` write files: a new file
    // renamed over the old one (which detaches a mount on it elsewhere).
    let fresh = home.path().join("credentials.new");
    std::fs::write(&fresh, "second-secret\n").unwrap();
    std::fs::rename(&fresh, &secret).unwrap();
    assert_eq!(run(&sandbox, workspace.path(), &read).stdout, ".\n");
    // A secret that appears during the run is masked from then on.
    let later = home.path().join("token");
    let mut config = SandboxConfig::default();
    config.readable.push(home.path().to_path_buf());
    config.masked.push(later.clone());
    let sandbox = self::sandbox(SandboxLevel::WorkspaceWrite, config);
    let read = format!("cat {} 2>/dev/null; echo .", later.display());
    assert_eq!(run(&sandbox, workspace.path(), &read).stdout, ".\n");
    std::fs::write(&later, "third-secret\n").unwrap();
    assert_eq!(run(&sandbox, workspace.path(), &read).stdout, ".\n");
}

#[test]
fn levels_get_views_of_their_own() {
    let workspace = tempfile::tempdir().unwrap();
    let config = Arc::new(SandboxConfig::default());
    let read_only = Sandbox::new(SandboxLevel::ReadOnly)
        .with_config(Arc::clone(&config))
        .with_metadata_writable(false);
    let write = Sandbox::new(SandboxLevel::WorkspaceWrite)
        .with_config(config)
        .with_metadata_writable(false);
    assert_eq!(
        exit_code(&run(&write, workspace.path(), "echo x > a.txt").end),
        Some(0)
    );
    assert_ne!(
        exit_code(&run(&read_only, workspace.path(), "echo x > b.txt").end),
        Some(0)
    );
    assert_eq!(
        exit_code(&run(&write, workspace.path(), "echo x > c.txt").end),
        Some(0)
    );
    assert!(!workspace.path().join("b.txt").exists());
}

#[test]
fn a_program_that_cannot_start_is_reported_as_not_started() {
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = sandbox(SandboxLevel::WorkspaceWrite, SandboxConfig::default());
    let (mut spec, _out, _err) = spec("true");
    spec.program = PathBuf::from("/nonexistent/shell");
    let call = POOL.spawn(&sandbox, workspace.path(), spec).unwrap();
    let mut status = std::fs::File::from(call.status().try_clone_to_owned().unwrap());
    let mut record = Vec::new();
    status.read_to_end(&mut record).unwrap();
    match read_end(&record) {
        CallEnd::NotStarted(error) => assert_eq!(error.raw_os_error(), Some(libc::ENOENT)),
        other => panic!("expected NotStarted, got {other:?}"),
    }
}

/// Reads a started call's stdout up to its first line.
fn first_line(out: &mut std::io::BufReader<std::io::PipeReader>) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line
}

/// The end a call reported on its status pipe.
fn end_of(call: &keel_sandbox::Call) -> CallEnd {
    let mut status = std::fs::File::from(call.status().try_clone_to_owned().unwrap());
    let mut record = Vec::new();
    status.read_to_end(&mut record).unwrap();
    read_end(&record)
}

#[test]
fn a_pseudo_terminal_one_call_opened_is_not_another_calls() {
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = sandbox(SandboxLevel::WorkspaceWrite, SandboxConfig::default());
    // The first call opens a pseudo-terminal and keeps it while the second
    // runs in the same holder.
    let (spec, out, _err) = spec("exec 3<>/dev/ptmx; ls /dev/pts | tr '\\n' ' '; echo; sleep 5");
    let holding = POOL.spawn(&sandbox, workspace.path(), spec).unwrap();
    let mut out = std::io::BufReader::new(out);
    let own = first_line(&mut out);
    assert!(own.split_whitespace().any(|name| name == "0"), "{own:?}");
    let other = run(&sandbox, workspace.path(), "ls /dev/pts");
    assert_eq!(exit_code(&other.end), Some(0), "{}", other.stderr);
    assert_eq!(other.stdout, "ptmx\n");
    drop(holding);
}

#[test]
fn a_running_call_outlives_the_replacement_of_its_holder() {
    let workspace = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let secret = home.path().join("token");
    let mut config = SandboxConfig::default();
    config.readable.push(home.path().to_path_buf());
    config.masked.push(secret.clone());
    let sandbox = sandbox(SandboxLevel::WorkspaceWrite, config);
    let (spec, out, _err) = spec("echo started; sleep 1; echo done");
    let running = POOL.spawn(&sandbox, workspace.path(), spec).unwrap();
    let mut out = std::io::BufReader::new(out);
    assert_eq!(first_line(&mut out), "started\n");
    // The view changes (a secret appears): the next call gets a new holder.
    std::fs::write(&secret, "secret\n").unwrap();
    let read = format!("cat {}; echo .", secret.display());
    assert_eq!(run(&sandbox, workspace.path(), &read).stdout, ".\n");
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "done\n");
    assert_eq!(exit_code(&end_of(&running)), Some(0));
}

/// The private `/tmp` and `/dev/shm` are tmpfs mounts, whose pages no
/// rlimit counts: each has the size bound of `ResourceLimits::tmp_size`,
/// past which a write fails with "No space left on device".
#[test]
fn tmp_and_shm_are_bounded_in_size() {
    let workspace = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::default();
    config.limits.tmp_size = 8 << 20;
    let sandbox = sandbox(SandboxLevel::WorkspaceWrite, config);
    for dir in ["/tmp", "/dev/shm"] {
        let ran = run(
            &sandbox,
            workspace.path(),
            &format!(
                "head -c 4194304 /dev/zero > {dir}/small && echo small ok; \
                 head -c 16777216 /dev/zero > {dir}/big; echo big $?"
            ),
        );
        assert!(ran.stdout.contains("small ok"), "{dir}: {}", ran.stderr);
        assert!(
            ran.stdout.contains("big 1"),
            "{dir}: {} {}",
            ran.stdout,
            ran.stderr
        );
        assert!(
            ran.stderr.contains("No space left on device"),
            "{dir}: {}",
            ran.stderr
        );
    }
    let default = keel_sandbox::default_tmp_size();
    assert!((64 << 20..=1 << 30).contains(&default), "{default}");
}

/// inotify instances and watches are the host user's, shared with every
/// process of that user; the sandbox's user namespace has limits of its
/// own, checked before the host's, so a call cannot take them all.
#[test]
fn inotify_instances_and_watches_are_capped_in_the_user_namespace() {
    let workspace = tempfile::tempdir().unwrap();
    let mut config = SandboxConfig::default();
    config.limits.inotify_instances = 4;
    config.limits.inotify_watches = 10;
    let sandbox = sandbox(SandboxLevel::WorkspaceWrite, config);
    let script = r#"python3 -c "
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 50:
    fd = libc.inotify_init()
    if fd < 0:
        print('instances', len(fds), errno.errorcode[ctypes.get_errno()])
        break
    fds.append(fd)
watches = 0
while watches < 50:
    path = 'w%d' % watches
    open(path, 'w').close()
    if libc.inotify_add_watch(fds[0], path.encode(), 2) < 0:
        print('watches', watches, errno.errorcode[ctypes.get_errno()])
        break
    watches += 1
""#;
    let ran = run(&sandbox, workspace.path(), script);
    assert!(
        ran.stdout.contains("instances 4 EMFILE"),
        "{} {}",
        ran.stdout,
        ran.stderr
    );
    assert!(
        ran.stdout.contains("watches 10 ENOSPC"),
        "{} {}",
        ran.stdout,
        ran.stderr
    );
    // A second call of the same holder gets them again: the first call's
    // instances died with it.
    let again = run(&sandbox, workspace.path(), script);
    assert!(
        again.stdout.contains("instances 4 EMFILE"),
        "{}",
        again.stdout
    );
}

#[test]
fn a_command_that_cannot_be_passed_on_is_refused_as_invalid_before_anything_runs() {
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = sandbox(SandboxLevel::WorkspaceWrite, SandboxConfig::default());
    let (mut spec, _out, _err) = spec("touch ran");
    spec.args.push(OsString::from("a\0b"));
    let error = POOL.spawn(&sandbox, workspace.path(), spec).unwrap_err();
    assert!(
        matches!(error, keel_sandbox::SandboxError::InvalidCommand(_)),
        "{error:?}"
    );
    assert!(!workspace.path().join("ran").exists());
}
