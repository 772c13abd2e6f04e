//! The kernel's modules form layers (see the crate doc): a module may use
//! only modules of a lower layer number. This test reads every `crate::`,
//! `super::` and `self::` path in `src/` (the shared parser in
//! keel-protocol's `tests/support/module_layers.rs`) and fails on an edge
//! that points sideways or up, which is what an import cycle needs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

#[path = "../../keel-protocol/tests/support/module_layers.rs"]
mod module_layers;

/// Each module and its layer, as the crate doc lists them.
const LAYERS: &[(&str, u32)] = &[
    ("context", 0),
    ("trace", 0),
    ("error", 1),
    ("ids", 1),
    ("accumulator", 1),
    ("permission", 1),
    ("policy", 1),
    ("tokens", 1),
    ("checkpoint", 1),
    ("project", 1),
    ("system_prompt", 1),
    ("user_rules", 1),
    ("extension", 0),
    ("parts", 2),
    ("emitter", 2),
    ("journal", 2),
    ("rules", 2),
    ("tool_search", 2),
    ("shared", 3),
    ("pipeline", 3),
    ("fork", 3),
    ("hooks", 3),
    ("late_tools", 3),
    ("session_writer", 4),
    ("watchdog", 4),
    ("tools", 5),
    ("compaction", 5),
    ("snapshots", 5),
    ("recovery", 6),
    ("turn_loop", 7),
    ("run", 8),
    ("kernel", 9),
];

#[test]
fn modules_use_only_lower_layers_and_every_module_is_placed() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = module_layers::check(&src, LAYERS);
    assert!(
        found.is_empty(),
        "module layering of keel-kernel (crate doc, LAYERS here):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_layer_parser_finds_the_edges_of_sample_sources() {
    module_layers::self_test();
}
