//! The Landlock ruleset of one sandboxed command: the inner layer, under
//! the namespaces.
//!
//! The ruleset *handles* every filesystem right of ABI 4 and, unless the
//! level allows the network, TCP bind and connect: whatever it does not grant
//! is denied. Grants made here, on host paths (the sandbox's view binds the
//! same inodes, so the rules hold inside): read and execute on the
//! configured readable locations; read (and, from workspace-write on, every
//! write right) on the workspace and the extra writable directories. The
//! view's own mounts (`/tmp`, `/dev`, `/proc`) exist only inside, so the
//! command adds their rules itself before enforcing, with the bits
//! [`grant_bits`] computes here. Rights of newer ABIs (device ioctls, signal
//! and abstract socket scoping) are added where the kernel has them.
//!
//! Git's metadata: a linked work tree's git directories outside the
//! workspace get read, and every right only for a call the host approved to
//! write them. A `.git` *inside* the workspace cannot be excepted here —
//! a grant covers everything beneath its directory and Landlock has no
//! way to withdraw it from a subtree, so refusing writes under `.git` would
//! refuse creating files at the top of the workspace too. The view's
//! read-only mount over it is what refuses them (see `metadata`).

use std::os::fd::OwnedFd;
use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};

use super::metadata::Metadata;
use super::view::Grant;
use super::{Sandbox, SandboxError};

/// The access bits of a [`Grant`] on this kernel (its Landlock `abi`).
pub(super) fn grant_bits(grant: Grant, abi: i32) -> u64 {
    let handled = if abi >= 5 {
        AccessFs::from_all(ABI::V4) | AccessFs::IoctlDev
    } else {
        AccessFs::from_all(ABI::V4)
    };
    let wanted = match grant {
        Grant::List => AccessFs::ReadDir.into(),
        Grant::Read => AccessFs::from_read(ABI::V4),
        Grant::Devices => {
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::ReadDir | AccessFs::IoctlDev
        }
        Grant::All => AccessFs::from_all(ABI::V5),
    };
    (wanted & handled).bits()
}

/// Builds the ruleset and returns its file descriptor.
pub(super) fn build(
    sandbox: &Sandbox,
    workspace: &Path,
    metadata: &Metadata,
) -> Result<OwnedFd, SandboxError> {
    let required = ABI::V4;
    let read = AccessFs::from_read(required);
    let everything = AccessFs::from_all(ABI::V5);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(required))
        .map_err(landlock_error)?;
    if !sandbox.level.allows_network() {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(landlock_error)?;
    }
    let mut created = ruleset
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::IoctlDev)
        .and_then(|ruleset| ruleset.scope(Scope::Signal | Scope::AbstractUnixSocket))
        .and_then(Ruleset::create)
        .map_err(landlock_error)?;
    for path in &sandbox.config.readable {
        created = grant(created, path, read)?;
    }
    let workspace_access = if sandbox.level.writes_workspace() {
        everything
    } else {
        read
    };
    created = grant(created, workspace, workspace_access)?;
    if sandbox.level.writes_workspace() {
        for path in &sandbox.config.writable {
            created = grant(created, path, everything)?;
        }
    }
    let linked = match metadata.linked_writable {
        true => everything,
        false => read,
    };
    for path in &metadata.linked {
        created = grant(created, path, linked)?;
    }
    Option::<OwnedFd>::from(created).ok_or_else(|| SandboxError::Unavailable {
        reason: "Landlock created no ruleset".into(),
    })
}

/// Grants `access` beneath `path`; a path that does not exist is skipped
/// (a grant can only widen, so skipping one never loosens the sandbox).
fn grant(
    created: RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
) -> Result<RulesetCreated, SandboxError> {
    let fd = match PathFd::new(path) {
        Ok(fd) => fd,
        Err(error) => {
            tracing::debug!(path = %path.display(), %error, "sandbox grant skipped");
            return Ok(created);
        }
    };
    let access = if path.is_dir() {
        access
    } else {
        access & AccessFs::from_file(ABI::V5)
    };
    created
        .add_rule(PathBeneath::new(fd, access))
        .map_err(landlock_error)
}

fn landlock_error(error: impl std::fmt::Display) -> SandboxError {
    SandboxError::Unavailable {
        reason: format!("Landlock refused the ruleset: {error}"),
    }
}
