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
//!
//! Some resources are the host's, shared with every process of the user,
//! and no rlimit covers them:
//!
//! - the private `/tmp` and `/dev/shm` are tmpfs mounts, whose pages are
//!   not counted in `RLIMIT_AS` (by default a tmpfs may grow to half the
//!   host's memory): each gets a `size=` of [`ResourceLimits::tmp_size`]
//!   and an inode count of one per 4 KiB of it;
//! - inotify instances and watches count against the user's per-user
//!   limits (`fs.inotify.max_user_instances`, 128 by default, shared with
//!   every process of root when Keel runs as root): the sandbox's user
//!   namespace gets limits of its own (`/proc/sys/user/max_inotify_*`, a
//!   per-namespace ucount checked before the host's), so the calls of one
//!   namespace holder together hold at most
//!   [`ResourceLimits::inotify_instances`] instances and
//!   [`ResourceLimits::inotify_watches`] watches.

/// The limits, per command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResourceLimits {
    /// Processes (and threads) alive at once in the command's PID namespace.
    pub processes: u64,
    /// Size of any one file the command writes, in bytes (`RLIMIT_FSIZE`).
    pub file_size: u64,
    /// Address space of each process, in bytes (`RLIMIT_AS`).
    pub address_space: u64,
    /// CPU time of each process, in seconds (`RLIMIT_CPU`).
    pub cpu_seconds: u64,
    /// Size of each of the command's private tmpfs mounts (`/tmp` and
    /// `/dev/shm`), in bytes; the default is [`default_tmp_size`].
    pub tmp_size: u64,
    /// inotify instances the sandbox's user namespace may hold at once
    /// (all calls of one namespace holder together).
    pub inotify_instances: u64,
    /// inotify watches the sandbox's user namespace may hold at once.
    pub inotify_watches: u64,
}

/// The default size of a sandbox's `/tmp` (and of its `/dev/shm`):
/// a sixteenth of the machine's memory, at most 1 GiB (and at least
/// 64 MiB, should the memory be unknown or tiny).
pub fn default_tmp_size() -> u64 {
    const MIN: u64 = 64 << 20;
    const MAX: u64 = 1 << 30;
    (physical_memory() / 16).clamp(MIN, MAX)
}

/// The machine's physical memory in bytes (0 when unknown).
fn physical_memory() -> u64 {
    // SAFETY: sysconf only reads system configuration; it takes no pointer.
    #[allow(unsafe_code)]
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    match (u64::try_from(pages), u64::try_from(size)) {
        (Ok(pages), Ok(size)) => pages.saturating_mul(size),
        _ => 0,
    }
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
            tmp_size: default_tmp_size(),
            inotify_instances: 16,
            inotify_watches: 8192,
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

    /// The mount options of a private tmpfs (`/tmp`, `/dev/shm`).
    pub(crate) fn tmpfs_options(&self) -> String {
        match self.tmp_size {
            0 => "mode=1777".to_owned(),
            size => format!(
                "mode=1777,size={size},nr_inodes={}",
                (size / 4096).max(1024)
            ),
        }
    }

    /// The per-user-namespace limits to write under `/proc/sys/user`:
    /// (file name, value); a limit of 0 is skipped.
    pub(crate) fn user_namespace_limits(&self) -> Vec<(&'static str, u64)> {
        [
            ("max_inotify_instances", self.inotify_instances),
            ("max_inotify_watches", self.inotify_watches),
        ]
        .into_iter()
        .filter(|(_, value)| *value > 0)
        .collect()
    }

    /// The `pid_max` to write in the command's PID namespace, if limited.
    pub(crate) fn pid_max(&self) -> Option<u64> {
        (self.processes > 0).then(|| self.processes.max(MIN_PROCESSES) + 1)
    }
}
