//! A logical session id as the server keys it.
//!
//! Drivers send `lsid: {id: UUID}`; the server completes it with `uid`, the
//! SHA-256 of the authenticated user's name, as MongoDB does. Slipstream
//! has no authentication, so every session belongs to the anonymous user,
//! whose `uid` is the SHA-256 of the empty string (the value MongoDB shows
//! for sessions of a server without access control). The completed
//! document `{id, uid}` is the session's key everywhere: the catalog, the
//! `config.transactions` record and the oplog entries, so that every
//! member names a session alike.

use bson::{spec::BinarySubtype, Binary, Bson, Document};

use crate::error::CommandError;

/// SHA-256 of the empty string: the `uid` of the anonymous user.
pub const ANONYMOUS_UID: [u8; 32] = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41,
    0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

/// Bytes of a `uid` (a SHA-256 digest).
pub const UID_BYTES: usize = 32;

/// The anonymous user's `uid` as BSON.
pub fn anonymous_uid() -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes: ANONYMOUS_UID.to_vec(),
    })
}

/// Parses a session id (`{id: UUID, uid?: BinData}`) into its key
/// `{id, uid}`; other fields are refused, as MongoDB's parser does.
pub fn parse(value: &Bson) -> Result<Document, CommandError> {
    let Bson::Document(lsid) = value else {
        return Err(CommandError::type_mismatch(
            "BSON field 'lsid' is the wrong type, expected type 'object'",
        ));
    };
    let id = match lsid.get("id") {
        Some(Bson::Binary(binary)) if binary.subtype == BinarySubtype::Uuid && binary.bytes.len() == 16 => {
            Bson::Binary(binary.clone())
        }
        Some(_) => return Err(CommandError::type_mismatch("BSON field 'lsid.id' must be a UUID")),
        None => {
            return Err(CommandError::new(
                40414,
                "BSON field 'LogicalSessionId.id' is missing but a required field",
            ))
        }
    };
    let uid = match lsid.get("uid") {
        None => anonymous_uid(),
        Some(Bson::Binary(binary)) if binary.bytes.len() == UID_BYTES => Bson::Binary(binary.clone()),
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "BSON field 'lsid.uid' must be a 32-byte digest",
            ))
        }
    };
    if let Some(field) = lsid.keys().find(|key| !matches!(key.as_str(), "id" | "uid")) {
        return Err(CommandError::new(
            40415,
            format!("BSON field 'LogicalSessionId.{field}' is an unknown field."),
        ));
    }
    let mut key = Document::new();
    key.insert("id", id);
    key.insert("uid", uid);
    Ok(key)
}

/// The key of a session in maps: the BSON bytes of its `{id, uid}`.
pub fn map_key(lsid: &Document) -> Vec<u8> {
    let mut bytes = Vec::new();
    lsid.to_writer(&mut bytes).expect("a session id serializes");
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Uuid};

    #[test]
    fn a_driver_lsid_is_completed_with_the_anonymous_uid() {
        let id = Uuid::new();
        let key = parse(&Bson::Document(doc! {"id": id})).unwrap();
        assert_eq!(key.keys().collect::<Vec<_>>(), vec!["id", "uid"]);
        assert_eq!(key.get("uid"), Some(&anonymous_uid()));
        assert_eq!(parse(&Bson::Document(key.clone())).unwrap(), key);
        assert_eq!(
            map_key(&key),
            map_key(&parse(&Bson::Document(doc! {"id": id})).unwrap())
        );
    }

    #[test]
    fn malformed_ids_are_refused() {
        assert_eq!(parse(&Bson::Int32(1)).unwrap_err().code, 14);
        assert_eq!(parse(&Bson::Document(doc! {})).unwrap_err().code, 40414);
        assert_eq!(parse(&Bson::Document(doc! {"id": 5})).unwrap_err().code, 14);
        let extra = doc! {"id": Uuid::new(), "x": 1};
        assert_eq!(parse(&Bson::Document(extra)).unwrap_err().code, 40415);
    }
}
