//! Feeds arbitrary bytes to the raw-bytes nesting check: it must never
//! panic or read outside the slice, and whatever it lets through must
//! decode (if it decodes at all) to a document no deeper than the limit,
//! so that no nesting can hide in bytes the check skipped.
#![no_main]

use bson::{Bson, Document, RawDocument};
use libfuzzer_sys::fuzz_target;
use slipstream_wire::check_nesting_depth;

/// The deepest container below `document`, counted as the check counts
/// (a code-with-scope value is two levels); iterative.
fn depth(document: &Document) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Bson, usize)> = document.values().map(|value| (value, 1)).collect();
    while let Some((value, level)) = stack.pop() {
        let (children, levels): (Vec<&Bson>, usize) = match value {
            Bson::Document(inner) => (inner.values().collect(), 1),
            Bson::Array(items) => (items.iter().collect(), 1),
            Bson::JavaScriptCodeWithScope(code) => (code.scope.values().collect(), 2),
            _ => continue,
        };
        deepest = deepest.max(level + levels - 1);
        stack.extend(children.into_iter().map(|child| (child, level + levels)));
    }
    deepest
}

fuzz_target!(|data: &[u8]| {
    let Some((&limit, bytes)) = data.split_first() else { return };
    let limit = usize::from(limit % 8);
    if check_nesting_depth(bytes, limit).is_ok() {
        let decoded = RawDocument::from_bytes(bytes).ok().and_then(|raw| Document::try_from(raw).ok());
        if let Some(document) = decoded {
            assert!(depth(&document) <= limit, "a document deeper than {limit} passed");
        }
    }
});
