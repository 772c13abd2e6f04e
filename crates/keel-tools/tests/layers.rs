//! keel-tools' modules form layers (see the crate doc): a module may use
//! only modules of a lower layer number; the Tool API (`tool`, `registry`,
//! `workspace`, … re-exported from keel-tool-api) and the engine crates are
//! below them all. This test reads every `crate::`, `super::` and `self::`
//! path in `src/` (the shared parser in keel-protocol's
//! `tests/support/module_layers.rs`) and fails on an edge that points
//! sideways or up, which is what an import cycle needs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

#[path = "../../keel-protocol/tests/support/module_layers.rs"]
mod module_layers;

/// Each module and its layer, as the crate doc lists them.
const LAYERS: &[(&str, u32)] = &[
    ("truncate", 0),
    ("scheduler", 0),
    ("untrusted", 0),
    ("binding", 0),
    ("receipt", 1),
    ("changes", 1),
    ("execution", 2),
    ("builtin", 3),
];

#[test]
fn modules_use_only_lower_layers_and_every_module_is_placed() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = module_layers::check(&src, LAYERS);
    assert!(
        found.is_empty(),
        "module layering of keel-tools (crate doc, LAYERS here):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_layer_parser_finds_the_edges_of_sample_sources() {
    module_layers::self_test();
}
