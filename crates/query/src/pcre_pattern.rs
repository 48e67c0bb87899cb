//! A PCRE pattern rewritten so that `fancy-regex` (whose classes follow
//! Unicode) matches what MongoDB 7.0's PCRE2 matches: PCRE2 compiled with
//! UTF but without UCP, where `\d`, `\w`, `\s` and `\b` are ASCII-only
//! (POSIX classes such as `[[:alpha:]]` already are in the `regex` crate),
//! and where `$` without the `m` option (and `\Z` always) also matches just
//! before a newline that ends the subject.
//!
//! A pattern may start with the verbs `(*UTF)`, `(*UTF8)` (no effect: the
//! subject is always UTF-8) and `(*UCP)`, which keeps the Unicode classes,
//! as PCRE2 does when it is given.
//!
//! The end-of-subject rule and the ASCII `\b` need look-arounds, which move
//! the pattern to the backtracking engine (slow on long subjects); so the
//! rewrite gives one pattern per kind of subject, and the look-arounds are
//! only used where they change the outcome: `$` on subjects that end with
//! a newline, `\b` on subjects with non-ASCII characters (on ASCII text
//! the engine's own `\b` is PCRE's).

/// PCRE's `\w` without UCP.
const WORD: &str = "0-9A-Za-z_";

/// PCRE's `\s` without UCP: tab, newline, vertical tab, form feed,
/// carriage return and space.
const SPACE: &str = r"\t\n\x0B\x0C\r ";

/// The complements of `\d`, `\w`, `\s` as ranges, for use inside a class
/// (where a nested negated class cannot be written).
const NOT_DIGIT: &str = r"\x{0}-\x{2F}\x{3A}-\x{10FFFF}";
const NOT_WORD: &str = r"\x{0}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{5E}\x{60}\x{7B}-\x{10FFFF}";
const NOT_SPACE: &str = r"\x{0}-\x{8}\x{E}-\x{1F}\x{21}-\x{10FFFF}";

/// What `$` (without `m`) and `\Z` become when the subject ends with a
/// newline: the end, or just before that final newline.
const END_BEFORE_FINAL_NEWLINE: &str = r"(?=\n?\z)";

/// The kinds of subject a pattern is rewritten for.
pub const SUBJECT_KINDS: usize = 4;

/// Which rewritten pattern `subject` is matched with (an index below
/// `SUBJECT_KINDS`).
pub fn subject_kind(subject: &str) -> usize {
    usize::from(subject.ends_with('\n')) * 2 + usize::from(!subject.is_ascii())
}

/// Rewrites `pattern`, compiled with MongoDB's `options` (`m` and `x` matter
/// here), once per kind of subject (see `subject_kind`).
pub fn rewrite(pattern: &str, options: &str) -> [String; SUBJECT_KINDS] {
    let (ucp, body) = strip_leading_verbs(pattern);
    let multi_line = options.contains('m') || sets_inline_multi_line(body);
    let verbose = options.contains('x');
    let dollar = if multi_line {
        None
    } else {
        Some(END_BEFORE_FINAL_NEWLINE)
    };
    std::array::from_fn(|kind| {
        let final_newline = kind >= 2;
        Rewriter {
            ucp,
            verbose,
            ascii_boundaries: kind % 2 == 1,
            dollar: final_newline.then_some(dollar),
        }
        .run(body)
    })
}

/// Removes the leading `(*UTF)`, `(*UTF8)` and `(*UCP)` verbs; reports
/// whether `(*UCP)` was among them.
fn strip_leading_verbs(pattern: &str) -> (bool, &str) {
    let mut ucp = false;
    let mut rest = pattern;
    loop {
        if let Some(after) = rest.strip_prefix("(*UCP)") {
            ucp = true;
            rest = after;
        } else if let Some(after) = rest.strip_prefix("(*UTF8)").or_else(|| rest.strip_prefix("(*UTF)")) {
            rest = after;
        } else {
            return (ucp, rest);
        }
    }
}

/// Whether an inline option group (`(?m)`, `(?im:...)`) turns multi-line
/// on somewhere; then `$` is left to the engine's multi-line rule.
fn sets_inline_multi_line(pattern: &str) -> bool {
    pattern.match_indices("(?").any(|(at, _)| {
        let flags: String = pattern[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        flags.contains('m')
    })
}

struct Rewriter {
    ucp: bool,
    verbose: bool,
    /// Whether `\b` and `\B` become ASCII look-arounds (the subject has
    /// non-ASCII characters, where the engine's Unicode `\b` differs).
    ascii_boundaries: bool,
    /// `None`: leave `$` and `\Z` to the engine's end of subject (`\Z`
    /// becomes `\z`). `Some(None)`: multi-line `$` stays, `\Z` becomes the
    /// final-newline rule. `Some(Some(x))`: both become `x`.
    dollar: Option<Option<&'static str>>,
}

impl Rewriter {
    fn run(&self, pattern: &str) -> String {
        let chars: Vec<char> = pattern.chars().collect();
        let mut out = String::with_capacity(pattern.len() + 16);
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '\\' => i = self.escape(&chars, i, &mut out, false),
                '[' => i = self.class(&chars, i, &mut out),
                '$' => {
                    match self.dollar {
                        Some(Some(end)) => out.push_str(end),
                        _ => out.push('$'),
                    }
                    i += 1;
                }
                '#' if self.verbose => {
                    // A comment runs to the end of the line; copied as is.
                    while i < chars.len() && chars[i] != '\n' {
                        out.push(chars[i]);
                        i += 1;
                    }
                }
                other => {
                    out.push(other);
                    i += 1;
                }
            }
        }
        out
    }

    /// Copies or rewrites the escape at `chars[at]` (a backslash); returns
    /// the index after it.
    fn escape(&self, chars: &[char], at: usize, out: &mut String, in_class: bool) -> usize {
        let Some(&letter) = chars.get(at + 1) else {
            out.push('\\');
            return at + 1;
        };
        if letter == 'Q' {
            return copy_quoted(chars, at, out);
        }
        if letter == 'Z' && !in_class {
            match self.dollar {
                None => out.push_str(r"\z"),
                Some(_) => out.push_str(END_BEFORE_FINAL_NEWLINE),
            }
            return at + 2;
        }
        let replacement = if self.ucp || (matches!(letter, 'b' | 'B') && !self.ascii_boundaries) {
            None
        } else if in_class {
            class_member(letter)
        } else {
            class_escape(letter)
        };
        match replacement {
            Some(text) => out.push_str(&text),
            None => {
                out.push('\\');
                out.push(letter);
            }
        }
        at + 2
    }

    /// Copies a character class starting at `chars[at]` (`[`), rewriting
    /// the escapes in it; returns the index after its closing `]`.
    fn class(&self, chars: &[char], at: usize, out: &mut String) -> usize {
        out.push('[');
        let mut i = at + 1;
        if chars.get(i) == Some(&'^') {
            out.push('^');
            i += 1;
        }
        // A `]` first in the class is a member, not its end.
        if chars.get(i) == Some(&']') {
            out.push(']');
            i += 1;
        }
        while i < chars.len() {
            match chars[i] {
                ']' => {
                    out.push(']');
                    return i + 1;
                }
                '\\' => i = self.escape(chars, i, out, true),
                '[' if chars.get(i + 1) == Some(&':') => {
                    // A POSIX class `[:alpha:]`, copied whole.
                    let end = find_from(chars, i + 2, ":]").map_or(chars.len(), |end| end + 2);
                    out.extend(&chars[i..end]);
                    i = end;
                }
                other => {
                    out.push(other);
                    i += 1;
                }
            }
        }
        i
    }
}

/// `\d`, `\w`, `\s` and their negations and `\b`, `\B` outside a class, as
/// ASCII-only constructs; `None` for any other escape.
fn class_escape(letter: char) -> Option<String> {
    // Case-insensitive matching must not widen them (`k` folds to U+212A).
    let set = |negated: bool, members: &str| {
        let caret = if negated { "^" } else { "" };
        Some(format!("(?-i:[{caret}{members}])"))
    };
    let word = format!("[{WORD}]");
    match letter {
        'd' => set(false, "0-9"),
        'D' => set(true, "0-9"),
        'w' => set(false, WORD),
        'W' => set(true, WORD),
        's' => set(false, SPACE),
        'S' => set(true, SPACE),
        'b' => Some(format!("(?-i:(?:(?<={word})(?!{word})|(?<!{word})(?={word})))")),
        'B' => Some(format!("(?-i:(?:(?<={word})(?={word})|(?<!{word})(?!{word})))")),
        _ => None,
    }
}

/// The same escapes as members of a class.
fn class_member(letter: char) -> Option<String> {
    let members = match letter {
        'd' => "0-9",
        'D' => NOT_DIGIT,
        'w' => WORD,
        'W' => NOT_WORD,
        's' => SPACE,
        'S' => NOT_SPACE,
        _ => return None,
    };
    Some(members.to_string())
}

/// Copies `\Q...\E` (literal text) unchanged; returns the index after it.
fn copy_quoted(chars: &[char], at: usize, out: &mut String) -> usize {
    let end = find_from(chars, at + 2, r"\E").map_or(chars.len(), |end| end + 2);
    out.extend(&chars[at..end]);
    end
}

fn find_from(chars: &[char], from: usize, needle: &str) -> Option<usize> {
    let needle: Vec<char> = needle.chars().collect();
    (from..chars.len()).find(|&i| chars[i..].starts_with(&needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_become_ascii() {
        let plain = |pattern: &str, options: &str| rewrite(pattern, options)[0].clone();
        let [ascii, non_ascii, final_newline, _] = rewrite(r"^\d+\s\w[\d\W]\b$", "");
        assert_eq!(
            ascii,
            format!(r"^(?-i:[0-9])+(?-i:[{SPACE}])(?-i:[{WORD}])[0-9{NOT_WORD}]\b$")
        );
        assert!(non_ascii.contains("(?<=") && !non_ascii.contains(r"\b"));
        assert_eq!(final_newline, ascii.replace('$', END_BEFORE_FINAL_NEWLINE));
        let unicode = rewrite(r"(*UCP)^\w+$", "m");
        assert!(unicode.iter().all(|pattern| pattern == r"^\w+$"));
        assert_eq!(plain(r"(*UTF8)\\d\Q\d$\E", ""), r"\\d\Q\d$\E");
        assert_eq!(plain(r"[]\d]", ""), "[]0-9]");
        assert_eq!(plain(r"[[:alpha:]]", ""), "[[:alpha:]]");
        assert_eq!(plain("a # [\\d\nb", "x"), "a # [\\d\nb");
        assert_eq!(rewrite("(?m)a$", "")[2], "(?m)a$");
        assert_eq!(plain(r"a\Z", "m"), r"a\z");
        assert_eq!(subject_kind("é\n"), 3);
    }
}
