//! Regular expressions with PCRE semantics, as `$regex` and the `$regex*`
//! expressions use them: look-ahead and look-behind, backreferences,
//! atomic groups and possessive quantifiers, and MongoDB's options
//! (`i`, `m`, `s`, `x`, `u`).
//!
//! The engine is `fancy-regex`: a pattern without PCRE-only constructs runs
//! on the `regex` crate's automata (linear time, so `(a+)+$` cannot blow
//! up, unless the subject ends in a newline: see below); one with them runs on a backtracking machine whose steps are capped
//! at `BACKTRACK_STEPS_MAX` per match attempt. A match that reaches the cap
//! fails the operation (`MATCH_LIMIT_EXCEEDED`) instead of holding a worker,
//! as MongoDB fails one that reaches PCRE's match limit.
//!
//! MongoDB's PCRE2 has no UCP, so `\d`, `\w`, `\s` and `\b` are ASCII and
//! `$` also matches before a final newline: each pattern is first rewritten
//! for that (`pcre_pattern`), once per kind of subject.

use bson::Bson;
use fancy_regex::{Regex, RegexBuilder};

use crate::error::QueryError;

/// Backtracking steps one match attempt may take (fancy-regex's default,
/// about a millisecond to tens of milliseconds of work).
pub const BACKTRACK_STEPS_MAX: usize = 1_000_000;

/// MongoDB refuses longer patterns (PCRE's compile limit it configures).
pub const PATTERN_BYTES_MAX: usize = 16 * 1024;

/// MongoDB's code when executing a regular expression fails (it reports
/// PCRE's error, e.g. the match limit, with this code).
pub const MATCH_LIMIT_EXCEEDED: i32 = 51156;

/// A compiled pattern and the name of what uses it, for error messages.
#[derive(Clone, Debug)]
pub struct Pcre {
    /// The distinct compiled rewrites of the pattern (`pcre_pattern`).
    compiled: Vec<Regex>,
    /// Which of them each kind of subject uses (`pcre_pattern::subject_kind`).
    by_subject: [usize; crate::pcre_pattern::SUBJECT_KINDS],
    user: &'static str,
}

/// One match: the matched text, where it starts (bytes), and the groups.
pub struct Found {
    pub text: String,
    pub start: usize,
    pub groups: Vec<Option<String>>,
}

impl Pcre {
    /// Compiles `pattern` with MongoDB's `options`. `user` names the
    /// operator in messages; `invalid_code` is what an invalid pattern
    /// answers (51091 for `$regex`, 51111 for the `$regex*` expressions).
    pub fn compile(pattern: &str, options: &str, user: &'static str, invalid_code: i32) -> Result<Pcre, QueryError> {
        if pattern.contains('\0') {
            return Err(QueryError::bad_value(
                "Regular expression cannot contain an embedded null byte",
            ));
        }
        if options.contains('\0') {
            return Err(QueryError::new(
                51108,
                "Regular expression options string cannot contain an embedded null byte",
            ));
        }
        if pattern.len() > PATTERN_BYTES_MAX {
            return Err(QueryError::new(
                invalid_code,
                format!("{user}: Regular expression is invalid: pattern string is too long"),
            ));
        }
        if let Some(other) = options.chars().find(|flag| !"imsxu".contains(*flag)) {
            return Err(QueryError::new(
                51108,
                format!("{user}: invalid flag in regex options: {other}"),
            ));
        }
        let rewritten = crate::pcre_pattern::rewrite(pattern, options);
        let mut compiled = Vec::with_capacity(rewritten.len());
        let mut by_subject = [0; crate::pcre_pattern::SUBJECT_KINDS];
        for (kind, text) in rewritten.iter().enumerate() {
            // Most patterns rewrite alike for every kind: compiled once.
            by_subject[kind] = match rewritten[..kind].iter().position(|earlier| earlier == text) {
                Some(earlier) => by_subject[earlier],
                None => {
                    let regex = Self::build(text, options).map_err(|e| {
                        QueryError::new(invalid_code, format!("{user}: Regular expression is invalid: {e}"))
                    })?;
                    compiled.push(regex);
                    compiled.len() - 1
                }
            };
        }
        Ok(Pcre { compiled, by_subject, user })
    }

    fn build(pattern: &str, options: &str) -> Result<Regex, fancy_regex::Error> {
        let mut builder = RegexBuilder::new(pattern);
        builder.backtrack_limit(BACKTRACK_STEPS_MAX);
        for flag in options.chars() {
            match flag {
                'i' => builder.case_insensitive(true),
                'm' => builder.multi_line(true),
                's' => builder.dot_matches_new_line(true),
                'x' => builder.verbose_mode(true),
                // Patterns are always UTF-8 here, as MongoDB compiles them.
                // Checked by `compile`; `u` asks for nothing here.
                _ => &mut builder,
            };
        }
        builder.build()
    }

    /// The compiled rewrite for `text` (PCRE's `$` also matches before a
    /// final newline, and its `\b` is ASCII).
    fn for_text(&self, text: &str) -> &Regex {
        &self.compiled[self.by_subject[crate::pcre_pattern::subject_kind(text)]]
    }

    /// Whether the pattern matches somewhere in `text`.
    pub fn is_match(&self, text: &str) -> Result<bool, QueryError> {
        self.for_text(text).is_match(text).map_err(|e| self.failed(e))
    }

    /// The first match, or every match (non-overlapping, left to right).
    pub fn find(&self, text: &str, all: bool) -> Result<Vec<Found>, QueryError> {
        let mut found = Vec::new();
        for captures in self.for_text(text).captures_iter(text) {
            let captures = captures.map_err(|e| self.failed(e))?;
            let Some(whole) = captures.get(0) else { continue };
            let groups = (1..captures.len())
                .map(|i| captures.get(i).map(|group| group.as_str().to_string()))
                .collect();
            found.push(Found {
                text: whole.as_str().to_string(),
                start: whole.start(),
                groups,
            });
            if !all {
                break;
            }
        }
        Ok(found)
    }

    fn failed(&self, error: fancy_regex::Error) -> QueryError {
        QueryError::new(
            MATCH_LIMIT_EXCEEDED,
            format!(
                "{}: error occurred while executing the regular expression: {error} (more than {BACKTRACK_STEPS_MAX} \
                 backtracking steps)",
                self.user
            ),
        )
    }
}

/// Whether a stored value is a string the pattern can test.
pub fn text_of(value: &Bson) -> Option<&str> {
    match value {
        Bson::String(text) | Bson::Symbol(text) => Some(text),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, options: &str, text: &str) -> bool {
        Pcre::compile(pattern, options, "$regex", 51091)
            .unwrap()
            .is_match(text)
            .unwrap()
    }

    #[test]
    fn pcre_constructs() {
        assert!(matches(r"^(?=.*\d)(?=.*[a-z]).{6,}$", "", "abc123"));
        assert!(!matches(r"^(?=.*\d)(?=.*[a-z]).{6,}$", "", "abcdef"));
        assert!(matches(r"(?<!foo)bar", "", "a bar"));
        assert!(!matches(r"(?<!foo)bar", "", "foobar"));
        assert!(matches(r"^(\w+) \1$", "", "hey hey"));
        assert!(!matches(r"^(\w+) \1$", "", "hey you"));
        assert!(!matches(r"^(?>a+)ab", "", "aaab"));
        assert!(!matches(r"^a++ab", "", "aaab"));
        assert!(matches(r"^A B # comment", "ix", "ab"));
        assert!(matches(r"^b", "m", "a\nb"));
        assert!(matches(r"a.b", "s", "a\nb"));
    }

    #[test]
    fn classes_are_ascii_without_ucp() {
        assert!(!matches(r"\d", "", "٣"));
        assert!(matches(r"(*UCP)^\d$", "", "٣"));
        assert!(matches(r"\w", "", "suárez") && !matches(r"^\w+$", "", "suárez"));
        assert!(matches(r"(*UTF)(*UCP)^\w+$", "", "suárez"));
        assert!(matches(r"^[\W]$", "", "é") && matches(r"^\S$", "", "é") && !matches(r"\s", "", "\u{a0}"));
        assert!(!matches(r"^[[:alpha:]]+$", "", "suárez"));
        assert!(matches(r"a\b", "", "aé") && !matches(r"(*UCP)a\b", "", "aé"));
        assert!(!matches(r"^\w$", "i", "\u{212a}"));
    }

    #[test]
    fn long_ascii_subjects_keep_the_linear_engine() {
        let text = format!("{}foo", "ab cd ".repeat(200_000));
        assert!(matches(r"\bfoo\b", "", &text) && matches(r"foo$", "", &format!("{text}\n")));
    }

    #[test]
    fn dollar_matches_before_a_final_newline() {
        assert!(matches(r"^abc$", "", "abc\n") && !matches(r"^abc$", "", "abc\n\n"));
        assert!(matches(r"c\Z", "", "abc\n") && !matches(r"c\z", "", "abc\n"));
        assert!(!matches(r"a$", "", "a\nb") && matches(r"a$", "m", "a\nb"));
        let pcre = Pcre::compile(r"\w+$", "", "$regexFind", 51111).unwrap();
        assert_eq!(pcre.find("ab cd\n", false).unwrap()[0].text, "cd");
    }

    #[test]
    fn invalid_patterns_and_options() {
        assert_eq!(Pcre::compile("[)", "", "$regex", 51091).unwrap_err().code, 51091);
        assert_eq!(Pcre::compile("a", "z", "$regex", 51091).unwrap_err().code, 51108);
        assert_eq!(Pcre::compile("a\0b", "", "$regex", 51091).unwrap_err().code, 2);
    }

    #[test]
    fn runaway_backtracking_fails() {
        let pcre = Pcre::compile(r"^(\w+\s?)*(?=x)$", "", "$regex", 51091).unwrap();
        let text = format!("{}!", "a".repeat(64));
        assert_eq!(pcre.is_match(&text).unwrap_err().code, MATCH_LIMIT_EXCEEDED);
    }
}
