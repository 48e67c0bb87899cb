//! Small helpers every command uses to read its arguments with MongoDB's
//! type rules and messages, and to check namespaces.

use bson::{Bson, Document};

use crate::error::CommandError;

/// The type name MongoDB uses in "wrong type" messages.
pub use slipstream_query::compare::type_name;

fn wrong_type(command: &str, field: &str, value: &Bson, expected: &str) -> CommandError {
    CommandError::new(
        14,
        format!(
            "BSON field '{command}.{field}' is the wrong type '{}', expected types '[{expected}]'",
            type_name(value)
        ),
    )
}

/// An integral number field (int, long, or a double without a fraction).
pub fn get_i64(body: &Document, command: &str, field: &str) -> Result<Option<i64>, CommandError> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Int32(n)) => Ok(Some(i64::from(*n))),
        Some(Bson::Int64(n)) => Ok(Some(*n)),
        Some(Bson::Double(d)) if d.fract() == 0.0 && d.abs() < 9.2e18 => Ok(Some(*d as i64)),
        Some(Bson::Double(d)) => Err(CommandError::new(
            2,
            format!("BSON field '{command}.{field}' has a non-integral value {d}"),
        )),
        Some(other) => Err(wrong_type(command, field, other, "long, int, decimal, double")),
    }
}

/// A non-negative integral number field.
/// A number's exact integer value (MongoDB's `isSafeLongLong` reading): a
/// double or decimal with a fraction, NaN or out of range has none.
pub fn exact_integer(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.2e18 => Some(*f as i64),
        Bson::Decimal128(d) => d.to_string().parse::<i64>().ok(),
        _ => None,
    }
}

pub fn get_non_negative(body: &Document, command: &str, field: &str) -> Result<Option<u64>, CommandError> {
    match get_i64(body, command, field)? {
        None => Ok(None),
        Some(n) if n < 0 => Err(CommandError::new(
            51024,
            format!("BSON field '{field}' value must be >= 0, actual value '{n}'"),
        )),
        Some(n) => Ok(Some(n as u64)),
    }
}

/// A boolean field; numbers count as booleans, as MongoDB's IDL allows.
pub fn get_bool(body: &Document, command: &str, field: &str) -> Result<Option<bool>, CommandError> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(Bson::Int32(n)) => Ok(Some(*n != 0)),
        Some(Bson::Int64(n)) => Ok(Some(*n != 0)),
        Some(Bson::Double(d)) => Ok(Some(*d != 0.0)),
        Some(other) => Err(wrong_type(command, field, other, "bool")),
    }
}

/// The longest `maxTimeMS` MongoDB accepts (INT_MAX milliseconds).
pub const MAX_TIME_MS_MAX: i64 = i32::MAX as i64;

/// `maxTimeMS`, with MongoDB's rules (`parseMaxTimeMS`): a number
/// (BadValue otherwise, not TypeMismatch), within [0, 2^31 - 1], without
/// a fraction. Zero means no limit.
pub fn get_max_time_ms(body: &Document, _command: &str) -> Result<Option<u64>, CommandError> {
    const FIELD: &str = "maxTimeMS";
    let value = match body.get(FIELD) {
        None => return Ok(None),
        Some(value) => value,
    };
    let (whole, integral) = match value {
        Bson::Int32(n) => (i64::from(*n), true),
        Bson::Int64(n) => (*n, true),
        // Saturating, as MongoDB's safeNumberLong is.
        Bson::Double(d) => (*d as i64, d.fract() == 0.0),
        Bson::Decimal128(_) => {
            return Err(CommandError::bad_value(format!(
                "{FIELD} must be an int, long or double"
            )))
        }
        _ => return Err(CommandError::bad_value(format!("{FIELD} must be a number"))),
    };
    if !(0..=MAX_TIME_MS_MAX).contains(&whole) {
        return Err(CommandError::bad_value(format!(
            "{whole} value for {FIELD} is out of range [0, {MAX_TIME_MS_MAX}]"
        )));
    }
    if !integral {
        return Err(CommandError::bad_value(format!("{FIELD} has non-integral value")));
    }
    Ok(Some(whole as u64))
}

/// Refuses a field that is neither one of `known` nor a generic argument,
/// as MongoDB's strict command parsers do (40415), and a known field this
/// node does not implement (`UNIMPLEMENTED_FIELDS`, 115) rather than
/// ignoring it.
pub fn refuse_unknown_fields(body: &Document, command: &str, known: &[&str]) -> Result<(), CommandError> {
    refuse_unknown_fields_of(body, command, &[known])
}

/// `refuse_unknown_fields` where the known fields come in several lists
/// (a command's own and those it shares with others).
pub fn refuse_unknown_fields_of(body: &Document, command: &str, known: &[&[&str]]) -> Result<(), CommandError> {
    let unknown = body.keys().find(|key| {
        !known.iter().any(|list| list.contains(&key.as_str())) && !crate::commands::admin::is_generic_argument(key)
    });
    if let Some(key) = unknown {
        return Err(CommandError::new(
            40415,
            format!("BSON field '{command}.{key}' is an unknown field."),
        ));
    }
    for (field, what) in UNIMPLEMENTED_FIELDS {
        if body.get(field).is_some_and(|value| !matches!(value, Bson::Null | Bson::Boolean(false))) {
            return Err(CommandError::new(
                115,
                format!("BSON field '{command}.{field}' ({what}) is not supported by Slipstream"),
            ));
        }
    }
    Ok(())
}

/// Fields MongoDB's command parsers declare that nothing here implements,
/// with what they are for: a client that sends one expects something
/// done with it.
const UNIMPLEMENTED_FIELDS: &[(&str, &str)] = &[
    ("encryptionInformation", "Queryable Encryption"),
    ("runtimeConstants", "variables a router sets for the shards"),
    ("isMapReduceCommand", "mapReduce run as an aggregation"),
    ("returnOnStart", "an index build answered before it finishes"),
];

/// `collectionUUID` (MongoDB 5.0+): the command runs only if the collection
/// named is the one with that UUID; otherwise CollectionUUIDMismatch (361)
/// with `db`, `collectionUUID`, `expectedCollection` and `actualCollection`
/// (the name of the collection that has the UUID in the database, or null).
pub fn check_collection_uuid(
    engine: &slipstream_storage::Engine,
    ns: &str,
    body: &Document,
    command: &str,
) -> Result<(), CommandError> {
    let (db, collection) = ns.split_once('.').unwrap_or((ns, ""));
    let value = match body.get("collectionUUID") {
        None | Some(Bson::Null) => return Ok(()),
        Some(value) => value,
    };
    let uuid = match value {
        Bson::Binary(binary) => binary.to_uuid().ok(),
        _ => None,
    };
    let expected = uuid.ok_or_else(|| {
        CommandError::type_mismatch(format!(
            "BSON field '{command}.collectionUUID' is the wrong type '{}', expected a UUID",
            type_name(value)
        ))
    })?;
    if engine.collection_info(ns).is_some_and(|info| info.uuid == expected) {
        return Ok(());
    }
    let actual = engine
        .list_collections(db)
        .into_iter()
        .find(|info| info.uuid == expected)
        .and_then(|info| info.ns.split_once('.').map(|(_, name)| name.to_owned()));
    Err(CommandError::new(361, "Collection UUID does not match that specified")
        .with_extra("db", db)
        .with_extra("collectionUUID", expected)
        .with_extra("expectedCollection", collection)
        .with_extra("actualCollection", actual.map_or(Bson::Null, Bson::String)))
}

/// A field of MongoDB's IDL type `optionalBool` (most command flags:
/// `find`'s `singleBatch`, `tailable`, `allowDiskUse`, ...): only a
/// boolean. A number or null is TypeMismatch, as MongoDB words it.
pub fn get_optional_bool(body: &Document, field: &str) -> Result<Option<bool>, CommandError> {
    match body.get(field) {
        None => Ok(None),
        Some(Bson::Boolean(flag)) => Ok(Some(*flag)),
        Some(other) => Err(CommandError::new(
            14,
            format!("Field '{field}' should be a boolean value, but found: {}", type_name(other)),
        )),
    }
}

/// An object field.
pub fn get_document<'a>(body: &'a Document, command: &str, field: &str) -> Result<Option<&'a Document>, CommandError> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d)),
        Some(other) => Err(wrong_type(command, field, other, "object")),
    }
}

/// An array field.
pub fn get_array<'a>(body: &'a Document, command: &str, field: &str) -> Result<Option<&'a Vec<Bson>>, CommandError> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Array(items)) => Ok(Some(items)),
        Some(other) => Err(wrong_type(command, field, other, "array")),
    }
}

/// The collection a command names in its first field (`{find: "c"}`).
pub fn collection_name(body: &Document, command: &str) -> Result<String, CommandError> {
    match body.get(command) {
        Some(Bson::String(name)) => {
            check_collection_name(name)?;
            Ok(name.clone())
        }
        Some(other) => Err(CommandError::new(
            73,
            format!("collection name has invalid type {}", type_name(other)),
        )),
        None => Err(CommandError::new(73, format!("command {command} names no collection"))),
    }
}

/// InvalidNamespace (73) for names MongoDB refuses anywhere.
pub fn check_collection_name(name: &str) -> Result<(), CommandError> {
    if name.is_empty() {
        return Err(CommandError::new(
            73,
            "Invalid namespace specified: collection name is empty",
        ));
    }
    if name.contains('\0') {
        return Err(CommandError::new(
            73,
            "Invalid namespace specified: collection name contains a null character",
        ));
    }
    if name.starts_with('.') || name.contains('$') && name != "$cmd" {
        return Err(CommandError::new(73, format!("Invalid collection name: {name}")));
    }
    Ok(())
}

/// InvalidNamespace (73) for a database name.
pub fn check_database_name(db: &str) -> Result<(), CommandError> {
    const FORBIDDEN: &[char] = &['/', '\\', '.', ' ', '"', '$', '\0'];
    if db.is_empty() || db.contains(FORBIDDEN) || db.len() >= 64 {
        return Err(CommandError::new(73, format!("Invalid database name: '{db}'")));
    }
    Ok(())
}

/// The namespace a write may target: not `system.*` (but `system.js`,
/// which MongoDB leaves to clients: stored JavaScript), not the oplog
/// (which is the journal and only the engine writes).
pub fn check_writable(db: &str, collection: &str) -> Result<(), CommandError> {
    check_database_name(db)?;
    check_collection_name(collection)?;
    if collection.starts_with("system.") && collection != "system.js" {
        return Err(CommandError::new(73, format!("cannot write to '{db}.{collection}'")));
    }
    if db == "local" && collection == "oplog.rs" {
        return Err(CommandError::new(
            73,
            "cannot write to 'local.oplog.rs': the oplog is written only by the storage engine",
        ));
    }
    Ok(())
}

/// `db.collection`.
pub fn namespace(db: &str, collection: &str) -> String {
    format!("{db}.{collection}")
}

/// Refuses a non-simple collation: Slipstream compares strings by bytes.
pub fn check_collation(body: &Document, command: &str) -> Result<(), CommandError> {
    match get_document(body, command, "collation")? {
        None => Ok(()),
        Some(collation) if is_simple_collation(collation) => Ok(()),
        Some(_) => Err(collation_unsupported()),
    }
}

pub fn is_simple_collation(collation: &Document) -> bool {
    collation.is_empty() || (collation.len() == 1 && collation.get_str("locale").ok() == Some("simple"))
}

pub fn collation_unsupported() -> CommandError {
    CommandError::new(
        115,
        "collation other than {locale: \"simple\"} is not supported by Slipstream",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn integral_fields_accept_every_numeric_type() {
        let body = doc! {"a": 5, "b": 6i64, "c": 7.0, "d": 7.5, "e": "x"};
        assert_eq!(get_i64(&body, "find", "a").unwrap(), Some(5));
        assert_eq!(get_i64(&body, "find", "b").unwrap(), Some(6));
        assert_eq!(get_i64(&body, "find", "c").unwrap(), Some(7));
        assert_eq!(get_i64(&body, "find", "missing").unwrap(), None);
        assert_eq!(get_i64(&body, "find", "d").unwrap_err().code, 2);
        assert_eq!(get_i64(&body, "find", "e").unwrap_err().code, 14);
    }

    #[test]
    fn namespaces_are_checked() {
        assert!(check_collection_name("c").is_ok());
        assert_eq!(check_collection_name("").unwrap_err().code, 73);
        assert_eq!(check_collection_name("a$b").unwrap_err().code, 73);
        assert_eq!(check_writable("db", "system.x").unwrap_err().code, 73);
        assert_eq!(check_writable("local", "oplog.rs").unwrap_err().code, 73);
        assert!(check_writable("db", "c.d").is_ok());
        assert_eq!(check_database_name("a.b").unwrap_err().code, 73);
    }
}
