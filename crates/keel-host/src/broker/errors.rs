//! Every failure the broker answers, as a typed [`RpcError`].
//!
//! Kernel and store errors are mapped by their stable codes
//! ([`KernelError::code`], [`SessionError::code`]), never by their
//! messages, so a code the kernel adds later (`session_busy` from the
//! store's writer lease) gets its kind here without a change elsewhere:
//! `session_busy` → [`ErrorKind::SessionBusy`], the not-found codes →
//! [`ErrorKind::NotFound`], every other kernel refusal →
//! [`ErrorKind::Refused`] with `data.kernel_code`.

use keel_kernel::{ControlError, KernelError};
use keel_protocol::rpc::{ErrorKind, RpcError};
use keel_session::SessionError;

use crate::HostError;

/// The kind a kernel or store code maps to.
fn kind_of_code(code: &str) -> ErrorKind {
    match code {
        "session_busy" => ErrorKind::SessionBusy,
        "session_not_found" | "entry_not_found" => ErrorKind::NotFound,
        _ => ErrorKind::Refused,
    }
}

/// A kernel error: its kind by code, `data.kernel_code` the code.
pub(crate) fn kernel(error: &KernelError) -> RpcError {
    let code = error.code();
    RpcError::new(kind_of_code(code), error.to_string()).with("kernel_code", code)
}

/// A store error.
pub(crate) fn session(error: &SessionError) -> RpcError {
    let code = error.code();
    RpcError::new(kind_of_code(code), error.to_string()).with("kernel_code", code)
}

/// A host error: configuration problems are [`ErrorKind::Configuration`]
/// (with `data.host_code`), lookups that found nothing
/// [`ErrorKind::NotFound`], kernel and store errors as above.
pub(crate) fn host(error: &HostError) -> RpcError {
    match error {
        HostError::Kernel(error) => kernel(error),
        HostError::Session(error) => session(error),
        HostError::NotFound { .. } => {
            RpcError::new(ErrorKind::NotFound, error.to_string()).with("host_code", error.code())
        }
        HostError::Ambiguous { .. } => RpcError::new(ErrorKind::InvalidParams, error.to_string())
            .with("host_code", error.code()),
        _ => RpcError::new(ErrorKind::Configuration, error.to_string())
            .with("host_code", error.code()),
    }
}

/// A control call the run refused.
pub(crate) fn control(error: &ControlError, run_id: &str) -> RpcError {
    let kind = match error {
        ControlError::NotActive => ErrorKind::RunNotActive,
        ControlError::UnknownPermissionRequest(_) => ErrorKind::NotFound,
        ControlError::EmptyMessage | ControlError::UnsupportedScope(_) => ErrorKind::InvalidParams,
        _ => ErrorKind::Internal,
    };
    RpcError::new(kind, error.to_string()).with("run_id", run_id)
}

/// No run `run_id` for this tenant (never started, another tenant's, or
/// finished longer ago than the ring's grace period).
pub(crate) fn no_run(run_id: &str) -> RpcError {
    RpcError::new(ErrorKind::NotFound, format!("no run `{run_id}`")).with("run_id", run_id)
}

/// Parameters that do not fit the method.
pub(crate) fn invalid(message: impl Into<String>) -> RpcError {
    RpcError::new(ErrorKind::InvalidParams, message)
}

/// The broker is draining.
pub(crate) fn draining() -> RpcError {
    RpcError::new(
        ErrorKind::Draining,
        "the server is shutting down and starts no runs",
    )
}

/// A session that a live run of this broker writes to.
pub(crate) fn busy(session_id: &str) -> RpcError {
    RpcError::new(
        ErrorKind::SessionBusy,
        format!("session `{session_id}` has a live run; wait for it or cancel it"),
    )
    .with("session_id", session_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernel codes map by name, so a code the kernel gains later (the
    /// store's writer lease refusing a second writer: `session_busy`) gets
    /// its kind without a change here.
    #[test]
    fn kernel_codes_map_to_kinds_by_name() {
        assert_eq!(kind_of_code("session_busy"), ErrorKind::SessionBusy);
        assert_eq!(kind_of_code("session_not_found"), ErrorKind::NotFound);
        assert_eq!(kind_of_code("entry_not_found"), ErrorKind::NotFound);
        assert_eq!(kind_of_code("session_interrupted"), ErrorKind::Refused);
        let error = kernel(&KernelError::EmptyPrompt);
        assert_eq!(error.kind_name(), Some("refused"));
        assert_eq!(
            error
                .data
                .as_ref()
                .and_then(|data| data.get("kernel_code"))
                .and_then(|code| code.as_str()),
            Some("empty_prompt")
        );
    }
}
