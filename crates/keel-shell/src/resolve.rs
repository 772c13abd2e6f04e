//! Where a path a command names really lies.
//!
//! A path is inside when both of these hold:
//!
//! - lexically: joined to the working directory and with `.` and `..`
//!   removed, it starts with the workspace root or the private temp dir. This
//!   refuses `/proc/self/root/<root>/x` and friends even though the kernel
//!   would resolve them back inside;
//! - physically: resolved component by component the way the kernel does
//!   (a symlink is replaced by its target before a following `..` applies),
//!   it still starts with the root or the temp dir. A dangling symlink is
//!   outside, since writing through it could create a file anywhere.
//!
//! A regular file with more than one hard link is treated as outside: the
//! other name may be outside the workspace. A few harmless device files
//! (`/dev/null`, `/dev/fd/N`, …) count as inside. Globs are expanded against
//! the directory they name, with bounds, so that a matching symlink that
//! points out is seen. The check is made at analysis time; a command that
//! creates a symlink before using it is caught by the symlink's own target
//! argument, not here.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use globset::GlobBuilder;

use crate::paths::{hard_links, normalize};

/// Paths longer than this are not inspected.
const MAX_PATH_BYTES: usize = 4096;
/// Most directory entries a glob may make the resolver read.
const MAX_GLOB_ENTRIES: usize = 4096;
/// Most paths a glob may expand to before the resolver gives up.
const MAX_GLOB_MATCHES: usize = 256;

/// Device files that read or write nothing of interest.
const HARMLESS_DEVICES: [&str; 9] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
];

/// Where a path lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Place {
    /// Inside the workspace or the temp dir.
    Inside {
        /// How to show it: workspace-relative, or absolute under the temp dir.
        shown: String,
        /// Whether it exists now.
        exists: bool,
    },
    /// Outside.
    Outside {
        /// How to show it (absolute).
        shown: String,
        /// Why, as a sentence.
        reason: String,
    },
    /// Could not be determined.
    Unknown {
        /// Why, as a sentence.
        reason: String,
    },
}

/// The directories that count as inside.
#[derive(Debug, Clone)]
pub(super) struct Roots {
    /// The workspace root, canonical.
    pub(super) root: PathBuf,
    /// The root as given, lexically normalized.
    root_given: PathBuf,
    /// The temp dir, canonical when it exists.
    pub(super) temp: Option<PathBuf>,
    /// The temp dir as given, lexically normalized.
    temp_given: Option<PathBuf>,
}

impl Roots {
    /// The roots for a workspace at `root` with an optional private temp dir.
    pub(super) fn new(root: &Path, temp: Option<&Path>) -> Roots {
        let canonical = |path: &Path| fs::canonicalize(path).unwrap_or_else(|_| normalize(path));
        Roots {
            root: canonical(root),
            root_given: normalize(root),
            temp: temp.map(canonical),
            temp_given: temp.map(normalize),
        }
    }

    /// The temp dir as the child sees it in `$TMPDIR`.
    pub(super) fn tmpdir(&self) -> Option<&Path> {
        self.temp_given.as_deref()
    }

    /// Whether `path` starts with the root or the temp dir.
    fn contains(&self, path: &Path) -> bool {
        [
            Some(&self.root),
            Some(&self.root_given),
            self.temp.as_ref(),
            self.temp_given.as_ref(),
        ]
        .into_iter()
        .flatten()
        .any(|dir| path.starts_with(dir))
    }

    /// Workspace-relative text for a path under the root, absolute otherwise.
    fn show(&self, path: &Path) -> String {
        for root in [&self.root, &self.root_given] {
            if let Ok(relative) = path.strip_prefix(root) {
                return match relative.as_os_str().is_empty() {
                    true => ".".to_owned(),
                    false => relative.display().to_string(),
                };
            }
        }
        path.display().to_string()
    }

    /// Where `given` lies when resolved from the directory `base` (physical).
    pub(super) fn resolve(&self, given: &str, base: &Path) -> Place {
        let joined = base.join(given);
        let lexical = normalize(&joined);
        if is_harmless_device(&lexical) {
            return Place::Inside {
                shown: lexical.display().to_string(),
                exists: true,
            };
        }
        if lexical.as_os_str().len() > MAX_PATH_BYTES {
            return Place::Unknown {
                reason: format!("`{}` is too long to inspect", abbreviate(given)),
            };
        }
        if !self.contains(&lexical) {
            return Place::Outside {
                shown: lexical.display().to_string(),
                reason: format!("`{}` is outside the workspace", abbreviate(given)),
            };
        }
        match physical(&joined) {
            Err(Trouble::Dangling) => Place::Outside {
                shown: self.show(&lexical),
                reason: format!("`{}` goes through a dangling symlink", abbreviate(given)),
            },
            Err(Trouble::Io(error)) => Place::Unknown {
                reason: format!("cannot inspect `{}`: {error}", abbreviate(given)),
            },
            Ok((real, _)) if !self.contains(&real) => Place::Outside {
                shown: real.display().to_string(),
                reason: format!(
                    "`{}` resolves outside the workspace (`{}`)",
                    abbreviate(given),
                    real.display()
                ),
            },
            Ok((real, exists)) => match hard_links(&real) {
                Some(links) => Place::Outside {
                    shown: self.show(&real),
                    reason: format!(
                        "`{}` has {links} hard links; another name may be outside the workspace",
                        abbreviate(given)
                    ),
                },
                None => Place::Inside {
                    shown: self.show(&real),
                    exists,
                },
            },
        }
    }

    /// Where a glob lies: its literal directory, then every match in it.
    ///
    /// `text` is the field text, `at` the offset of the first glob
    /// character, `pattern` the same text with literal characters escaped.
    pub(super) fn resolve_glob(&self, text: &str, at: usize, pattern: &str, base: &Path) -> Place {
        let head = text.get(..at).unwrap_or_default();
        let dir = match head.rfind('/') {
            Some(0) => "/",
            Some(slash) => head.get(..slash).unwrap_or_default(),
            None => ".",
        };
        match self.resolve(dir, base) {
            Place::Outside { shown, .. } => Place::Outside {
                reason: format!(
                    "`{}` is under `{shown}`, outside the workspace",
                    abbreviate(text)
                ),
                shown,
            },
            place @ Place::Unknown { .. } => place,
            place @ Place::Inside { .. } => match glob_rest(pattern, head.matches('/').count()) {
                Some(rest) => self.resolve_matches(text, &rest, &real_path(&base.join(dir))),
                None => place,
            },
        }
    }

    /// Where the matches of the pattern `components` under `dir` lie.
    fn resolve_matches(&self, text: &str, components: &[String], dir: &Path) -> Place {
        let matches = match expand_glob(dir.to_path_buf(), components) {
            Ok(matches) => matches,
            Err(reason) => {
                return Place::Unknown {
                    reason: format!("`{}` {reason}", abbreviate(text)),
                };
            }
        };
        let mut worst = Place::Inside {
            shown: text.to_owned(),
            exists: !matches.is_empty(),
        };
        for path in matches {
            match self.resolve(&path.to_string_lossy(), dir) {
                Place::Inside { .. } => {}
                Place::Outside { shown, reason } => {
                    return Place::Outside {
                        shown,
                        reason: format!(
                            "`{}` matches a path outside the workspace: {reason}",
                            abbreviate(text)
                        ),
                    };
                }
                unknown @ Place::Unknown { .. } => worst = unknown,
            }
        }
        worst
    }
}

/// The pattern components after the `slashes`-th `/` (the literal directory).
fn glob_rest(pattern: &str, slashes: usize) -> Option<Vec<String>> {
    let mut components: Vec<&str> = pattern.split('/').collect();
    if slashes > 0 {
        components.drain(..slashes.min(components.len()));
    }
    let rest: Vec<String> = components
        .into_iter()
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect();
    (!rest.is_empty()).then_some(rest)
}

/// Expands glob components from `start`, with bounds.
fn expand_glob(start: PathBuf, components: &[String]) -> Result<Vec<PathBuf>, &'static str> {
    let mut current = vec![start];
    let mut read = 0usize;
    for component in components {
        let mut next = Vec::new();
        let matcher = GlobBuilder::new(component)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map(|glob| glob.compile_matcher());
        for dir in &current {
            match &matcher {
                Ok(matcher) if has_glob(component) => {
                    // Only a pattern starting with a dot can match `..` (and
                    // only in older bash), but that is enough to climb out.
                    if component.starts_with('.') && matcher.is_match("..") {
                        next.push(dir.join(".."));
                    }
                    let Ok(entries) = fs::read_dir(dir) else {
                        continue;
                    };
                    for entry in entries.flatten() {
                        read += 1;
                        if read > MAX_GLOB_ENTRIES {
                            return Err("names too many files to check");
                        }
                        if matcher.is_match(entry.file_name()) {
                            next.push(dir.join(entry.file_name()));
                        }
                    }
                }
                _ => next.push(dir.join(unescape(component))),
            }
            if next.len() > MAX_GLOB_MATCHES {
                return Err("matches too many files to check");
            }
        }
        current = next;
    }
    Ok(current)
}

/// Whether a pattern component has an unescaped glob character.
fn has_glob(component: &str) -> bool {
    let mut escaped = false;
    for c in component.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '*' | '?' | '[' => return true,
            _ => {}
        }
    }
    false
}

/// Removes the escapes from a pattern component.
fn unescape(component: &str) -> String {
    let mut out = String::new();
    let mut escaped = false;
    for c in component.chars() {
        if c == '\\' && !escaped {
            escaped = true;
        } else {
            out.push(c);
            escaped = false;
        }
    }
    out
}

/// Why a path could not be resolved physically.
enum Trouble {
    /// A symlink on the way points nowhere.
    Dangling,
    /// Another I/O error.
    Io(String),
}

/// Resolves an absolute path the way the kernel does; also whether it exists.
///
/// Missing components are kept lexically (a later `..` removes them), so a
/// path that a command creates first still resolves.
fn physical(path: &Path) -> Result<(PathBuf, bool), Trouble> {
    let mut current = PathBuf::from("/");
    let mut exists = true;
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                current.pop();
            }
            Component::Normal(name) => {
                current.push(name);
                match fs::symlink_metadata(&current) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        current = fs::canonicalize(&current).map_err(|error| {
                            match is_missing(&error) {
                                true => Trouble::Dangling,
                                false => Trouble::Io(error.to_string()),
                            }
                        })?;
                        exists = true;
                    }
                    Ok(_) => exists = true,
                    Err(error) if is_missing(&error) => exists = false,
                    Err(error) => return Err(Trouble::Io(error.to_string())),
                }
            }
        }
    }
    Ok((current, exists))
}

/// The physical location of an absolute path, or its lexical form when it
/// cannot be resolved.
pub(super) fn real_path(path: &Path) -> PathBuf {
    physical(path).map_or_else(|_| normalize(path), |(real, _)| real)
}

/// Whether an error means the path does not exist.
fn is_missing(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// Whether a normalized path is a harmless device file.
fn is_harmless_device(path: &Path) -> bool {
    let Some(text) = path.to_str() else {
        return false;
    };
    if let Some(fd) = text.strip_prefix("/dev/fd/") {
        return !fd.is_empty() && fd.chars().all(|c| c.is_ascii_digit());
    }
    HARMLESS_DEVICES.contains(&text)
}

/// A path shortened for a reason.
pub(super) fn abbreviate(text: &str) -> String {
    const MAX: usize = 120;
    if text.chars().count() <= MAX {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(MAX).collect();
    short.push('…');
    short
}
