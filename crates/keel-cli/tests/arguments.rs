//! Arguments that are not UTF-8: a startup error (exit 2) naming the
//! argument, never a panic; paths may still hold any bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

fn bytes(raw: &[u8]) -> OsString {
    OsString::from_vec(raw.to_vec())
}

/// Acceptance (issue 22): a prompt that is not UTF-8 exits 2 with a
/// startup error naming it (it panicked with exit 101 and a backtrace).
#[test]
fn a_prompt_that_is_not_utf8_is_a_startup_error_naming_it() {
    let args = [
        OsString::from("run"),
        OsString::from("--provider"),
        OsString::from("scripted"),
        bytes(b"fix the \xff\xfe bug"),
        OsString::from("--output-format"),
        OsString::from("stream-json"),
    ];
    let output = common::keel_os(&args, None, "");
    assert_eq!(output.code, 2, "{}", output.stderr);
    assert!(!output.stderr.contains("panicked"), "{}", output.stderr);
    let error = output.startup_error.expect("a startup_error line");
    assert_eq!(error["code"], "argument_not_utf8");
    assert_eq!(
        error["message"],
        "argument 4 is not valid UTF-8: \"fix the \\xFF\\xFE bug\"; keel takes prompts, names \
         and ids as UTF-8 text (a prompt can also come from a UTF-8 file with @FILE or from \
         standard input)"
    );
}

/// Any other text argument is named with the option it belongs to, also
/// as the plain line `-q` asks for; a path that is not UTF-8 before it is
/// not blamed (paths may hold any bytes).
#[test]
fn an_option_value_that_is_not_utf8_is_named_with_its_option() {
    let args = [
        OsString::from("run"),
        OsString::from("-q"),
        OsString::from("--workspace"),
        bytes(b"/nonexistent/\xff"),
        OsString::from("--model"),
        bytes(b"m\xe9"),
        OsString::from("hi"),
    ];
    let output = common::keel_os(&args, None, "");
    assert_eq!(output.code, 2, "{}", output.stderr);
    assert_eq!(
        output.stderr.trim_end(),
        "keel: argument 6 (the value of --model) is not valid UTF-8: \"m\\xE9\"; keel takes \
         prompts, names and ids as UTF-8 text (a prompt can also come from a UTF-8 file with \
         @FILE or from standard input) [argument_not_utf8]"
    );
}
