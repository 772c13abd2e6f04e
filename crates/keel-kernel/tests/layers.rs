//! The kernel's modules form layers (see the crate doc): a module may use
//! only modules of a lower layer number. This test reads every `crate::`
//! path in `src/` and fails on an edge that points sideways or up, which is
//! what an import cycle needs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Each module and its layer, as the crate doc lists them.
const LAYERS: &[(&str, u32)] = &[
    ("context", 0),
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
    ("parts", 2),
    ("emitter", 2),
    ("journal", 2),
    ("rules", 2),
    ("shared", 3),
    ("pipeline", 3),
    ("fork", 3),
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

fn layer(module: &str) -> Option<u32> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, layer)| *layer)
}

/// The modules each source file names through `crate::…`.
fn edges() -> BTreeMap<String, Vec<String>> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut edges = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let module = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut used: Vec<String> = text
            .match_indices("crate::")
            .filter_map(|(at, _)| {
                let rest = &text[at + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                (!name.is_empty()).then_some(name)
            })
            .filter(|name| layer(name).is_some())
            .collect();
        used.sort();
        used.dedup();
        edges.insert(module, used);
    }
    edges
}

#[test]
fn every_module_is_in_the_layer_table() {
    for module in edges().keys() {
        assert!(
            layer(module).is_some(),
            "src/{module}.rs is not in LAYERS: add it to the table here and to the crate doc"
        );
    }
}

#[test]
fn modules_use_only_lower_layers() {
    let mut upward = Vec::new();
    for (module, used) in edges() {
        let Some(own) = layer(&module) else { continue };
        for target in used {
            let theirs = layer(&target).unwrap();
            if theirs >= own {
                upward.push(format!(
                    "{module} (layer {own}) uses {target} (layer {theirs})"
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "edges that can form a cycle: {upward:#?}"
    );
}
