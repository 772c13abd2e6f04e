//! The embedding example that README.md shows runs as written: its kernel,
//! assembled through keel-host, settles the run and writes the file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/embed.rs"]
mod embed;

#[test]
fn the_embedding_example_settles_its_run() {
    embed::main().expect("the example's run settles and writes hello.txt");
}
