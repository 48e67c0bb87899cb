//! String operators. Byte offsets are UTF-8 byte offsets; `CP` variants
//! count Unicode code points. Case conversion is ASCII-only, as in
//! MongoDB.

use bson::Bson;

use super::{is_nullish, type_name, ArgStyle, Args, Context, OpSpec, Value};
use crate::error::QueryError;
use crate::pcre::Pcre;

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec { name: "$concat", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_concat },
    OpSpec { name: "$substr", style: ArgStyle::Positional { min: 3, max: 3 }, eval: eval_substr_bytes },
    OpSpec { name: "$substrBytes", style: ArgStyle::Positional { min: 3, max: 3 }, eval: eval_substr_bytes },
    OpSpec { name: "$substrCP", style: ArgStyle::Positional { min: 3, max: 3 }, eval: eval_substr_cp },
    OpSpec { name: "$toLower", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_case },
    OpSpec { name: "$toUpper", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_case },
    OpSpec { name: "$strLenBytes", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_str_len },
    OpSpec { name: "$strLenCP", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_str_len },
    OpSpec { name: "$split", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_split },
    OpSpec { name: "$trim", style: ArgStyle::Named { required: &["input"], optional: &["chars"] }, eval: eval_trim },
    OpSpec { name: "$ltrim", style: ArgStyle::Named { required: &["input"], optional: &["chars"] }, eval: eval_trim },
    OpSpec { name: "$rtrim", style: ArgStyle::Named { required: &["input"], optional: &["chars"] }, eval: eval_trim },
    OpSpec { name: "$indexOfBytes", style: ArgStyle::Positional { min: 2, max: 4 }, eval: eval_index_of },
    OpSpec { name: "$indexOfCP", style: ArgStyle::Positional { min: 2, max: 4 }, eval: eval_index_of },
    OpSpec { name: "$strcasecmp", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_strcasecmp },
    OpSpec { name: "$replaceOne", style: ArgStyle::Named { required: &["input", "find", "replacement"], optional: &[] }, eval: eval_replace },
    OpSpec { name: "$replaceAll", style: ArgStyle::Named { required: &["input", "find", "replacement"], optional: &[] }, eval: eval_replace },
    OpSpec {
        name: "$regexFind",
        style: ArgStyle::Named { required: &["input", "regex"], optional: &["options"] },
        eval: eval_regex_find,
    },
    OpSpec {
        name: "$regexFindAll",
        style: ArgStyle::Named { required: &["input", "regex"], optional: &["options"] },
        eval: eval_regex_find,
    },
    OpSpec {
        name: "$regexMatch",
        style: ArgStyle::Named { required: &["input", "regex"], optional: &["options"] },
        eval: eval_regex_match,
    },
];

/// The string form `$substr`, `$toLower` etc. coerce their input to:
/// nullish becomes "", numbers and dates print, others are an error.
fn coerce_to_string(op: &str, value: &Value) -> Result<String, QueryError> {
    match value {
        None | Some(Bson::Null | Bson::Undefined) => Ok(String::new()),
        Some(Bson::String(s)) | Some(Bson::Symbol(s)) => Ok(s.clone()),
        Some(Bson::Int32(v)) => Ok(v.to_string()),
        Some(Bson::Int64(v)) => Ok(v.to_string()),
        Some(Bson::Double(v)) => Ok(super::types::format_double(*v)),
        Some(Bson::DateTime(d)) => Ok(super::dates::format_iso(d.timestamp_millis())),
        Some(other) => Err(QueryError::new(
            16007,
            format!("{op}: can't convert from BSON type {} to String", type_name(&Some(other.clone()))),
        )),
    }
}

fn string_arg(op: &str, value: &Value, code: i32, what: &str) -> Result<String, QueryError> {
    match value {
        Some(Bson::String(s)) => Ok(s.clone()),
        other => Err(QueryError::new(code, format!("{op} requires {what} to be a string, found: {}", type_name(other)))),
    }
}

fn integer_arg(op: &str, value: &Value, what: &str) -> Result<i64, QueryError> {
    let number = value.as_ref().and_then(super::arithmetic::Num::from_bson);
    match number {
        Some(n) if n.as_f64().fract() == 0.0 => Ok(n.as_f64() as i64),
        _ => Err(QueryError::new(
            16034,
            format!("{op}: {what} must be a numeric integer type, found: {}", type_name(value)),
        )),
    }
}

fn eval_concat(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let mut out = String::new();
    for value in args.eval_all(cx)? {
        match value {
            None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(Bson::String(s)) => out.push_str(&s),
            other => {
                return Err(QueryError::new(16702, format!("$concat only supports strings, not {}", type_name(&other))))
            }
        }
    }
    Ok(Some(Bson::String(out)))
}

fn eval_substr_bytes(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let text = coerce_to_string(name, &args.eval(0, cx)?)?;
    let start = integer_arg(name, &args.eval(1, cx)?, "starting index")?;
    let length = integer_arg(name, &args.eval(2, cx)?, "length")?;
    if start < 0 {
        return Err(QueryError::new(50752, format!("{name}: starting index must be non-negative (got: {start})")));
    }
    let bytes = text.as_bytes();
    let start = (start as usize).min(bytes.len());
    let end = if length < 0 { bytes.len() } else { start.saturating_add(length as usize).min(bytes.len()) };
    if !text.is_char_boundary(start) {
        return Err(QueryError::new(28656, format!("{name}:  Invalid range, starting index is a UTF-8 continuation byte.")));
    }
    if !text.is_char_boundary(end) {
        return Err(QueryError::new(28657, format!("{name}:  Invalid range, ending index is in the middle of a UTF-8 character.")));
    }
    Ok(Some(Bson::String(text[start..end].to_string())))
}

fn eval_substr_cp(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let text = coerce_to_string(name, &args.eval(0, cx)?)?;
    let start = integer_arg(name, &args.eval(1, cx)?, "starting index")?;
    let length = integer_arg(name, &args.eval(2, cx)?, "length")?;
    if start < 0 {
        return Err(QueryError::new(34455, format!("{name}: starting index must be non-negative (got: {start})")));
    }
    if length < 0 {
        return Err(QueryError::new(34456, format!("{name}: length must be a nonnegative integer.")));
    }
    let out: String = text.chars().skip(start as usize).take(length as usize).collect();
    Ok(Some(Bson::String(out)))
}

fn eval_case(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let text = coerce_to_string(name, &args.eval(0, cx)?)?;
    let out = if name == "$toLower" { text.to_ascii_lowercase() } else { text.to_ascii_uppercase() };
    Ok(Some(Bson::String(out)))
}

fn eval_str_len(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let value = args.eval(0, cx)?;
    let Some(Bson::String(text)) = &value else {
        let code = if name == "$strLenBytes" { 34473 } else { 34471 };
        return Err(QueryError::new(code, format!("{name} requires a string argument, found: {}", type_name(&value))));
    };
    let length = if name == "$strLenBytes" { text.len() } else { text.chars().count() };
    Ok(Some(Bson::Int32(i32::try_from(length).unwrap_or(i32::MAX))))
}

fn eval_split(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let (input, delimiter) = (args.eval(0, cx)?, args.eval(1, cx)?);
    if is_nullish(&input) || is_nullish(&delimiter) {
        return Ok(Some(Bson::Null));
    }
    let input = string_arg(name, &input, 40085, "its first argument")?;
    let delimiter = string_arg(name, &delimiter, 40086, "its second argument")?;
    if delimiter.is_empty() {
        return Err(QueryError::new(40087, "$split requires a non-empty separator"));
    }
    Ok(Some(Bson::Array(input.split(delimiter.as_str()).map(Bson::from).collect())))
}

/// The characters `$trim` removes by default: whitespace and the null
/// character, as MongoDB lists them.
const DEFAULT_TRIM_CHARS: &[char] = &[
    '\0', ' ', '\t', '\n', '\u{0B}', '\u{0C}', '\r', '\u{A0}', '\u{1680}', '\u{2000}', '\u{2001}', '\u{2002}',
    '\u{2003}', '\u{2004}', '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}', '\u{200A}',
];

fn eval_trim(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let input = args.eval(0, cx)?;
    if is_nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let input = string_arg(name, &input, 50699, "its input")?;
    let chars: Vec<char> = match args.get(1) {
        None => DEFAULT_TRIM_CHARS.to_vec(),
        Some(_) => {
            let chars = args.eval(1, cx)?;
            if is_nullish(&chars) {
                return Ok(Some(Bson::Null));
            }
            string_arg(name, &chars, 50700, "'chars'")?.chars().collect()
        }
    };
    let trimmed = match name {
        "$ltrim" => input.trim_start_matches(chars.as_slice()),
        "$rtrim" => input.trim_end_matches(chars.as_slice()),
        _ => input.trim_matches(chars.as_slice()),
    };
    Ok(Some(Bson::String(trimmed.to_string())))
}

/// `$indexOfBytes`/`$indexOfCP: [string, substring, start?, end?]`.
fn eval_index_of(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let input = args.eval(0, cx)?;
    if is_nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let text = string_arg(name, &input, 40091, "a string as the first argument")?;
    let needle = string_arg(name, &args.eval(1, cx)?, 40092, "a string as the second argument")?;
    // Work in units of bytes or of code points uniformly.
    let found = if name == "$indexOfBytes" {
        find_in_range(text.as_bytes(), needle.as_bytes(), args, cx, name)?
    } else {
        let chars: Vec<char> = text.chars().collect();
        let needle: Vec<char> = needle.chars().collect();
        find_in_range(&chars, &needle, args, cx, name)?
    };
    Ok(Some(Bson::Int32(found.map_or(-1, |i| i32::try_from(i).unwrap_or(i32::MAX)))))
}

/// The first position of `needle` within `hay[start..end]`, where the
/// bounds come from the optional third and fourth arguments.
fn find_in_range<T: PartialEq>(
    hay: &[T],
    needle: &[T],
    args: &Args,
    cx: &Context,
    name: &str,
) -> Result<Option<usize>, QueryError> {
    let start = bound_arg(name, args, 2, cx, 0)?;
    let end = bound_arg(name, args, 3, cx, hay.len())?.min(hay.len());
    if start > end {
        return Ok(None);
    }
    let window = &hay[start..end];
    if needle.is_empty() {
        return Ok(Some(start));
    }
    Ok(window.windows(needle.len()).position(|w| w == needle).map(|i| i + start))
}

fn bound_arg(name: &str, args: &Args, index: usize, cx: &Context, default: usize) -> Result<usize, QueryError> {
    if args.get(index).is_none() {
        return Ok(default);
    }
    let value = integer_arg(name, &args.eval(index, cx)?, "index bounds")?;
    if value < 0 {
        return Err(QueryError::new(40097, format!("{name} requires a nonnegative index, found: {value}")));
    }
    Ok(value as usize)
}

fn eval_strcasecmp(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let a = coerce_to_string(name, &args.eval(0, cx)?)?.to_ascii_uppercase();
    let b = coerce_to_string(name, &args.eval(1, cx)?)?.to_ascii_uppercase();
    Ok(Some(Bson::Int32(match a.cmp(&b) {
        std::cmp::Ordering::Less => -1,
        std::cmp::Ordering::Equal => 0,
        std::cmp::Ordering::Greater => 1,
    })))
}

/// Compiles a `$regexMatch`/`$regexFind`/`$regexFindAll` pattern with
/// PCRE semantics (see `crate::pcre`).
pub(crate) fn build_regex(op: &'static str, pattern: &str, options: &str) -> Result<Pcre, QueryError> {
    Pcre::compile(pattern, options, op, 51111)
}

fn eval_replace(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let values = args.eval_all(cx)?;
    if values.iter().any(is_nullish) {
        return Ok(Some(Bson::Null));
    }
    let mut strings = Vec::with_capacity(3);
    for (value, what) in values.iter().zip(["'input'", "'find'", "'replacement'"]) {
        strings.push(string_arg(name, value, 51746, what)?);
    }
    let replaced = if name == "$replaceOne" {
        strings[0].replacen(strings[1].as_str(), &strings[2], 1)
    } else {
        strings[0].replace(strings[1].as_str(), &strings[2])
    };
    Ok(Some(Bson::String(replaced)))
}

/// The compiled regex and input text of `$regexMatch`/`$regexFind`;
/// `None` when the input or the regex is nullish (no match).
fn regex_and_input(name: &'static str, args: &Args, cx: &Context) -> Result<Option<(Pcre, String)>, QueryError> {
    let input = args.eval(0, cx)?;
    let (pattern, mut options) = match args.eval(1, cx)? {
        Some(Bson::String(p)) => (p, String::new()),
        Some(Bson::RegularExpression(r)) => (r.pattern.to_string(), r.options.to_string()),
        None | Some(Bson::Null) => return Ok(None),
        other => {
            return Err(QueryError::new(51105, format!("{name} needs 'regex' to be of type string or regex, found {}", type_name(&other))))
        }
    };
    match args.eval(2, cx)? {
        None | Some(Bson::Null) => {}
        Some(Bson::String(extra)) => {
            if !options.is_empty() && !extra.is_empty() {
                return Err(QueryError::new(51107, format!("{name} found regex option(s) specified in both 'regex' and 'option' fields")));
            }
            options.push_str(&extra);
        }
        other => return Err(QueryError::new(51106, format!("{name} needs 'options' to be of type string, found {}", type_name(&other)))),
    }
    let text = match input {
        None | Some(Bson::Null | Bson::Undefined) => return Ok(None),
        Some(Bson::String(s)) => s,
        other => return Err(QueryError::new(51104, format!("{name} needs 'input' to be of type string, found {}", type_name(&other)))),
    };
    Ok(Some((build_regex(name, &pattern, &options)?, text)))
}

fn eval_regex_match(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let matched = match regex_and_input(name, args, cx)? {
        Some((regex, text)) => regex.is_match(&text)?,
        None => false,
    };
    Ok(Some(Bson::Boolean(matched)))
}

/// `$regexFind` answers `{match, idx, captures}` for the first match (or
/// null); `$regexFindAll` an array of them. `idx` counts code points.
fn eval_regex_find(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let all = name == "$regexFindAll";
    let Some((regex, text)) = regex_and_input(name, args, cx)? else {
        return Ok(Some(if all { Bson::Array(Vec::new()) } else { Bson::Null }));
    };
    let mut found = Vec::new();
    for one in regex.find(&text, all)? {
        let groups: Vec<Bson> = one.groups.into_iter().map(|group| group.map_or(Bson::Null, Bson::String)).collect();
        let mut entry = bson::Document::new();
        entry.insert("match", one.text);
        entry.insert("idx", i32::try_from(text[..one.start].chars().count()).unwrap_or(i32::MAX));
        entry.insert("captures", groups);
        found.push(Bson::Document(entry));
    }
    if all {
        return Ok(Some(Bson::Array(found)));
    }
    Ok(Some(found.pop().unwrap_or(Bson::Null)))
}

#[cfg(test)]
mod tests {
    use crate::expr::{Expr, Variables};
    use bson::{bson, doc, Bson};

    fn eval(expr: Bson) -> Result<Bson, crate::QueryError> {
        let d = doc! {"item": "ABC1", "desc": "product 1", "cafe": "cafétéria", "n": null};
        Expr::parse(&expr)?.evaluate(&d, &Variables::empty())
    }

    #[test]
    fn concat_and_case() {
        assert_eq!(eval(bson!({"$concat": ["$item", " - ", "$desc"]})).unwrap(), Bson::from("ABC1 - product 1"));
        assert_eq!(eval(bson!({"$concat": ["$item", "$n"]})).unwrap(), Bson::Null);
        assert_eq!(eval(bson!({"$concat": ["$item", 1]})).unwrap_err().code, 16702);
        assert_eq!(eval(bson!({"$toLower": "$item"})).unwrap(), Bson::from("abc1"));
        assert_eq!(eval(bson!({"$toUpper": "$desc"})).unwrap(), Bson::from("PRODUCT 1"));
        assert_eq!(eval(bson!({"$toUpper": "$n"})).unwrap(), Bson::from(""));
    }

    #[test]
    fn substrings_and_lengths() {
        assert_eq!(eval(bson!({"$substr": ["$item", 0, 2]})).unwrap(), Bson::from("AB"));
        assert_eq!(eval(bson!({"$substrBytes": ["$item", 2, -1]})).unwrap(), Bson::from("C1"));
        assert_eq!(eval(bson!({"$substrCP": ["$cafe", 0, 4]})).unwrap(), Bson::from("café"));
        assert_eq!(eval(bson!({"$substrBytes": ["$cafe", 4, 2]})).unwrap_err().code, 28656);
        assert_eq!(eval(bson!({"$strLenBytes": "$cafe"})).unwrap(), Bson::Int32(11));
        assert_eq!(eval(bson!({"$strLenCP": "$cafe"})).unwrap(), Bson::Int32(9));
        assert_eq!(eval(bson!({"$strLenCP": "$absent"})).unwrap_err().code, 34471);
    }

    #[test]
    fn split_trim_index_of() {
        assert_eq!(eval(bson!({"$split": ["June-15-2013", "-"]})).unwrap(), bson!(["June", "15", "2013"]));
        assert_eq!(eval(bson!({"$split": ["$n", "-"]})).unwrap(), Bson::Null);
        assert_eq!(eval(bson!({"$split": ["a", ""]})).unwrap_err().code, 40087);
        assert_eq!(eval(bson!({"$trim": {"input": "  a b \n"}})).unwrap(), Bson::from("a b"));
        assert_eq!(eval(bson!({"$ltrim": {"input": "xxaxx", "chars": "x"}})).unwrap(), Bson::from("axx"));
        assert_eq!(eval(bson!({"$rtrim": {"input": "xxaxx", "chars": "x"}})).unwrap(), Bson::from("xxa"));
        assert_eq!(eval(bson!({"$indexOfBytes": ["cafeteria", "e"]})).unwrap(), Bson::Int32(3));
        assert_eq!(eval(bson!({"$indexOfBytes": ["cafétéria", "é"]})).unwrap(), Bson::Int32(3));
        assert_eq!(eval(bson!({"$indexOfCP": ["cafétéria", "t"]})).unwrap(), Bson::Int32(4));
        assert_eq!(eval(bson!({"$indexOfBytes": ["foo.bar.fi", ".", 5]})).unwrap(), Bson::Int32(7));
        assert_eq!(eval(bson!({"$indexOfBytes": ["vanilla", "ll", 0, 2]})).unwrap(), Bson::Int32(-1));
        assert_eq!(eval(bson!({"$indexOfBytes": ["$n", "x"]})).unwrap(), Bson::Null);
    }

    #[test]
    fn regex_match() {
        assert_eq!(eval(bson!({"$regexMatch": {"input": "$desc", "regex": "^PRO", "options": "i"}})).unwrap(), Bson::Boolean(true));
        assert_eq!(eval(bson!({"$regexMatch": {"input": "$desc", "regex": "^PRO"}})).unwrap(), Bson::Boolean(false));
        assert_eq!(eval(bson!({"$regexMatch": {"input": "$absent", "regex": "x"}})).unwrap(), Bson::Boolean(false));
        assert_eq!(eval(bson!({"$regexMatch": {"input": 5, "regex": "x"}})).unwrap_err().code, 51104);
    }

    #[test]
    fn regex_find_and_replace() {
        assert_eq!(
            eval(bson!({"$regexFind": {"input": "Single LINE description.", "regex": "(l)ine", "options": "i"}})).unwrap(),
            bson!({"match": "LINE", "idx": 7, "captures": ["L"]})
        );
        assert_eq!(eval(bson!({"$regexFind": {"input": "abc", "regex": "z"}})).unwrap(), Bson::Null);
        assert_eq!(
            eval(bson!({"$regexFindAll": {"input": "café cat", "regex": "c(a)?"}})).unwrap(),
            bson!([{"match": "ca", "idx": 0, "captures": ["a"]}, {"match": "ca", "idx": 5, "captures": ["a"]}])
        );
        assert_eq!(eval(bson!({"$regexFindAll": {"input": "$n", "regex": "x"}})).unwrap(), bson!([]));
        assert_eq!(eval(bson!({"$replaceOne": {"input": "blue paint blue", "find": "blue", "replacement": "red"}})).unwrap(), Bson::from("red paint blue"));
        assert_eq!(eval(bson!({"$replaceAll": {"input": "blue paint blue", "find": "blue", "replacement": "red"}})).unwrap(), Bson::from("red paint red"));
        assert_eq!(eval(bson!({"$replaceAll": {"input": "$n", "find": "a", "replacement": "b"}})).unwrap(), Bson::Null);
        assert_eq!(eval(bson!({"$replaceAll": {"input": 1, "find": "a", "replacement": "b"}})).unwrap_err().code, 51746);
    }
}
