//! Walking a directory tree the way a developer expects: `.gitignore`,
//! `.ignore` and git's exclude files apply (also outside git repositories),
//! dotfiles are included, `.git` itself is skipped, symlinks are not
//! followed, and the walk runs on every core.

use std::path::{Path, PathBuf};

use ignore::{WalkBuilder, WalkParallel};

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
        .filter_entry(|entry| entry.file_name() != ".git")
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
