//! The checked-in JSON Schemas under `schema/` must match the Rust types.
//!
//! After an intended change of the wire format, regenerate them with
//! `KEEL_UPDATE_SCHEMA=1 cargo test -p keel-protocol --test schema` and
//! commit the diff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

fn schema_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../schema")
}

#[test]
fn checked_in_schemas_match_the_types() {
    let update = std::env::var_os("KEEL_UPDATE_SCHEMA").is_some();
    let mut stale = Vec::new();
    for (name, schema) in keel_protocol::schema::all() {
        let path = schema_dir().join(format!("{name}.json"));
        let generated = serde_json::to_string_pretty(&schema.to_value()).unwrap() + "\n";
        if update {
            std::fs::write(&path, &generated).unwrap();
            continue;
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        if on_disk != generated {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "schemas differ from the types: {stale:?}\nregenerate with KEEL_UPDATE_SCHEMA=1 cargo test -p keel-protocol --test schema"
    );
}

#[test]
fn events_round_trip_through_json() {
    use keel_protocol::{RunEvent, RunEventKind};
    let event = RunEvent::new(3, "r", "s", 1, RunEventKind::TurnStart { turn: 2 });
    let text = serde_json::to_string(&event).unwrap();
    assert_eq!(
        text,
        r#"{"seq":3,"run_id":"r","session_id":"s","timestamp":1,"type":"turn_start","turn":2}"#
    );
    let back: RunEvent = serde_json::from_str(&text).unwrap();
    assert_eq!(back, event);
}

#[test]
fn every_method_has_checked_in_params_and_response_schemas() {
    let names: Vec<&str> = keel_protocol::schema::all()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    for method in keel_protocol::rpc::methods::METHODS {
        let stem = format!("rpc_{}", method.replace('/', "_"));
        for suffix in ["params", "response"] {
            let wanted = format!("{stem}_{suffix}");
            assert!(names.contains(&wanted.as_str()), "no schema {wanted}");
        }
    }
}

#[test]
fn queue_cleared_has_a_stable_wire_form() {
    use keel_protocol::{QueueKind, RunEvent, RunEventKind};
    let event = RunEvent::new(
        7,
        "r",
        "s",
        1,
        RunEventKind::QueueCleared {
            queue: Some(QueueKind::FollowUp),
            steer: 0,
            follow_up: 2,
        },
    );
    let text = serde_json::to_string(&event).unwrap();
    assert_eq!(
        text,
        r#"{"seq":7,"run_id":"r","session_id":"s","timestamp":1,"type":"queue_cleared","queue":"follow_up","steer":0,"follow_up":2}"#
    );
    assert_eq!(serde_json::from_str::<RunEvent>(&text).unwrap(), event);
    let both = r#"{"seq":8,"run_id":"r","session_id":"s","timestamp":1,"type":"queue_cleared","steer":1,"follow_up":0}"#;
    let back: RunEvent = serde_json::from_str(both).unwrap();
    assert_eq!(back.type_name(), "queue_cleared");
    assert!(matches!(
        back.kind,
        RunEventKind::QueueCleared {
            queue: None,
            steer: 1,
            follow_up: 0
        }
    ));
}
