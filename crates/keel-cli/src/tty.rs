//! Single keys from the terminal on standard input, for `ask` prompts.
//!
//! While a prompt waits, the terminal is in non-canonical mode without
//! echo (a key arrives without Enter; Ctrl-C still sends SIGINT), and input
//! typed before the prompt is discarded, so a key pressed earlier can never
//! answer a request it did not see. The previous settings are restored when
//! the prompt ends, and by [`restore`] on an early exit (a second Ctrl-C).
//!
//! One reader thread reads standard input, unbuffered, for the life of the
//! process and hands each byte to the prompt that waits for it; a plain
//! thread (not the runtime's blocking pool), so a read that never returns
//! cannot hold up the process's exit.

use std::io::Read;
use std::os::fd::AsFd;
use std::sync::Mutex;

use nix::sys::termios::{
    FlushArg, LocalFlags, SetArg, SpecialCharacterIndices, Termios, tcflush, tcgetattr, tcsetattr,
};
use tokio::sync::mpsc;

/// The settings to put back, while a prompt has changed them.
static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

/// Bytes typed on standard input, one at a time.
pub struct Keys {
    bytes: mpsc::UnboundedReceiver<u8>,
}

impl Keys {
    /// Starts the reader thread; `None` if standard input cannot be read so.
    pub fn start() -> Option<Self> {
        let stdin = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
        let mut file = std::fs::File::from(stdin);
        let (sender, bytes) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("keel-keys".into())
            .spawn(move || {
                let mut byte = [0u8; 1];
                while let Ok(1) = file.read(&mut byte) {
                    if sender.send(byte[0]).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        Some(Self { bytes })
    }

    /// Puts the terminal in single-key mode and drops what was typed before.
    pub fn begin(&mut self) {
        let stdin = std::io::stdin();
        if let Ok(saved) = tcgetattr(stdin.as_fd()) {
            let mut raw = saved.clone();
            raw.local_flags
                .remove(LocalFlags::ICANON | LocalFlags::ECHO);
            raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
            raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
            if tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).is_ok() {
                *saved_lock() = Some(saved);
            }
        }
        let _ = tcflush(stdin.as_fd(), FlushArg::TCIFLUSH);
        while self.bytes.try_recv().is_ok() {}
    }

    /// The next key, `None` at end of input.
    pub async fn next(&mut self) -> Option<u8> {
        self.bytes.recv().await
    }
}

/// Puts back the terminal settings a prompt changed (idempotent).
pub fn restore() {
    if let Some(saved) = saved_lock().take() {
        let _ = tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &saved);
    }
}

fn saved_lock() -> std::sync::MutexGuard<'static, Option<Termios>> {
    // Held only to take or put a value; recover it from a poisoned lock.
    SAVED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
