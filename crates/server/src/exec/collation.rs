//! Which collation a command runs under: its own `collation` argument, or
//! else the collection's default (`create`'s `collation`, kept in the
//! collection options as MongoDB fills it in).

use bson::{Bson, Document};
use slipstream_query::collation::{Collation, CollationRef};
use slipstream_storage::CollectionInfo;

use crate::error::CommandError;
use crate::exec::args::get_document;

/// The command's `collation` argument: `None` when it has none (the
/// collection default applies), `Some(None)` for `{locale: "simple"}`.
pub fn requested(body: &Document, command: &str) -> Result<Option<CollationRef>, CommandError> {
    match get_document(body, command, "collation")? {
        None => Ok(None),
        Some(collation) => Ok(Some(Collation::parse(collation)?)),
    }
}

/// The collection's default collation (`None`: simple, or no collection).
pub fn collection_default(info: Option<&CollectionInfo>) -> Result<CollationRef, CommandError> {
    match info {
        Some(info) => from_options(&info.options),
        None => Ok(None),
    }
}

/// The default collation kept in a collection's (or view's) options.
pub fn from_options(options: &Document) -> Result<CollationRef, CommandError> {
    match options.get("collation") {
        Some(Bson::Document(collation)) => Ok(Collation::parse(collation)?),
        _ => Ok(None),
    }
}

/// The collation a command uses: the requested one, else the collection's.
pub fn effective(
    requested: Option<&CollationRef>,
    info: Option<&CollectionInfo>,
) -> Result<CollationRef, CommandError> {
    match requested {
        Some(collation) => Ok(collation.clone()),
        None => collection_default(info),
    }
}

/// The collation an index gets: its own `collation` option (`simple`
/// included), else the collection's default; as the full document.
pub fn for_index(
    requested: Option<&Document>,
    info: Option<&CollectionInfo>,
) -> Result<Option<Document>, CommandError> {
    let collation = match requested {
        Some(collation) => Collation::parse(collation)?,
        None => collection_default(info)?,
    };
    Ok(collation.map(|collation| collation.to_document()))
}
