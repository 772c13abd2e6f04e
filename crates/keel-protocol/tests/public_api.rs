//! The library crates' public API can grow without breaking its users
//! (docs/compatibility.md, "What semver covers").
//!
//! Adding a variant to a public enum, or a field to a public struct whose
//! fields are all public, breaks every caller that matches exhaustively or
//! builds the struct with a literal. So every such type in a library crate
//! is `#[non_exhaustive]` (callers then build it through a constructor), or
//! it is named in [`FROZEN`] with the reason its shape is fixed for good. A
//! struct with a private field is opaque already and needs neither.
//!
//! Which items are public is decided by the compiler: every library crate
//! root carries `#![warn(unreachable_pub)]` (checked here too), and clippy
//! runs with `-D warnings`, so a `pub` item is reachable from outside its
//! crate. The check parses each crate's sources with `syn` and skips only
//! `#[cfg(test)]` modules.
//!
//! It lives in keel-protocol because the lowest crate is the one every
//! workspace test run builds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

/// Public types whose shape is fixed for good, with the reason. The check
/// fails when an entry names a type that no longer needs it, so the list
/// never goes stale.
const FROZEN: &[(&str, &str, &str)] = &[
    (
        "keel-protocol",
        "Message",
        "the three roles every wire format has (user, assistant, tool result); \
         a fourth is a session-format change every provider adapter must \
         translate, which only an exhaustive match makes sure of",
    ),
    (
        "keel-protocol",
        "UserContent",
        "what a user message carries on every wire format (text, image); a new \
         kind must be translated by every adapter, checked by exhaustive matches",
    ),
    (
        "keel-protocol",
        "ContentBlock",
        "what an assistant message carries on every wire format (text, thinking, \
         tool call); a new kind must be translated by every adapter, checked by \
         exhaustive matches",
    ),
    (
        "keel-protocol",
        "ProviderEvent",
        "the streaming vocabulary every provider adapter produces and the \
         kernel's accumulator consumes; a new kind changes what a turn is made \
         of, and the accumulator's exhaustive match is what makes sure it is \
         handled rather than dropped",
    ),
    (
        "keel-protocol",
        "ToolStatus",
        "a tool call succeeded, failed or was cancelled: the statuses of the \
         session format's tool results, matched exhaustively wherever a \
         result is described",
    ),
    (
        "keel-protocol",
        "PermissionMode",
        "the permission modes are the authority contract (docs/contract.md); \
         a new mode must be placed in every cell of the policy matrix, which \
         only an exhaustive match makes sure of",
    ),
    (
        "keel-protocol",
        "IntentScope",
        "where an operation lands (the workspace, outside it, metadata, \
         unknown) decides its authority; a new scope must be placed by the \
         policy, checked by exhaustive matches",
    ),
    (
        "keel-protocol",
        "PermissionResolution",
        "a permission answer approves or denies; there is no third answer",
    ),
    (
        "keel-protocol",
        "QueueKind",
        "a run's two queues: steering (delivered at the next model turn) and \
         follow-ups (after the run would settle), each handled where messages \
         are queued and delivered",
    ),
    (
        "keel-protocol",
        "Incoming",
        "a JSON-RPC 2.0 frame is a request (with or without an id) or \
         invalid; fixed by the JSON-RPC 2.0 specification",
    ),
    (
        "keel-protocol",
        "Outcome",
        "a JSON-RPC 2.0 response carries a result or an error; fixed by the \
         specification",
    ),
    (
        "keel-protocol",
        "RequestId",
        "a JSON-RPC 2.0 id is a number or a string; fixed by the specification",
    ),
    (
        "keel-protocol",
        "JsonRpcVersion",
        "the `jsonrpc` member is always \"2.0\"; fixed by the specification",
    ),
    (
        "keel-protocol",
        "RunState",
        "a run's states (docs/contract.md): every host maps each end state \
         to an exit code, a reply or a result, checked by exhaustive matches",
    ),
    (
        "keel-kernel",
        "PolicyDecision",
        "a policy allows (at a sandbox level), asks, or denies; there is no \
         fourth outcome",
    ),
    (
        "keel-tool-api",
        "PathState",
        "what is at a path: nothing, a regular file, or something else; \
         complete by construction",
    ),
    (
        "keel-tool-api",
        "FileKind",
        "the kinds of file an open handle can be (regular, directory, FIFO, \
         socket, device, symlink): POSIX's file types, complete by \
         construction, and matched exhaustively where a refusal names one",
    ),
    (
        "keel-sandbox",
        "CallEnd",
        "how a started process ends: it exited, it was killed, or it never \
         started; there is no fourth way",
    ),
    (
        "keel-protocol",
        "BatchMode",
        "a batch of tool calls runs one after another or all at once; a bounded \
         mode would carry its bound and be a new type of scheduling, checked \
         exhaustively where batches run",
    ),
];

/// The workspace's crates that are libraries (every crate but the binary).
fn library_crates() -> Vec<(String, PathBuf)> {
    let crates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found: Vec<(String, PathBuf)> = fs::read_dir(&crates)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("src/lib.rs").is_file())
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, path)
        })
        .collect();
    found.sort();
    assert!(
        found.len() >= 10,
        "expected the workspace's library crates beside keel-protocol, found {found:?}"
    );
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

fn has_attr(attrs: &[syn::Attribute], name: &str) -> bool {
    attrs.iter().any(|attr| attr.path().is_ident(name))
}

/// `#[cfg(test)]` (and `#[cfg(all(test, …))]`): code no caller sees.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg") && {
            let text = attr.meta.require_list().map(|list| list.tokens.to_string());
            text.is_ok_and(|text| text == "test" || text.starts_with("all (test"))
        }
    })
}

fn is_pub(vis: &syn::Visibility) -> bool {
    matches!(vis, syn::Visibility::Public(_))
}

/// A public type whose growth would break callers, and why.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Closed {
    krate: String,
    name: String,
    place: String,
    what: &'static str,
}

fn walk(items: &[syn::Item], krate: &str, place: &str, out: &mut Vec<Closed>) {
    for item in items {
        match item {
            syn::Item::Mod(module) if !is_test_only(&module.attrs) => {
                if let Some((_, inner)) = &module.content {
                    walk(inner, krate, place, out);
                }
            }
            syn::Item::Enum(item)
                if is_pub(&item.vis)
                    && !is_test_only(&item.attrs)
                    && !has_attr(&item.attrs, "non_exhaustive") =>
            {
                out.push(Closed {
                    krate: krate.to_owned(),
                    name: item.ident.to_string(),
                    place: place.to_owned(),
                    what: "a public enum",
                });
            }
            syn::Item::Struct(item) if is_pub(&item.vis) && !is_test_only(&item.attrs) => {
                let all_public = item.fields.iter().all(|field| is_pub(&field.vis));
                if all_public && !has_attr(&item.attrs, "non_exhaustive") {
                    out.push(Closed {
                        krate: krate.to_owned(),
                        name: item.ident.to_string(),
                        place: place.to_owned(),
                        what: "a public struct whose fields are all public",
                    });
                }
            }
            _ => {}
        }
    }
}

/// Every public type of every library crate that is neither
/// `#[non_exhaustive]` nor opaque.
fn closed_types() -> Vec<Closed> {
    let mut closed = Vec::new();
    for (krate, dir) in library_crates() {
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        for file in files {
            let relative = file.strip_prefix(&dir).unwrap();
            // Unit-test modules kept in files of their own.
            if relative
                .components()
                .any(|part| part.as_os_str() == "tests")
            {
                continue;
            }
            let text = fs::read_to_string(&file).unwrap();
            let parsed = syn::parse_file(&text)
                .unwrap_or_else(|err| panic!("{} does not parse: {err}", file.display()));
            if is_test_only(&parsed.attrs) {
                continue;
            }
            let place = format!("crates/{krate}/{}", relative.display());
            walk(&parsed.items, &krate, &place, &mut closed);
        }
    }
    closed.sort();
    closed
}

#[test]
fn public_types_of_library_crates_can_grow() {
    let closed = closed_types();
    let unexplained: Vec<String> = closed
        .iter()
        .filter(|c| {
            !FROZEN
                .iter()
                .any(|(krate, name, _)| *krate == c.krate && *name == c.name)
        })
        .map(|c| format!("  {} `{}` in {}", c.what, c.name, c.place))
        .collect();
    assert!(
        unexplained.is_empty(),
        "{} public types would break callers when they grow; mark each \
         #[non_exhaustive] (with a constructor where callers build it) or \
         name it in FROZEN in {} with the reason its shape is fixed:\n{}",
        unexplained.len(),
        file!(),
        unexplained.join("\n")
    );
}

#[test]
fn the_frozen_list_names_only_types_that_need_it() {
    let closed = closed_types();
    for (krate, name, reason) in FROZEN {
        assert!(
            !reason.trim().is_empty(),
            "FROZEN entry {krate}::{name} gives no reason"
        );
        assert!(
            closed.iter().any(|c| c.krate == *krate && c.name == *name),
            "FROZEN names {krate}::{name}, which is gone, opaque or #[non_exhaustive]: remove the entry"
        );
    }
}

#[test]
fn every_library_crate_root_warns_on_unreachable_pub() {
    for (krate, dir) in library_crates() {
        let root = fs::read_to_string(dir.join("src/lib.rs")).unwrap();
        let parsed = syn::parse_file(&root).unwrap();
        let warns = parsed.attrs.iter().any(|attr| {
            (attr.path().is_ident("warn") || attr.path().is_ident("deny"))
                && attr
                    .meta
                    .require_list()
                    .is_ok_and(|list| list.tokens.to_string().contains("unreachable_pub"))
        });
        assert!(
            warns,
            "crates/{krate}/src/lib.rs lacks #![warn(unreachable_pub)]: without it a `pub` \
             item may be private in fact, and this check would count it as public API"
        );
    }
}
