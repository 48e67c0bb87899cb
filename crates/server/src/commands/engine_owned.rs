//! Catalog commands refused on the collections the engine keeps itself:
//! `local.oplog.rs` (the journal) and a member's local documents
//! (`local.system.replset`, `local.replset.election`, ...), which readers see
//! as read-only collections (`storage/src/engine/local_view.rs`).
//!
//! None of them is in the catalog, so `drop` answered ok as for an absent
//! collection, and `collMod` or `dropIndexes` with nothing to change answered
//! ok too, while nothing happened. MongoDB refuses to drop or rename the
//! live oplog (IllegalOperation, "can't drop live oplog while replicating");
//! here every catalog change to any of them answers IllegalOperation (20),
//! never a success that did nothing. Writes of documents are refused
//! earlier, by the write commands' own namespace checks.

use bson::Bson;
use slipstream_storage::Engine;

use super::oplog_collection::OPLOG_NS;
use super::CommandRequest;
use crate::error::CommandError;

/// Commands whose first field names a collection of the request's database
/// that they create, drop, change or index.
const COLLECTION_COMMANDS: &[&str] = &[
    "create",
    "drop",
    "collMod",
    "createIndexes",
    "dropIndexes",
    "deleteIndexes",
    "convertToCapped",
    "cloneCollectionAsCapped",
];

/// IllegalOperation (20) when `request` would change an engine-owned
/// collection.
pub fn check(engine: &Engine, request: &CommandRequest) -> Result<(), CommandError> {
    for ns in targets(request) {
        if let Some(reason) = owner(engine, &ns) {
            return Err(CommandError::new(20, format!("{} cannot change '{ns}': {reason}", request.name)));
        }
    }
    Ok(())
}

/// The namespaces the command changes, as far as they can be engine-owned.
fn targets(request: &CommandRequest) -> Vec<String> {
    let text = |field: &str| match request.body.get(field) {
        Some(Bson::String(value)) => Some(value.clone()),
        _ => None,
    };
    if request.name == "renameCollection" {
        // Full namespaces, run on `admin`.
        return [text(&request.name), text("to")].into_iter().flatten().collect();
    }
    if !COLLECTION_COMMANDS.contains(&request.name.as_str()) {
        return Vec::new();
    }
    let mut names = vec![text(&request.name)];
    if request.name == "cloneCollectionAsCapped" {
        names.push(text("toCollection"));
    }
    names.into_iter().flatten().map(|name| format!("{}.{name}", request.db)).collect()
}

/// Why the engine keeps `ns`, if it does.
fn owner(engine: &Engine, ns: &str) -> Option<&'static str> {
    let name = ns.strip_prefix("local.")?;
    if ns == OPLOG_NS {
        return Some("the oplog is the storage engine's journal, which only the engine changes");
    }
    engine
        .local()
        .names()
        .iter()
        .any(|local| local == name)
        .then_some("it holds this member's replication state, which only the server writes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn request(db: &str, body: bson::Document) -> CommandRequest {
        let name = body.keys().next().cloned().unwrap_or_default();
        CommandRequest { db: db.to_string(), name, body, secondary_ok: false }
    }

    #[test]
    fn targets_name_the_collections_a_command_changes() {
        assert_eq!(targets(&request("local", doc! {"drop": "oplog.rs"})), vec!["local.oplog.rs"]);
        assert_eq!(
            targets(&request("local", doc! {"cloneCollectionAsCapped": "a", "toCollection": "b", "size": 1})),
            vec!["local.a", "local.b"]
        );
        assert_eq!(
            targets(&request("admin", doc! {"renameCollection": "local.oplog.rs", "to": "test.x"})),
            vec!["local.oplog.rs", "test.x"]
        );
        assert!(targets(&request("local", doc! {"find": "oplog.rs"})).is_empty());
        assert!(targets(&request("local", doc! {"drop": 5})).is_empty());
    }
}
