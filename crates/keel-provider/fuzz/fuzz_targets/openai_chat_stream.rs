//! Fuzzes the openai_chat stream parser: arbitrary bytes, cut into arbitrary
//! chunks, must give a stream that ends in exactly one terminal event and
//! never panics.
#![no_main]

use keel_provider::openai_chat::ChatFormat;
use keel_provider_fuzz::check_stream;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| check_stream(data, ChatFormat::new()));
