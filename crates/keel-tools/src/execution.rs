//! What a command call is given besides the Tool API's context: the OS
//! sandbox, the namespace holders and the call's command receipts.
//!
//! The Tool API ([`keel_tool_api`]) names nothing of the sandbox; the
//! kernel puts a [`ShellExecution`] into each call's
//! [`Extensions`](crate::tool::ToolContext::extensions), and only `bash`
//! takes it out. A `bash` call without one runs nothing and fails with
//! `sandbox_unavailable`.

use crate::receipt::CallReceipt;
use crate::sandbox::{HolderPool, Sandbox};

/// How one command call runs: where its processes are confined and where
/// its receipts go.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ShellExecution {
    /// The OS sandbox the call's processes run in, at the level the
    /// permission decision carries.
    pub sandbox: Sandbox,
    /// The kernel's namespace holders, which sandboxed commands start in.
    pub holders: HolderPool,
    /// Where this call's command receipts go (docs/recovery.md): the
    /// session's journal and the call's key, the id of its
    /// `effect_started` entry; `None`: none are kept.
    pub receipts: Option<CallReceipt>,
}

impl ShellExecution {
    /// A call under `sandbox`, with holders of its own and no receipts.
    pub fn new(sandbox: Sandbox) -> Self {
        Self {
            sandbox,
            holders: HolderPool::default(),
            receipts: None,
        }
    }

    /// The same execution starting sandboxed commands in `holders`.
    pub fn holders(mut self, holders: HolderPool) -> Self {
        self.holders = holders;
        self
    }

    /// The same execution keeping the call's receipts in `receipts`.
    pub fn receipts(mut self, receipts: Option<CallReceipt>) -> Self {
        self.receipts = receipts;
        self
    }
}
