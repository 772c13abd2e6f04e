//! Fuzzes the anthropic stream parser: arbitrary bytes, cut into arbitrary
//! chunks, must give a stream that ends in exactly one terminal event and
//! never panics.
#![no_main]

use keel_provider::anthropic::AnthropicFormat;
use keel_provider::http::replay;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks a chunk size, so splits land anywhere.
    let Some((&size, body)) = data.split_first() else {
        return;
    };
    let size = usize::from(size).max(1);
    let chunks: Vec<Vec<u8>> = body.chunks(size).map(<[u8]>::to_vec).collect();
    let events = futures::executor::block_on(replay(chunks, AnthropicFormat::new()));
    let terminal = events
        .iter()
        .filter(|event| {
            matches!(
                event,
                keel_protocol::ProviderEvent::Done { .. } | keel_protocol::ProviderEvent::Error { .. }
            )
        })
        .count();
    assert_eq!(terminal, 1, "exactly one terminal event");
});
