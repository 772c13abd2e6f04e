//! Signals during `keel run`: the first SIGINT, SIGTERM or SIGHUP cancels
//! the run through `AgentRun::cancel`, so the running tool's whole process
//! group is killed and the session records the cut-short calls; a second
//! SIGINT within [`FORCE_WINDOW`] exits at once.
//!
//! The exit code after a signal is 128 + its number (130 for SIGINT, 143 for
//! SIGTERM, 129 for SIGHUP), as shells report a process killed by it.

use std::convert::Infallible;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_kernel::AgentRun;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::Notify;

/// A second SIGINT this soon after the first exits without waiting.
pub const FORCE_WINDOW: Duration = Duration::from_secs(2);

/// The signal handlers, and the signal that cancelled the run, if any.
#[derive(Default)]
pub struct Received(AtomicI32, Arc<Notify>, Mutex<Option<Streams>>);

/// The three signals, listened for from the moment they are installed.
struct Streams {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Received {
    /// Installs the handlers now, before the run starts, so that a signal
    /// sent while the run is being set up is not lost to its default action
    /// (ending `keel` with the tool's processes left running). If they
    /// cannot be installed, signals keep their default action.
    pub fn install() -> Self {
        let streams = match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(interrupt), Ok(terminate), Ok(hangup)) => Some(Streams {
                interrupt,
                terminate,
                hangup,
            }),
            _ => {
                tracing::warn!("signal handlers could not be installed");
                None
            }
        };
        Self(AtomicI32::new(0), Arc::default(), Mutex::new(streams))
    }

    /// The exit code the signal calls for, if one was received.
    pub fn exit_code(&self) -> Option<u8> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            signal => u8::try_from(128 + signal).ok(),
        }
    }

    /// Notified once when a signal cancels the run (a waiting prompt gives up).
    pub fn cancelled(&self) -> Arc<Notify> {
        Arc::clone(&self.1)
    }
}

/// Cancels `run` on the first signal; never returns (race it against the run).
/// If the handlers cannot be installed, it waits forever and signals keep
/// their default action (the process ends).
pub async fn cancel_on_signal(run: &AgentRun, received: &Received) -> Infallible {
    on_signal(received, || run.cancel()).await
}

/// Calls `cancel` on the first signal (for a host that runs several runs
/// in turn, e.g. `--input-format stream-json`); otherwise as
/// [`cancel_on_signal`].
pub async fn on_signal(received: &Received, cancel: impl Fn()) -> Infallible {
    let streams = received
        .2
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take();
    let Some(Streams {
        mut interrupt,
        mut terminate,
        mut hangup,
    }) = streams
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
                crate::tty::restore();
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
                cancel();
                received.1.notify_one();
            }
        }
    }
}
