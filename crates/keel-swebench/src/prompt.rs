//! The prompt an instance's run starts with: its problem statement and
//! hints, and nothing else of the instance (never the gold `patch` or the
//! `test_patch`).

/// The prompt for an instance: what a model sees of it. Takes the fields
/// it may show, not the instance, so that nothing else can reach it.
pub fn prompt(repo: &str, problem_statement: &str, hints_text: &str) -> String {
    let mut prompt = format!(
        "You are working in a checkout of the repository {repo}. Resolve the issue \
         below by editing the repository's source files in the workspace.\n\
         Make the smallest change that fixes the issue. Do not modify or add \
         tests unless the fix needs it, and do not commit: the change is read \
         from the working tree.\n\n\
         <issue>\n{}\n</issue>\n",
        problem_statement.trim_end()
    );
    if !hints_text.trim().is_empty() {
        prompt.push_str(&format!(
            "\nComments made on the issue before it was fixed:\n\n<hints>\n{}\n</hints>\n",
            hints_text.trim_end()
        ));
    }
    prompt
}

/// Added to the prompt in the `docker` environment.
pub const CONTAINER: &str = "\nShell commands run inside the instance's container, in /testbed, \
     the repository root: refer to files by paths relative to it.\n";

/// The prompt of a run that continues an instance whose earlier run ended
/// (cancelled, or its end was not recorded) in the same session.
pub const CONTINUE: &str = "Continue resolving the issue from where you stopped. \
     The workspace still holds your earlier edits.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_appear_only_when_given() {
        let with = prompt("o/r", "It breaks.", "Look at x.py");
        assert!(
            with.contains("It breaks.") && with.contains("Look at x.py") && with.contains("o/r")
        );
        let without = prompt("o/r", "It breaks.", "  ");
        assert!(!without.contains("<hints>"));
    }
}
