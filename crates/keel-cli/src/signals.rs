//! Signals during `keel run`: the first SIGINT, SIGTERM or SIGHUP cancels
//! the run through `AgentRun::cancel`, so every process of the running
//! tool is killed and the session records the cut-short calls; a second
//! SIGINT within [`FORCE_WINDOW`] exits at once.
//!
//! The exit code after a signal is 128 + its number (130 for SIGINT, 143 for
//! SIGTERM, 129 for SIGHUP), as shells report a process killed by it.

use std::convert::Infallible;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use keel_kernel::AgentRun;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// A second SIGINT this soon after the first exits without waiting.
pub const FORCE_WINDOW: Duration = Duration::from_secs(2);

/// The signal that cancelled the run, if any.
#[derive(Default)]
pub struct Received(AtomicI32);

impl Received {
    /// The exit code the signal calls for, if one was received.
    pub fn exit_code(&self) -> Option<u8> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            signal => u8::try_from(128 + signal).ok(),
        }
    }
}

/// The handlers of the signals that cancel a run, installed before the run
/// starts: a signal that arrives once the run's first command is running
/// must find them (a sandboxed command starts within a millisecond).
pub struct Handlers {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Handlers {
    /// Installs the handlers; `None` (with a warning) if they cannot be, and
    /// signals then keep their default action (the process ends).
    pub fn install() -> Option<Self> {
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(interrupt), Ok(terminate), Ok(hangup)) => Some(Self {
                interrupt,
                terminate,
                hangup,
            }),
            _ => {
                tracing::warn!("signal handlers could not be installed");
                None
            }
        }
    }
}

/// Cancels `run` on the first signal; never returns (race it against the run).
/// Without handlers, it waits forever.
pub async fn cancel_on_signal(
    handlers: Option<Handlers>,
    run: &AgentRun,
    received: &Received,
) -> Infallible {
    let Some(Handlers {
        mut interrupt,
        mut terminate,
        mut hangup,
    }) = handlers
    else {
        return std::future::pending().await;
    };
    let mut first: Option<Instant> = None;
    loop {
        let number = tokio::select! {
            _ = interrupt.recv() => libc::SIGINT,
            _ = terminate.recv() => libc::SIGTERM,
            _ = hangup.recv() => libc::SIGHUP,
        };
        match first {
            Some(at) if number == libc::SIGINT && at.elapsed() <= FORCE_WINDOW => {
                eprintln!("keel: interrupted again; exiting without waiting for the run");
                std::process::exit(128 + libc::SIGINT);
            }
            Some(_) => continue,
            None => {
                first = Some(Instant::now());
                let _ = received
                    .0
                    .compare_exchange(0, number, Ordering::SeqCst, Ordering::SeqCst);
                eprintln!("keel: cancelling the run (press Ctrl-C again to exit at once)");
                run.cancel();
            }
        }
    }
}
