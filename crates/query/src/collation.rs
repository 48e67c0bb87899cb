//! MongoDB's collation document (`{locale: "fr", strength: 2, ...}`) and the
//! ICU collator behind it.
//!
//! A collation changes only how strings compare. Everything that compares
//! values under a collation (filters, sort, `$group`, `distinct`, index keys)
//! does it the way MongoDB's index keys do: each string (and symbol) is
//! replaced by its ICU sort key, and the results compare with the ordinary
//! BSON order (`compare::compare_values`). Sort keys are bytes whose
//! `memcmp` order is the collation order; they are carried as a string whose
//! characters are the bytes plus one (U+0001..U+0100), which keeps their
//! order (UTF-8 orders by code point) and keeps 0x00 out of index keys.
//!
//! The collator is ICU4X (`icu_collator`) with its compiled-in CLDR data, so
//! no system ICU is needed. Two options MongoDB takes cannot be set on it:
//! `backwards` (French secondary order) is accepted only at the locale's own
//! default, and `normalization` is accepted either way because ICU4X always
//! normalizes (the result of `normalization: false` on normalized text).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use bson::{Bson, Document};
use icu_collator::options::{AlternateHandling, CaseLevel, CollatorOptions, MaxVariable, Strength};
use icu_collator::preferences::{CollationCaseFirst, CollationNumericOrdering};
use icu_collator::{CollatorBorrowed, CollatorPreferences};
use icu_locale_core::Locale;

use crate::compare::compare_values;
use crate::error::{codes, QueryError};

/// The ICU version MongoDB 7.0 reports in a collation's `version` field;
/// a request naming another version is refused (161), as MongoDB does.
pub const ICU_VERSION: &str = "57.1";

/// IncompatibleCollationVersion.
const INCOMPATIBLE_COLLATION_VERSION: i32 = 161;

/// The locales MongoDB 7.0 accepts (its documented table, ICU locale ids).
const LOCALES: &[&str] = &[
    "af",
    "am",
    "ar",
    "as",
    "az",
    "be",
    "bg",
    "bn",
    "bo",
    "bs",
    "bs_Cyrl",
    "ca",
    "chr",
    "cs",
    "cy",
    "da",
    "de",
    "de_AT",
    "dsb",
    "dz",
    "ee",
    "el",
    "en",
    "en_US",
    "en_US_POSIX",
    "eo",
    "es",
    "et",
    "fa",
    "fa_AF",
    "fi",
    "fil",
    "fo",
    "fr",
    "fr_CA",
    "ga",
    "gl",
    "gu",
    "ha",
    "haw",
    "he",
    "hi",
    "hr",
    "hsb",
    "hu",
    "hy",
    "id",
    "ig",
    "is",
    "it",
    "ja",
    "ka",
    "kk",
    "kl",
    "km",
    "kn",
    "ko",
    "kok",
    "ky",
    "lb",
    "lkt",
    "ln",
    "lo",
    "lt",
    "lv",
    "mk",
    "ml",
    "mn",
    "mr",
    "ms",
    "mt",
    "my",
    "nb",
    "ne",
    "nl",
    "nn",
    "om",
    "or",
    "pa",
    "pl",
    "ps",
    "pt",
    "ro",
    "ru",
    "se",
    "si",
    "sk",
    "sl",
    "smn",
    "sq",
    "sr",
    "sr_Latn",
    "sv",
    "sw",
    "ta",
    "te",
    "th",
    "tk",
    "to",
    "tr",
    "uk",
    "ur",
    "uz",
    "vi",
    "wae",
    "yi",
    "yo",
    "zh",
    "zh_Hant",
    "zu",
];

/// Collation variants (`de@collation=phonebook`) MongoDB documents.
const VARIANTS: &[&str] = &[
    "search",
    "phonebook",
    "eor",
    "traditional",
    "compat",
    "big5han",
    "gb2312han",
    "unihan",
    "zhuyin",
    "pinyin",
    "stroke",
    "standard",
    "dictionary",
    "phonetic",
    "reformed",
];

/// Locales whose ICU tailoring turns on French (backwards) secondary order.
const BACKWARDS_LOCALES: &[&str] = &["fr_CA"];

/// A parsed, non-simple collation: the full specification as MongoDB fills
/// it in, and the collator that implements it.
pub struct Collation {
    spec: Spec,
    collator: CollatorBorrowed<'static>,
}

/// Every field of a collation document, defaults resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Spec {
    locale: String,
    case_level: bool,
    case_first: &'static str,
    strength: i32,
    numeric_ordering: bool,
    alternate: &'static str,
    max_variable: &'static str,
    normalization: bool,
    backwards: bool,
}

/// What a command's `collation` argument asks for.
pub type CollationRef = Option<Arc<Collation>>;

impl fmt::Debug for Collation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Collation({:?})", self.spec)
    }
}

impl PartialEq for Collation {
    fn eq(&self, other: &Collation) -> bool {
        self.spec == other.spec
    }
}

impl Eq for Collation {}

/// Two optional collations are the same (`None` is the simple collation).
pub fn same_collation(a: Option<&Collation>, b: Option<&Collation>) -> bool {
    a == b
}

impl Collation {
    /// Parses a collation document. `{locale: "simple"}` is the simple
    /// (binary) collation: `Ok(None)`. Codes and checks follow MongoDB's
    /// `CollatorFactoryICU::makeFromBSON`: wrong types 14, bad values 9,
    /// an unknown locale or an invalid combination 2.
    pub fn parse(document: &Document) -> Result<CollationRef, QueryError> {
        let locale = match document.get("locale") {
            None => return Err(QueryError::new(codes::NO_SUCH_KEY, "Missing expected field \"locale\"")),
            Some(Bson::String(locale)) => locale.clone(),
            Some(other) => return Err(wrong_type("locale", "string", other)),
        };
        if locale.contains('\0') {
            return Err(QueryError::bad_value(format!(
                "Field 'locale' cannot contain null byte. Collation spec: {document}"
            )));
        }
        if locale == "simple" {
            if document.len() > 1 {
                return Err(QueryError::failed_to_parse(format!(
                    "If locale=simple, no other fields should be present in: {document}"
                )));
            }
            return Ok(None);
        }
        if locale.is_empty() {
            return Err(QueryError::bad_value(format!(
                "Field 'locale' cannot be the empty string in: {document}"
            )));
        }
        let icu_locale = icu_locale(&locale)
            .ok_or_else(|| QueryError::bad_value(format!("Field 'locale' is invalid in: {document}")))?;
        let requested = Requested::parse(document)?;
        let collation = build(document, &locale, &icu_locale, &requested)?;
        Ok(Some(Arc::new(collation)))
    }

    /// The collation as `listIndexes`, `listCollections` and explain show it:
    /// every field, defaults filled in, and `version`.
    pub fn to_document(&self) -> Document {
        let spec = &self.spec;
        let mut document = Document::new();
        document.insert("locale", spec.locale.clone());
        document.insert("caseLevel", spec.case_level);
        document.insert("caseFirst", spec.case_first);
        document.insert("strength", spec.strength);
        document.insert("numericOrdering", spec.numeric_ordering);
        document.insert("alternate", spec.alternate);
        document.insert("maxVariable", spec.max_variable);
        document.insert("normalization", spec.normalization);
        document.insert("backwards", spec.backwards);
        document.insert("version", ICU_VERSION);
        document
    }

    /// The comparison key of a string: its ICU sort key, one character per
    /// byte (byte + 1), so that keys compare as the strings collate.
    pub fn sort_key(&self, text: &str) -> String {
        let mut bytes = Vec::with_capacity(text.len() * 2);
        // Writing to a Vec cannot fail.
        let Ok(()) = self.collator.write_sort_key_to(text, &mut bytes);
        bytes
            .iter()
            .map(|b| char::from_u32(u32::from(*b) + 1).unwrap_or('\u{1}'))
            .collect()
    }

    /// `value` with every string and symbol (inside documents and arrays
    /// too) replaced by its sort key; borrowed when there is none.
    pub fn collate<'a>(&self, value: &'a Bson) -> Cow<'a, Bson> {
        if !contains_string(value) {
            return Cow::Borrowed(value);
        }
        Cow::Owned(self.collate_owned(value))
    }

    fn collate_owned(&self, value: &Bson) -> Bson {
        match value {
            Bson::String(text) | Bson::Symbol(text) => Bson::String(self.sort_key(text)),
            Bson::Document(document) => Bson::Document(self.collate_document(document)),
            Bson::Array(items) => Bson::Array(items.iter().map(|item| self.collate_owned(item)).collect()),
            other => other.clone(),
        }
    }

    /// A document whose values are collated (field names are not).
    pub fn collate_document(&self, document: &Document) -> Document {
        document
            .iter()
            .map(|(key, value)| (key.clone(), self.collate_owned(value)))
            .collect()
    }

    /// `compare_values` under this collation.
    pub fn compare(&self, a: &Bson, b: &Bson) -> Ordering {
        compare_values(&self.collate(a), &self.collate(b))
    }
}

/// `compare_values` under an optional collation (`None`: simple).
pub fn compare_with(collation: Option<&Collation>, a: &Bson, b: &Bson) -> Ordering {
    match collation {
        Some(collation) => collation.compare(a, b),
        None => compare_values(a, b),
    }
}

/// `value` as it compares under an optional collation.
pub fn collate_with<'a>(collation: Option<&Collation>, value: &'a Bson) -> Cow<'a, Bson> {
    match collation {
        Some(collation) => collation.collate(value),
        None => Cow::Borrowed(value),
    }
}

/// Whether a collation can change how `value` compares.
pub fn contains_string(value: &Bson) -> bool {
    match value {
        Bson::String(_) | Bson::Symbol(_) => true,
        Bson::Document(document) => document.values().any(contains_string),
        Bson::Array(items) => items.iter().any(contains_string),
        _ => false,
    }
}

/// The options a collation document sets explicitly.
#[derive(Default)]
struct Requested {
    case_level: Option<bool>,
    case_first: Option<&'static str>,
    strength: Option<i32>,
    numeric_ordering: Option<bool>,
    alternate: Option<&'static str>,
    max_variable: Option<&'static str>,
    normalization: Option<bool>,
    backwards: Option<bool>,
}

impl Requested {
    /// Reads the fields in MongoDB's order, so that the first bad field is
    /// the one MongoDB reports; then refuses unknown fields (9).
    fn parse(document: &Document) -> Result<Requested, QueryError> {
        let requested = Requested {
            case_level: bool_field(document, "caseLevel")?,
            case_first: choice_field(document, "caseFirst", &["upper", "lower", "off"])?,
            strength: strength_field(document)?,
            numeric_ordering: bool_field(document, "numericOrdering")?,
            alternate: choice_field(document, "alternate", &["non-ignorable", "shifted"])?,
            max_variable: choice_field(document, "maxVariable", &["punct", "space"])?,
            normalization: bool_field(document, "normalization")?,
            backwards: bool_field(document, "backwards")?,
        };
        match document.get("version") {
            None => {}
            Some(Bson::String(version)) if version == ICU_VERSION => {}
            Some(Bson::String(version)) => {
                return Err(QueryError::new(
                    INCOMPATIBLE_COLLATION_VERSION,
                    format!(
                        "Requested collation version {version} but the only available collator version was \
                         {ICU_VERSION}. Requested collation spec: {document}"
                    ),
                ))
            }
            Some(other) => return Err(wrong_type("version", "string", other)),
        }
        const KNOWN: &[&str] = &[
            "locale",
            "caseLevel",
            "caseFirst",
            "strength",
            "numericOrdering",
            "alternate",
            "maxVariable",
            "normalization",
            "backwards",
            "version",
        ];
        if document.keys().any(|key| !KNOWN.contains(&key.as_str())) {
            return Err(QueryError::failed_to_parse(format!(
                "Collation spec contains unknown field. Collation spec: {document}"
            )));
        }
        Ok(requested)
    }
}

fn wrong_type(field: &str, expected: &str, found: &Bson) -> QueryError {
    QueryError::type_mismatch(format!(
        "\"{field}\" had the wrong type. Expected {expected}, found {}",
        crate::compare::type_name(found)
    ))
}

fn bool_field(document: &Document, field: &str) -> Result<Option<bool>, QueryError> {
    match document.get(field) {
        None => Ok(None),
        Some(Bson::Boolean(value)) => Ok(Some(*value)),
        Some(other) => Err(wrong_type(field, "bool", other)),
    }
}

fn choice_field(
    document: &Document,
    field: &str,
    choices: &[&'static str],
) -> Result<Option<&'static str>, QueryError> {
    let value = match document.get(field) {
        None => return Ok(None),
        Some(Bson::String(value)) => value,
        Some(other) => return Err(wrong_type(field, "string", other)),
    };
    match choices.iter().find(|choice| **choice == value.as_str()) {
        Some(choice) => Ok(Some(choice)),
        None => {
            let quoted: Vec<String> = choices.iter().map(|c| format!("'{c}'")).collect();
            Err(QueryError::failed_to_parse(format!(
                "Field '{field}' must be {}. Got: {value}",
                quoted.join(" or ")
            )))
        }
    }
}

fn strength_field(document: &Document) -> Result<Option<i32>, QueryError> {
    let value = match document.get("strength") {
        None => return Ok(None),
        Some(Bson::Int32(v)) => i64::from(*v),
        Some(Bson::Int64(v)) => *v,
        Some(Bson::Double(v)) if v.fract() == 0.0 && v.abs() < 1e18 => *v as i64,
        Some(Bson::Double(_)) => {
            return Err(QueryError::bad_value(
                "Expected field \"strength\" to have a value exactly representable as a 64-bit integer",
            ))
        }
        Some(other) => return Err(wrong_type("strength", "number", other)),
    };
    if !(1..=5).contains(&value) {
        return Err(QueryError::failed_to_parse(format!(
            "Field 'strength' must be an integer 1 through 5. Got: {value}"
        )));
    }
    Ok(Some(value as i32))
}

/// The ICU4X locale for a MongoDB locale id (`de_AT`, `de@collation=phonebook`),
/// `None` when MongoDB would not accept it.
fn icu_locale(locale: &str) -> Option<Locale> {
    let (base, variant) = match locale.split_once('@') {
        Some((base, keywords)) => (base, Some(keywords.strip_prefix("collation=")?)),
        None => (locale, None),
    };
    if !LOCALES.contains(&base) {
        return None;
    }
    let mut tag = base.replace('_', "-");
    if let Some(variant) = variant {
        if !VARIANTS.contains(&variant) {
            return None;
        }
        // BCP 47 spells the collation types in at most 8 letters.
        let keyword = match variant {
            "traditional" => "trad",
            "dictionary" => "dict",
            "phonebook" => "phonebk",
            other => other,
        };
        tag.push_str("-u-co-");
        tag.push_str(keyword);
    }
    tag.parse::<Locale>().ok()
}

fn build(
    document: &Document,
    locale: &str,
    icu_locale: &Locale,
    requested: &Requested,
) -> Result<Collation, QueryError> {
    let mut prefs = CollatorPreferences::from(icu_locale);
    prefs.case_first = requested.case_first.map(|value| match value {
        "upper" => CollationCaseFirst::Upper,
        "lower" => CollationCaseFirst::Lower,
        _ => CollationCaseFirst::False,
    });
    prefs.numeric_ordering = requested.numeric_ordering.map(|on| match on {
        true => CollationNumericOrdering::True,
        false => CollationNumericOrdering::False,
    });
    let mut options = CollatorOptions::default();
    options.strength = requested.strength.map(|level| match level {
        1 => Strength::Primary,
        2 => Strength::Secondary,
        3 => Strength::Tertiary,
        4 => Strength::Quaternary,
        _ => Strength::Identical,
    });
    options.case_level = requested
        .case_level
        .map(|on| if on { CaseLevel::On } else { CaseLevel::Off });
    options.alternate_handling = requested.alternate.map(|value| match value {
        "shifted" => AlternateHandling::Shifted,
        _ => AlternateHandling::NonIgnorable,
    });
    options.max_variable = requested.max_variable.map(|value| match value {
        "space" => MaxVariable::Space,
        _ => MaxVariable::Punctuation,
    });
    let collator = CollatorBorrowed::try_new(prefs, options)
        .map_err(|_| QueryError::bad_value(format!("Field 'locale' is invalid in: {document}")))?;
    let resolved = collator.resolved_options();
    let locale_backwards = BACKWARDS_LOCALES.contains(&locale);
    let spec = Spec {
        locale: locale.to_string(),
        case_level: resolved.case_level == CaseLevel::On,
        case_first: match resolved.case_first {
            CollationCaseFirst::Upper => "upper",
            CollationCaseFirst::Lower => "lower",
            _ => "off",
        },
        strength: match resolved.strength {
            Strength::Primary => 1,
            Strength::Secondary => 2,
            Strength::Tertiary => 3,
            Strength::Quaternary => 4,
            _ => 5,
        },
        numeric_ordering: resolved.numeric == CollationNumericOrdering::True,
        alternate: match resolved.alternate_handling {
            AlternateHandling::Shifted => "shifted",
            _ => "non-ignorable",
        },
        max_variable: match resolved.max_variable {
            MaxVariable::Space => "space",
            _ => "punct",
        },
        normalization: requested.normalization.unwrap_or(false),
        backwards: requested.backwards.unwrap_or(locale_backwards),
    };
    check_combination(&spec)?;
    if spec.backwards != locale_backwards {
        return Err(QueryError::new(
            codes::COMMAND_NOT_SUPPORTED,
            format!(
                "collation option backwards: {} differs from locale {locale}'s default and is not supported by \
                 Slipstream (its ICU collator sets French secondary order only from the locale)",
                spec.backwards
            ),
        ));
    }
    Ok(Collation { spec, collator })
}

/// MongoDB's `validateCollationSpec`: options that cannot take effect.
fn check_combination(spec: &Spec) -> Result<(), QueryError> {
    let document = || {
        let mut document = Document::new();
        document.insert("locale", spec.locale.clone());
        document.insert("strength", spec.strength);
        document
    };
    if spec.backwards && spec.strength == 1 {
        return Err(QueryError::bad_value(format!(
            "'backwards' is invalid with 'strength' of 1 in: {}",
            document()
        )));
    }
    if spec.case_first != "off" && !spec.case_level && spec.strength <= 2 {
        return Err(QueryError::bad_value(format!(
            "'caseFirst' is invalid unless 'caseLevel' is on or 'strength' is greater than 2 in: {}",
            document()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    fn parse(document: Document) -> Arc<Collation> {
        Collation::parse(&document).unwrap().unwrap()
    }

    #[test]
    fn simple_is_no_collation() {
        assert!(Collation::parse(&doc! {"locale": "simple"}).unwrap().is_none());
        assert_eq!(
            Collation::parse(&doc! {"locale": "simple", "strength": 1})
                .unwrap_err()
                .code,
            9
        );
    }

    #[test]
    fn strength_two_ignores_case_only() {
        let collation = parse(doc! {"locale": "en", "strength": 2});
        assert_eq!(collation.sort_key("ABC"), collation.sort_key("abc"));
        assert_ne!(collation.sort_key("abc"), collation.sort_key("abç"));
        let primary = parse(doc! {"locale": "en", "strength": 1});
        assert_eq!(primary.sort_key("abc"), primary.sort_key("ABÇ"));
    }

    #[test]
    fn keys_order_as_the_collation() {
        let collation = parse(doc! {"locale": "en"});
        let mut words = vec!["b", "B", "a", "A", "é", "e"];
        words.sort_by_key(|w| collation.sort_key(w));
        assert_eq!(words, vec!["a", "A", "b", "B", "e", "é"]);
        let numeric = parse(doc! {"locale": "en", "numericOrdering": true});
        assert_eq!(numeric.compare(&Bson::from("10"), &Bson::from("9")), Ordering::Greater);
        assert!(!numeric.sort_key("x").contains('\0'));
    }

    #[test]
    fn document_has_every_field() {
        let collation = parse(doc! {"locale": "fr_CA"});
        assert_eq!(
            collation.to_document(),
            doc! {"locale": "fr_CA", "caseLevel": false, "caseFirst": "off", "strength": 3,
            "numericOrdering": false, "alternate": "non-ignorable", "maxVariable": "punct",
            "normalization": false, "backwards": true, "version": "57.1"}
        );
    }

    #[test]
    fn filters_sorts_and_index_keys_follow_the_collation() {
        use crate::filter::Filter;
        use crate::index_key::{index_keys, KeyPattern};
        use crate::sort::SortSpec;
        let collation = Some(parse(doc! {"locale": "en", "strength": 2}));
        let filter =
            Filter::parse_collated(&doc! {"a": {"$in": ["X"]}, "b": {"$gte": "m"}}, collation.clone()).unwrap();
        assert!(filter.matches(&doc! {"a": "x", "b": "M"}));
        assert!(!filter.matches(&doc! {"a": "y", "b": "M"}));
        assert!(!Filter::parse(&doc! {"a": "X"}).unwrap().matches(&doc! {"a": "x"}));
        assert_eq!(filter.equality_fields(), Vec::<(String, Bson)>::new());
        let upsert = Filter::parse_collated(&doc! {"a": "X"}, collation.clone()).unwrap();
        assert_eq!(upsert.equality_fields(), vec![("a".to_string(), Bson::from("X"))]);
        let sort = SortSpec::parse(&doc! {"s": 1})
            .unwrap()
            .with_collation(collation.clone());
        assert_eq!(sort.compare(&doc! {"s": "b"}, &doc! {"s": "C"}), Ordering::Less);
        let pattern = KeyPattern::parse(&doc! {"a": 1}).unwrap().with_collation(collation);
        let upper = index_keys(&doc! {"a": "ABC"}, &pattern, false).unwrap().keys;
        assert_eq!(upper, index_keys(&doc! {"a": "abc"}, &pattern, false).unwrap().keys);
        assert_ne!(upper, index_keys(&doc! {"a": "abd"}, &pattern, false).unwrap().keys);
    }

    #[test]
    fn errors_carry_mongodb_codes() {
        let code = |document: Document| Collation::parse(&document).unwrap_err().code;
        assert_eq!(code(doc! {"locale": "xx"}), 2);
        assert_eq!(code(doc! {}), 4);
        assert_eq!(code(doc! {"locale": 1}), 14);
        assert_eq!(code(doc! {"locale": "en", "strength": 6}), 9);
        assert_eq!(code(doc! {"locale": "en", "caseFirst": "x"}), 9);
        assert_eq!(code(doc! {"locale": "en", "bogus": 1}), 9);
        assert_eq!(code(doc! {"locale": "en", "strength": 1, "caseFirst": "upper"}), 2);
        assert_eq!(code(doc! {"locale": "en", "version": "1.0"}), 161);
        assert!(Collation::parse(&doc! {"locale": "de@collation=phonebook"}).is_ok());
    }
}
