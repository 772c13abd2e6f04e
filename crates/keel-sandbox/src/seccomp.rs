//! The seccomp filter of sandboxed commands.
//!
//! Landlock confines paths and TCP ports; this filter closes what Landlock
//! does not see: sockets of any family but Unix (UDP, raw, netlink — DNS
//! included), ptrace and reading or writing other processes' memory,
//! io_uring (whose operations bypass the system-call filter), and the
//! kernel keyrings. Denied calls fail with EPERM instead of killing the
//! process, so programs report a clear error.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

use super::SandboxError;

/// System calls denied whatever their arguments.
const ALWAYS_DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_keyctl,
];

/// The filter for this machine's architecture, compiled once per variant.
pub(super) fn filter(network: bool) -> Result<BpfProgram, SandboxError> {
    static WITHOUT_NETWORK: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    static WITH_NETWORK: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    let cell = if network {
        &WITH_NETWORK
    } else {
        &WITHOUT_NETWORK
    };
    cell.get_or_init(|| compile(network))
        .clone()
        .map_err(|reason| SandboxError::Unavailable { reason })
}

/// Compiles the filter; the error is the reason it cannot be.
fn compile(network: bool) -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|_| {
        format!(
            "no seccomp filter is built for the {} architecture",
            std::env::consts::ARCH
        )
    })?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = ALWAYS_DENIED
        .iter()
        .map(|&call| (call, Vec::new()))
        .collect();
    let ioctl = |request: u64| -> Result<SeccompRule, seccompiler::BackendError> {
        // The kernel reads the request as 32 bits: compare only those.
        let condition =
            SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, request)?;
        SeccompRule::new(vec![condition])
    };
    let terminal = [libc::TIOCSTI, libc::TIOCLINUX]
        .into_iter()
        .map(ioctl)
        .collect::<Result<Vec<_>, _>>()
        .map_err(compile_error)?;
    rules.insert(libc::SYS_ioctl, terminal);
    if !network {
        let not_unix = || -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
            let family = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Ne,
                libc::AF_UNIX as u64,
            )?;
            Ok(vec![SeccompRule::new(vec![family])?])
        };
        rules.insert(libc::SYS_socket, not_unix().map_err(compile_error)?);
        rules.insert(libc::SYS_socketpair, not_unix().map_err(compile_error)?);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(compile_error)?;
    let program: BpfProgram = filter.try_into().map_err(compile_error)?;
    let mut guarded = x32_guard();
    guarded.extend(program);
    Ok(guarded)
}

/// `__X32_SYSCALL_BIT`: x32 system calls carry it in their number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Instructions that fail every system call numbered at or above the x32
/// bit with EPERM, before the compiled filter sees it. Meaningful on
/// x86-64 only; elsewhere no real system call has such a number.
fn x32_guard() -> BpfProgram {
    const LOAD_WORD_ABSOLUTE: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JUMP_IF_AT_LEAST: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RETURN: u16 = 0x06; // BPF_RET | BPF_K
    const RETURN_ERRNO: u32 = 0x0005_0000; // SECCOMP_RET_ERRNO
    vec![
        // seccomp_data.nr is at offset 0.
        sock_filter {
            code: LOAD_WORD_ABSOLUTE,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: JUMP_IF_AT_LEAST,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        sock_filter {
            code: RETURN,
            jt: 0,
            jf: 0,
            k: RETURN_ERRNO | libc::EPERM as u32,
        },
    ]
}

fn compile_error(error: impl std::fmt::Display) -> String {
    format!("the seccomp filter could not be compiled: {error}")
}
