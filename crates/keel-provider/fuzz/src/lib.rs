//! The one property every stream-parser fuzz target checks: arbitrary
//! bytes, cut into arbitrary chunks, give a stream that ends in exactly one
//! terminal event, and never a panic.

use keel_protocol::ProviderEvent;
use keel_provider::http::{WireFormat, replay};

/// Replays `data` through `format`; the first byte picks the chunk size, so
/// splits land anywhere.
pub fn check_stream<F: WireFormat>(data: &[u8], format: F) {
    let Some((&size, body)) = data.split_first() else {
        return;
    };
    let size = usize::from(size).max(1);
    let chunks: Vec<Vec<u8>> = body.chunks(size).map(<[u8]>::to_vec).collect();
    let events = futures::executor::block_on(replay(chunks, format));
    let terminal = events
        .iter()
        .filter(|event| {
            matches!(
                event,
                ProviderEvent::Done { .. } | ProviderEvent::Error { .. }
            )
        })
        .count();
    assert_eq!(terminal, 1, "exactly one terminal event");
}
