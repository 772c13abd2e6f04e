//! The end-of-run patch, summarised for a person: one line per file with
//! what happened to it and its added and removed lines, binary files by
//! name and size, never their base85 payload.
//!
//! The patch is git's (`diff --git` sections, binary parts as `GIT binary
//! patch` with `literal SIZE`); a section this does not recognise still
//! yields its file, as modified.

/// One file of the patch.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FilePatch {
    /// Its path (the new one, for a rename).
    pub path: String,
    /// `A` added, `D` deleted, `R` renamed, `M` modified.
    pub status: char,
    /// Lines added and removed (text files).
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// The new contents' size in bytes, for a binary file (`None` for text).
    pub binary: Option<u64>,
    /// The section's text lines (headers and hunks), empty for binary.
    pub lines: Vec<String>,
}

/// The files of `patch`, in order.
pub fn files(patch: &str) -> Vec<FilePatch> {
    let mut files: Vec<FilePatch> = Vec::new();
    let mut in_binary = false;
    for line in patch.lines() {
        if let Some(header) = line.strip_prefix("diff --git ") {
            in_binary = false;
            files.push(FilePatch {
                path: header
                    .rsplit_once(" b/")
                    .map_or(header, |(_, path)| path)
                    .to_owned(),
                status: 'M',
                ..FilePatch::default()
            });
            continue;
        }
        let Some(file) = files.last_mut() else {
            continue;
        };
        if in_binary {
            if let Some(size) = line.strip_prefix("literal ").and_then(|n| n.parse().ok())
                && file.binary == Some(0)
            {
                file.binary = Some(size);
            }
            continue;
        }
        // The header's ` b/` may be part of a name: the `+++`, `---` and
        // `rename to` lines name the file exactly.
        if let Some(path) = line
            .strip_prefix("+++ b/")
            .or_else(|| line.strip_prefix("rename to "))
        {
            file.path = path.trim_end_matches('\t').to_owned();
        } else if let Some(path) = line.strip_prefix("--- a/")
            && file.status == 'D'
        {
            file.path = path.trim_end_matches('\t').to_owned();
        }
        if line.starts_with("new file mode") {
            file.status = 'A';
        } else if line.starts_with("deleted file mode") {
            file.status = 'D';
        } else if line.starts_with("rename to ") {
            file.status = 'R';
        } else if line == "GIT binary patch" || line.starts_with("Binary files ") {
            in_binary = true;
            file.binary = Some(0);
            file.lines.clear();
            continue;
        } else if line.starts_with('+') && !line.starts_with("+++") {
            file.added += 1;
        } else if line.starts_with('-') && !line.starts_with("---") {
            file.removed += 1;
        }
        file.lines.push(line.to_owned());
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_binary_files_are_summarised_and_base85_is_dropped() {
        let patch = "\
diff --git a/src/a.rs b/src/a.rs
index 1..2 100644
--- a/src/a.rs
+++ b/src/a.rs
@@ -1,2 +1,2 @@
-old
+new
+more
 same
diff --git a/logo.png b/logo.png
new file mode 100644
index 0000000..abc
GIT binary patch
literal 1234
zcmV-+1c5ZrgR
literal 0
HcmV?d00001

diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
";
        let files = files(patch);
        assert_eq!(files.len(), 3);
        let decoy = files_of_decoy();
        assert_eq!(decoy[0].path, "evil b/src/main.rs");
        assert_eq!((files[0].path.as_str(), files[0].status), ("src/a.rs", 'M'));
        assert_eq!(
            (files[0].added, files[0].removed, files[0].binary),
            (2, 1, None)
        );
        assert_eq!((files[1].path.as_str(), files[1].status), ("logo.png", 'A'));
        assert_eq!(files[1].binary, Some(1234));
        assert!(files[1].lines.iter().all(|line| !line.contains("zcmV")));
        assert_eq!((files[2].status, files[2].removed), ('D', 1));
    }

    fn files_of_decoy() -> Vec<FilePatch> {
        files(
            "diff --git a/evil b/src/main.rs b/evil b/src/main.rs
new file mode 100644
--- /dev/null
+++ b/evil b/src/main.rs
@@ -0,0 +1 @@
+x
",
        )
    }
}
