//! The Stable API parameters every command may carry (`apiVersion`,
//! `apiStrict`, `apiDeprecationErrors`) and what MongoDB 7.0 does with
//! them, checked before the command's own arguments:
//!
//! 1. each parameter's type (TypeMismatch, 14);
//! 2. `apiStrict` or `apiDeprecationErrors` without `apiVersion` (4886600);
//! 3. a version other than "1" (APIVersionError, 322);
//! 4. with `apiStrict: true`, a command outside API version 1
//!    (APIStrictError, 323).
//!
//! No command of version 1 is deprecated, so `apiDeprecationErrors` never
//! refuses one. Under `apiStrict`, the fields of `find` and `getMore`
//! outside version 1 (e.g. `tailable`) and the top-level stages of an
//! `aggregate` outside it are refused too (323); other commands' options
//! and stages inside sub-pipelines are not checked yet.

use bson::{Bson, Document};

use crate::error::CommandError;
use crate::exec::args::type_name;

/// The commands of Stable API version 1 in MongoDB 7.0 (the Stable API
/// changelog: everything added in 5.0, plus `count` in 6.0).
pub const API_VERSION_1_COMMANDS: &[&str] = &[
    "abortTransaction",
    "aggregate",
    "authenticate",
    "collMod",
    "commitTransaction",
    "count",
    "create",
    "createIndexes",
    "delete",
    "drop",
    "dropDatabase",
    "dropIndexes",
    "endSessions",
    "explain",
    "find",
    "findAndModify",
    "getMore",
    "hello",
    "insert",
    "killCursors",
    "listCollections",
    "listDatabases",
    "listIndexes",
    "ping",
    "refreshSessions",
    "saslContinue",
    "saslStart",
    "update",
];

/// Aggregation stages outside API version 1 (MongoDB 7.0's `aggregate`
/// page): refused at the top level of a pipeline under `apiStrict`.
pub const STAGES_OUTSIDE_API_VERSION_1: &[&str] = &[
    "$currentOp",
    "$indexStats",
    "$listLocalSessions",
    "$listSessions",
    "$planCacheStats",
    "$search",
];

/// Whether `name` (the dispatch table's name, not an alias: `isMaster` is
/// outside version 1 although `hello` is in it) belongs to API version 1.
pub fn in_api_version_1(name: &str) -> bool {
    API_VERSION_1_COMMANDS.contains(&name)
}

/// Checks the API parameters of a command named `name` (as the client
/// spelled it). `required`: the `requireApiVersion` parameter is on.
pub fn check(name: &str, body: &Document, required: bool) -> Result<(), CommandError> {
    let version = typed(body, "apiVersion", "string", |value| matches!(value, Bson::String(_)))?;
    if required && version.is_none() {
        return Err(CommandError::new(
            498870,
            "The apiVersion parameter is required, please configure your MongoClient's API version",
        ));
    }
    let strict = typed(body, "apiStrict", "bool", |value| matches!(value, Bson::Boolean(_)))?;
    let deprecation = typed(body, "apiDeprecationErrors", "bool", |value| {
        matches!(value, Bson::Boolean(_))
    })?;
    let Some(version) = version else {
        for (field, present) in [
            ("apiStrict", strict.is_some()),
            ("apiDeprecationErrors", deprecation.is_some()),
        ] {
            if present {
                return Err(CommandError::new(
                    4886600,
                    format!("Provided {field} without passing apiVersion"),
                ));
            }
        }
        return Ok(());
    };
    if version.as_str() != Some("1") {
        return Err(CommandError::new(322, "API version must be \"1\""));
    }
    if strict == Some(&Bson::Boolean(true)) && !in_api_version_1(name) {
        return Err(CommandError::new(
            323,
            format!(
                "Provided apiStrict:true, but the command {name} is not in API Version 1. Information on \
                 supported commands and migrations in API Version 1 can be found at \
                 https://dochub.mongodb.org/core/manual-versioning"
            ),
        ));
    }
    if strict == Some(&Bson::Boolean(true)) {
        refuse_unstable_fields(name, body)?;
        if name == "aggregate" {
            refuse_stages_outside_version_1(body)?;
        }
    }
    Ok(())
}

/// Fields of version-1 commands that are not part of API version 1
/// (`unstable: true` in MongoDB 7.0's IDL files).
const UNSTABLE_FIELDS: &[(&str, &[&str])] = &[
    (
        "find",
        &[
            "ntoreturn",
            "min",
            "max",
            "returnKey",
            "showRecordId",
            "tailable",
            "oplogReplay",
            "noCursorTimeout",
            "awaitData",
            "options",
            "term",
            "readOnce",
            "allowSpeculativeMajorityRead",
            "runtimeConstants",
            "collectionUUID",
        ],
    ),
    ("getMore", &["term", "lastKnownCommittedOpTime"]),
];

fn refuse_unstable_fields(name: &str, body: &Document) -> Result<(), CommandError> {
    let Some((_, unstable)) = UNSTABLE_FIELDS.iter().find(|(command, _)| *command == name) else {
        return Ok(());
    };
    match body.keys().find(|key| unstable.contains(&key.as_str())) {
        Some(field) => Err(CommandError::new(
            323,
            format!("BSON field '{name}.{field}' is not allowed with apiStrict:true"),
        )),
        None => Ok(()),
    }
}

fn refuse_stages_outside_version_1(body: &Document) -> Result<(), CommandError> {
    let Ok(stages) = body.get_array("pipeline") else {
        return Ok(());
    };
    let names = stages.iter().filter_map(|stage| stage.as_document()?.keys().next());
    for name in names {
        if STAGES_OUTSIDE_API_VERSION_1.contains(&name.as_str()) {
            return Err(CommandError::new(
                323,
                format!("{name} is not allowed with 'apiStrict: true' in API Version 1"),
            ));
        }
    }
    Ok(())
}

/// The parameter `field` when present, refused with TypeMismatch unless
/// `is_expected` says it has the right type.
fn typed<'a>(
    body: &'a Document,
    field: &str,
    expected: &str,
    is_expected: fn(&Bson) -> bool,
) -> Result<Option<&'a Bson>, CommandError> {
    match body.get(field) {
        None => Ok(None),
        Some(value) if is_expected(value) => Ok(Some(value)),
        Some(value) => Err(CommandError::new(
            14,
            format!(
                "BSON field '{field}' is the wrong type '{}', expected type '{expected}'",
                type_name(value)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn code(name: &str, body: Document) -> Option<i32> {
        check(name, &body, false).err().map(|error| error.code)
    }

    #[test]
    fn parameters_are_checked_in_mongodb_order() {
        assert_eq!(code("ping", doc! {"ping": 1, "apiStrict": true}), Some(4886600));
        assert_eq!(
            code("ping", doc! {"ping": 1, "apiDeprecationErrors": false}),
            Some(4886600)
        );
        assert_eq!(code("ping", doc! {"ping": 1, "apiVersion": 1}), Some(14));
        assert_eq!(code("ping", doc! {"ping": 1, "apiVersion": "2"}), Some(322));
        assert_eq!(
            code("ping", doc! {"ping": 1, "apiVersion": "1", "apiStrict": "true"}),
            Some(14)
        );
        // The type of apiStrict is checked before the missing version.
        assert_eq!(code("ping", doc! {"ping": 1, "apiStrict": 1}), Some(14));
        assert_eq!(
            code("ping", doc! {"ping": 1, "apiVersion": "1", "apiStrict": true}),
            None
        );
    }

    #[test]
    fn strict_refuses_commands_outside_version_1() {
        assert_eq!(
            code("buildInfo", doc! {"buildInfo": 1, "apiVersion": "1", "apiStrict": true}),
            Some(323)
        );
        assert_eq!(
            code("isMaster", doc! {"isMaster": 1, "apiVersion": "1", "apiStrict": true}),
            Some(323)
        );
        assert_eq!(
            code("hello", doc! {"hello": 1, "apiVersion": "1", "apiStrict": true}),
            None
        );
        assert_eq!(
            code(
                "buildInfo",
                doc! {"buildInfo": 1, "apiVersion": "1", "apiStrict": false}
            ),
            None
        );
        assert_eq!(
            code(
                "buildInfo",
                doc! {"buildInfo": 1, "apiVersion": "1", "apiDeprecationErrors": true}
            ),
            None
        );
    }

    #[test]
    fn require_api_version_refuses_commands_without_one() {
        assert_eq!(check("ping", &doc! {"ping": 1}, true).unwrap_err().code, 498870);
        assert!(check("ping", &doc! {"ping": 1, "apiVersion": "1"}, true).is_ok());
    }

    #[test]
    fn strict_refuses_stages_outside_version_1() {
        let pipeline =
            |stage: &str| doc! {"aggregate": 1, "pipeline": [{"$match": {}}, {stage: {}}], "apiVersion": "1"};
        let strict = |mut body: Document| {
            body.insert("apiStrict", true);
            body
        };
        assert_eq!(code("aggregate", strict(pipeline("$currentOp"))), Some(323));
        assert_eq!(code("aggregate", strict(pipeline("$listLocalSessions"))), Some(323));
        assert_eq!(code("aggregate", strict(pipeline("$group"))), None);
        assert_eq!(code("aggregate", pipeline("$currentOp")), None);
    }

    #[test]
    fn strict_refuses_unstable_fields() {
        let find = doc! {"find": "c", "tailable": true, "apiVersion": "1", "apiStrict": true};
        assert_eq!(code("find", find), Some(323));
        assert_eq!(
            code(
                "find",
                doc! {"find": "c", "filter": {}, "apiVersion": "1", "apiStrict": true}
            ),
            None
        );
        assert_eq!(
            code("find", doc! {"find": "c", "tailable": true, "apiVersion": "1"}),
            None
        );
    }
}
