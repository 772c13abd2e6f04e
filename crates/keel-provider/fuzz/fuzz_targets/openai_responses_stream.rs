//! Fuzzes the openai_responses stream parser: arbitrary bytes, cut into arbitrary
//! chunks, must give a stream that ends in exactly one terminal event and
//! never panics.
#![no_main]

use keel_provider::openai_responses::ResponsesFormat;
use keel_provider_fuzz::check_stream;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| check_stream(data, ResponsesFormat::new()));
