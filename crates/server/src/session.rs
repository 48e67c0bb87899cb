//! The session arguments of a command (`lsid`, `txnNumber`,
//! `startTransaction`, `autocommit`) and what this node accepts of them.
//!
//! - A standalone refuses all three transaction fields with
//!   IllegalOperation (20), as MongoDB's standalone does: executing the
//!   command without its transaction would give the client other semantics.
//! - A replica set member refuses multi-document transactions
//!   (`startTransaction` / `autocommit`) with CommandNotSupported (115):
//!   they are not implemented yet. `txnNumber` alone marks a retryable
//!   write: it needs `lsid` (InvalidOptions, 72), must not be negative
//!   (BadValue, 2), and only the retryable write commands take it
//!   (NotARetryableWriteCommand, 50768). The retryable write itself
//!   (answering a retry with the first attempt's outcome) is
//!   `sessions::begin` and `sessions::retryable`.

use bson::{Bson, Document};

use crate::commands::CommandSpec;
use crate::error::CommandError;

/// The transaction fields of a command body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionArguments {
    pub has_lsid: bool,
    pub txn_number: Option<i64>,
    pub start_transaction: bool,
    /// `autocommit`, when given: only `false` starts or continues a
    /// transaction; MongoDB refuses `true`.
    pub autocommit: Option<bool>,
}

impl SessionArguments {
    pub fn of(body: &Document) -> Result<SessionArguments, CommandError> {
        let txn_number = match body.get("txnNumber") {
            None => None,
            Some(Bson::Int64(n)) => Some(*n),
            Some(Bson::Int32(n)) => Some(i64::from(*n)),
            Some(_) => return Err(CommandError::type_mismatch("txnNumber must be a 64-bit integer")),
        };
        let autocommit = match body.get("autocommit") {
            None => None,
            Some(Bson::Boolean(autocommit)) => Some(*autocommit),
            Some(_) => return Err(CommandError::type_mismatch("autocommit must be a boolean")),
        };
        Ok(SessionArguments {
            has_lsid: body.contains_key("lsid"),
            txn_number,
            start_transaction: body.contains_key("startTransaction"),
            autocommit,
        })
    }

    /// A retryable write: `txnNumber` without `autocommit` (MongoDB's
    /// rule for the RetryableWriteError label).
    pub fn is_retryable_write(&self) -> bool {
        self.txn_number.is_some() && self.autocommit.is_none()
    }

    fn is_transaction(&self) -> bool {
        self.start_transaction || self.autocommit.is_some()
    }
}

/// Refuses the session arguments this node cannot honour, before anything
/// else about the command is looked at.
pub fn check(spec: &CommandSpec, session: &SessionArguments, is_replica_set: bool) -> Result<(), CommandError> {
    if !is_replica_set {
        if session.txn_number.is_some() || session.is_transaction() {
            return Err(CommandError::new(
                20,
                "Transaction numbers are only allowed on a replica set member or mongos",
            ));
        }
        return Ok(());
    }
    let Some(txn_number) = session.txn_number else {
        if session.autocommit.is_some() {
            return Err(CommandError::new(
                72,
                "'autocommit' field requires a transaction number to also be specified",
            ));
        }
        if session.start_transaction {
            return Err(CommandError::new(
                72,
                "'startTransaction' field requires 'autocommit' field to also be specified",
            ));
        }
        return Ok(());
    };
    if !session.has_lsid {
        return Err(CommandError::new(
            72,
            "Transaction number requires a session ID to also be specified",
        ));
    }
    if txn_number < 0 {
        return Err(CommandError::bad_value("Transaction number cannot be negative"));
    }
    // MongoDB's argument checks come before its transaction machinery.
    if session.autocommit == Some(true) {
        return Err(CommandError::new(72, "Specifying autocommit=true is not allowed."));
    }
    if session.start_transaction && session.autocommit.is_none() {
        return Err(CommandError::new(
            72,
            "'startTransaction' field requires 'autocommit' field to also be specified",
        ));
    }
    if session.is_transaction() {
        return Err(CommandError::new(
            115,
            "multi-document transactions are not supported by Slipstream yet",
        ));
    }
    if !spec.retryable_write {
        return Err(CommandError::new(
            50768,
            format!(
                "txnNumber may only be provided for multi-document transactions and retryable write commands. \
                 autocommit:false was not provided, and {} is not a retryable write command.",
                spec.name
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::find_command;
    use bson::doc;

    fn code(name: &str, body: Document, is_replica_set: bool) -> Option<i32> {
        let session = SessionArguments::of(&body).unwrap();
        check(find_command(name, false).unwrap(), &session, is_replica_set)
            .err()
            .map(|error| error.code)
    }

    #[test]
    fn a_standalone_refuses_every_transaction_field() {
        assert_eq!(code("insert", doc! {"lsid": {}, "txnNumber": 1_i64}, false), Some(20));
        assert_eq!(code("find", doc! {"startTransaction": true}, false), Some(20));
        assert_eq!(code("find", doc! {"autocommit": false}, false), Some(20));
        assert_eq!(code("find", doc! {"lsid": {}}, false), None);
    }

    #[test]
    fn a_member_refuses_transactions_and_non_retryable_txn_numbers() {
        let txn = |extra: Document| {
            let mut body = doc! {"lsid": {}, "txnNumber": 3_i64};
            body.extend(extra);
            body
        };
        assert_eq!(
            code(
                "insert",
                txn(doc! {"autocommit": false, "startTransaction": true}),
                true
            ),
            Some(115)
        );
        assert_eq!(code("find", txn(doc! {}), true), Some(50768));
        assert_eq!(code("insert", doc! {"txnNumber": 1_i64}, true), Some(72));
        assert_eq!(code("insert", doc! {"lsid": {}, "txnNumber": -1_i64}, true), Some(2));
        assert_eq!(code("find", doc! {"autocommit": false}, true), Some(72));
        assert_eq!(code("insert", txn(doc! {}), true), None);
        assert_eq!(code("find", doc! {"lsid": {}}, true), None);
        // MongoDB's argument checks before its transaction machinery.
        assert_eq!(code("insert", txn(doc! {"autocommit": true}), true), Some(72));
        assert_eq!(code("insert", txn(doc! {"startTransaction": true}), true), Some(72));
        assert_eq!(SessionArguments::of(&txn(doc! {"autocommit": 1})).unwrap_err().code, 14);
        assert!(SessionArguments::of(&txn(doc! {})).unwrap().is_retryable_write());
    }
}
