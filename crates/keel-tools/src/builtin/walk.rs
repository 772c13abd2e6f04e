//! Walking a directory tree the way a developer expects: `.gitignore`,
//! `.ignore` and git's exclude files apply (also outside git repositories),
//! dotfiles are included, `.git` itself is skipped, symlinks are not
//! followed, and the walk runs on every core.

use std::path::{Path, PathBuf};

use ignore::{WalkBuilder, WalkParallel};

/// The ignore files the walker reads in each directory.
const IGNORE_FILES: &[&str] = &[".gitignore", ".ignore"];

/// Whether a walk may start at `start` inside the workspace `root`: the
/// ignore files of `start` and of its ancestors up to `root` are read
/// before any entry is filtered ([`crate::untrusted::ignore_files_are_plain`]).
pub(super) fn start_is_safe(root: &Path, start: &Path) -> Result<(), String> {
    for dir in start.ancestors() {
        crate::untrusted::ignore_files_are_plain(dir, IGNORE_FILES)?;
        if dir == root || !dir.starts_with(root) {
            break;
        }
    }
    Ok(())
}

/// A parallel walker over `root` with the rules above.
pub(super) fn parallel(root: &Path) -> WalkParallel {
    WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .ignore(true)
        .parents(true)
        .follow_links(false)
        // A directory whose ignore files are not plain small files (a FIFO,
        // a link, a huge file a command planted) is not entered: the
        // `ignore` crate would open them by path and block or read forever.
        .filter_entry(|entry| {
            entry.file_name() != ".git"
                && !(entry.file_type().is_some_and(|t| t.is_dir())
                    && crate::untrusted::ignore_files_are_plain(entry.path(), IGNORE_FILES)
                        .is_err())
        })
        .threads(std::thread::available_parallelism().map_or(2, usize::from))
        .build_parallel()
}

/// `path` relative to the workspace root, with `/` separators.
pub(super) fn relative(root: &Path, path: &Path) -> String {
    let relative: PathBuf = path
        .strip_prefix(root)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| path.to_path_buf());
    let text = relative.to_string_lossy().into_owned();
    if text.is_empty() {
        ".".to_owned()
    } else {
        text
    }
}
