//! Resource limits of one sandboxed command.
//!
//! A command could otherwise fork without end, fill the disk with one file,
//! map all memory or spin forever. Every limit has a default a build needs
//! (cargo, a test suite, a linker) and can be overridden by the host; `0`
//! means "no limit" for that resource.
//!
//! Processes are bounded by the `pid_max` of the command's own PID namespace
//! (Linux 6.14+: every PID namespace has its own), which holds for root too;
//! `RLIMIT_NPROC` is set as well, but the kernel does not apply it to root.

/// The limits, per command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Processes (and threads) alive at once in the command's PID namespace.
    pub processes: u64,
    /// Size of any one file the command writes, in bytes (`RLIMIT_FSIZE`).
    pub file_size: u64,
    /// Address space of each process, in bytes (`RLIMIT_AS`).
    pub address_space: u64,
    /// CPU time of each process, in seconds (`RLIMIT_CPU`).
    pub cpu_seconds: u64,
}

/// The lowest `pid_max` the kernel accepts for a PID namespace.
pub const MIN_PROCESSES: u64 = 301;

impl Default for ResourceLimits {
    fn default() -> Self {
        Self {
            processes: 1024,
            file_size: 8 << 30,
            address_space: 32 << 30,
            cpu_seconds: 2 * 60 * 60,
        }
    }
}

impl ResourceLimits {
    /// The `setrlimit` calls to make: (resource, limit); a limit of 0 is skipped.
    pub(crate) fn rlimits(&self) -> Vec<(libc::__rlimit_resource_t, libc::rlimit)> {
        let limit = |value: u64| libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        let mut calls = vec![(libc::RLIMIT_CORE, limit(0))];
        for (resource, value) in [
            (libc::RLIMIT_NPROC, self.processes),
            (libc::RLIMIT_FSIZE, self.file_size),
            (libc::RLIMIT_AS, self.address_space),
            (libc::RLIMIT_CPU, self.cpu_seconds),
        ] {
            if value > 0 {
                calls.push((resource, limit(value)));
            }
        }
        calls
    }

    /// The `pid_max` to write in the command's PID namespace, if limited.
    pub(crate) fn pid_max(&self) -> Option<u64> {
        (self.processes > 0).then(|| self.processes.max(MIN_PROCESSES) + 1)
    }
}
