//! grep, find, ls and read (images, saved outputs) on real files, through
//! the `Tool` trait.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use keel_protocol::{ToolErrorCode, UserContent};
use keel_tools::builtin::{FindTool, GrepTool, LsTool, ReadTool};
use keel_tools::{Tool, ToolContext, ToolError, ToolOutput, Workspace};
use serde_json::{Value, json};

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let files: &[(&str, &[u8])] = &[
        ("src/main.rs", b"fn main() {\n    println!(\"hello\");\n}\n"),
        (
            "src/lib.rs",
            b"pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n// TODO: subtract\n",
        ),
        ("README.md", b"# Demo\nHello world\nTODO: docs\n"),
        (".env", b"TODO=hidden files are searched\n"),
        (".gitignore", b"target/\nsecret.txt\n"),
        ("secret.txt", b"TODO ignored by .gitignore\n"),
        ("target/debug/out.txt", b"TODO build output\n"),
        ("blob.bin", b"TODO\x00\x01\x02 binary"),
        (".git/config", b"TODO inside .git\n"),
        ("notes/regex.txt", b"literal a.b( here\naxb( not literal\n"),
    ];
    for (path, bytes) in files {
        let full = dir.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, bytes).unwrap();
    }
    dir
}

/// The store of this file's calls (a kernel owns one): a later `read`
/// resolves what an earlier call saved.
static OUTPUTS: std::sync::LazyLock<keel_tools::outputs::OutputStore> =
    std::sync::LazyLock::new(keel_tools::outputs::OutputStore::default);

async fn call(tool: &dyn Tool, root: &Path, arguments: Value) -> Result<ToolOutput, ToolError> {
    let context = {
        let mut tool_context = ToolContext::new("c", Arc::new(Workspace::new(root).unwrap()));
        tool_context.outputs = OUTPUTS.clone();
        tool_context
    };
    tool.execute(arguments, context).await
}

fn text(output: &ToolOutput) -> String {
    output
        .content
        .iter()
        .filter_map(|block| match block {
            UserContent::Text { text } => Some(text.as_str()),
            UserContent::Image(_) => None,
        })
        .collect()
}

#[tokio::test]
async fn grep_respects_ignore_rules_and_skips_binary_files() {
    let dir = project();
    let output = call(&GrepTool::default(), dir.path(), json!({"pattern": "TODO"}))
        .await
        .unwrap();
    let shown = text(&output);
    assert_eq!(
        shown.lines().collect::<Vec<_>>(),
        [
            ".env:1: TODO=hidden files are searched",
            "README.md:3: TODO: docs",
            "src/lib.rs:4: // TODO: subtract"
        ],
        "sorted by path; .gitignore'd, .git and binary files are skipped"
    );
    assert_eq!(output.details.unwrap()["matches"], 3);
}

#[tokio::test]
async fn grep_options_literal_case_glob_and_context() {
    let dir = project();
    let literal = call(
        &GrepTool::default(),
        dir.path(),
        json!({"pattern": "a.b(", "literal": true}),
    )
    .await
    .unwrap();
    assert_eq!(text(&literal), "notes/regex.txt:1: literal a.b( here");
    let case = call(
        &GrepTool::default(),
        dir.path(),
        json!({"pattern": "HELLO", "ignore_case": true, "glob": "*.md"}),
    )
    .await
    .unwrap();
    assert_eq!(text(&case), "README.md:2: Hello world");
    let context = call(
        &GrepTool::default(),
        dir.path(),
        json!({"pattern": "a \\+ b", "context": 1, "path": "src"}),
    )
    .await
    .unwrap();
    assert_eq!(
        text(&context),
        "src/lib.rs-1- pub fn add(a: i32, b: i32) -> i32 {\nsrc/lib.rs:2:     a + b\nsrc/lib.rs-3- }"
    );
    let none = call(&GrepTool::default(), dir.path(), json!({"pattern": "zzz"}))
        .await
        .unwrap();
    assert!(text(&none).starts_with("No matches"));
}

#[tokio::test]
async fn grep_limits_cuts_long_lines_and_refuses_bad_patterns() {
    let dir = tempfile::tempdir().unwrap();
    let many: String = (0..50).map(|i| format!("match {i}\n")).collect();
    std::fs::write(dir.path().join("many.txt"), many).unwrap();
    std::fs::write(
        dir.path().join("long.txt"),
        format!("match {}\n", "x".repeat(2000)),
    )
    .unwrap();
    let limited = call(
        &GrepTool::default(),
        dir.path(),
        json!({"pattern": "match", "limit": 5}),
    )
    .await
    .unwrap();
    assert_eq!(
        text(&limited)
            .lines()
            .filter(|l| l.contains(": match"))
            .count(),
        5
    );
    assert!(text(&limited).contains("Match limit of 5 reached"));
    let long = call(
        &GrepTool::default(),
        dir.path(),
        json!({"pattern": "match x", "path": "long.txt"}),
    )
    .await
    .unwrap();
    assert!(
        text(&long).ends_with("… [line truncated]"),
        "{}",
        text(&long)
    );
    assert!(text(&long).len() < 700);
    for bad in [
        json!({"pattern": "("}),
        json!({"pattern": "x", "glob": "[z"}),
    ] {
        let error = call(&GrepTool::default(), dir.path(), bad)
            .await
            .unwrap_err();
        assert_eq!(
            error.code,
            ToolErrorCode::InvalidArguments,
            "{}",
            error.message
        );
    }
    let outside = call(
        &GrepTool::default(),
        dir.path(),
        json!({"pattern": "x", "path": "../.."}),
    )
    .await
    .unwrap_err();
    assert_eq!(outside.code, ToolErrorCode::PathOutsideWorkspace);
}

#[tokio::test]
async fn a_cut_result_keeps_its_full_output_for_read() {
    let dir = tempfile::tempdir().unwrap();
    let lines: String = (0..5000).map(|i| format!("needle {i}\n")).collect();
    std::fs::write(dir.path().join("big.txt"), lines).unwrap();
    let output = call(
        &GrepTool::default(),
        dir.path(),
        json!({"pattern": "needle", "limit": 10000}),
    )
    .await
    .unwrap();
    let shown = text(&output);
    assert!(shown.lines().count() < 2100, "within the shared budget");
    let details = output.details.unwrap();
    let reference = details["full_output"].as_str().unwrap().to_owned();
    assert!(
        shown.contains(&reference),
        "the note names the saved output"
    );
    let full = call(
        &ReadTool::default(),
        dir.path(),
        json!({"path": reference, "offset": 4999, "limit": 2}),
    )
    .await
    .unwrap();
    assert!(
        text(&full).contains("big.txt:5000: needle 4999"),
        "{}",
        text(&full)
    );
    let hostile = call(
        &ReadTool::default(),
        dir.path(),
        json!({"path": "keel-output:../../etc/passwd"}),
    )
    .await
    .unwrap_err();
    assert_eq!(hostile.code, ToolErrorCode::NotFound, "{}", hostile.message);
}

#[tokio::test]
async fn find_matches_names_or_paths_and_marks_directories() {
    let dir = project();
    let rust = call(&FindTool::default(), dir.path(), json!({"pattern": "*.rs"}))
        .await
        .unwrap();
    assert_eq!(text(&rust), "src/lib.rs\nsrc/main.rs");
    let by_path = call(
        &FindTool::default(),
        dir.path(),
        json!({"pattern": "src/m*"}),
    )
    .await
    .unwrap();
    assert_eq!(text(&by_path), "src/main.rs");
    let dirs = call(&FindTool::default(), dir.path(), json!({"pattern": "*"}))
        .await
        .unwrap();
    let listed = text(&dirs);
    assert!(
        listed.contains("src/\n") && listed.contains("notes/regex.txt"),
        "{listed}"
    );
    assert!(
        !listed.contains("target") && !listed.contains("secret.txt") && !listed.contains(".git/"),
        "{listed}"
    );
    let limited = call(
        &FindTool::default(),
        dir.path(),
        json!({"pattern": "*", "limit": 2}),
    )
    .await
    .unwrap();
    assert!(
        text(&limited).contains("Showing 2 of"),
        "{}",
        text(&limited)
    );
    let bad = call(&FindTool::default(), dir.path(), json!({"pattern": "{a"}))
        .await
        .unwrap_err();
    assert_eq!(bad.code, ToolErrorCode::InvalidArguments);
}

#[tokio::test]
async fn ls_sorts_marks_directories_and_shows_dotfiles() {
    let dir = project();
    let listing = call(&LsTool::default(), dir.path(), json!({}))
        .await
        .unwrap();
    assert_eq!(
        text(&listing),
        ".env\n.git/\n.gitignore\nREADME.md\nblob.bin\nnotes/\nsecret.txt\nsrc/\ntarget/"
    );
    let limited = call(&LsTool::default(), dir.path(), json!({"limit": 3}))
        .await
        .unwrap();
    assert!(text(&limited).contains("Showing 3 of 9 entries"));
    let file = call(&LsTool::default(), dir.path(), json!({"path": "README.md"}))
        .await
        .unwrap_err();
    assert!(file.message.contains("not a directory"), "{}", file.message);
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    assert_eq!(
        text(
            &call(&LsTool::default(), dir.path(), json!({"path": "empty"}))
                .await
                .unwrap()
        ),
        "(empty directory)"
    );
}

#[tokio::test]
async fn read_returns_images_and_names_other_binary_types() {
    let dir = tempfile::tempdir().unwrap();
    let png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89".to_vec();
    std::fs::write(dir.path().join("pixel.dat"), &png).unwrap();
    let output = call(
        &ReadTool::default(),
        dir.path(),
        json!({"path": "pixel.dat"}),
    )
    .await
    .unwrap();
    let image = output.content.iter().find_map(|block| match block {
        UserContent::Image(image) => Some(image.clone()),
        UserContent::Text { .. } => None,
    });
    let image = image.expect("an image block, recognised by bytes not extension");
    assert_eq!(image.mime_type, "image/png");
    assert!(image.data.starts_with("iVBORw0KGgo"), "{}", image.data);
    let mut huge = png.clone();
    huge.resize(4_000_000, 0);
    std::fs::write(dir.path().join("huge.png"), &huge).unwrap();
    let too_big = call(
        &ReadTool::default(),
        dir.path(),
        json!({"path": "huge.png"}),
    )
    .await
    .unwrap_err();
    assert!(too_big.message.contains("over the"), "{}", too_big.message);
    std::fs::write(dir.path().join("tool"), b"\x7fELF\x02\x01\x01\x00\x00\x00").unwrap();
    let elf = call(&ReadTool::default(), dir.path(), json!({"path": "tool"}))
        .await
        .unwrap_err();
    assert_eq!(elf.code, ToolErrorCode::BinaryFile);
    assert!(elf.message.contains("ELF executable"), "{}", elf.message);
}
