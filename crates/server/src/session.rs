//! The session arguments of a command (`lsid`, `txnNumber`,
//! `startTransaction`, `autocommit`) and what this node accepts of them,
//! checked in the order of MongoDB 7.0's `initializeOperationSessionInfo`:
//!
//! - `txnNumber` must be a 64-bit integer, `autocommit` and
//!   `startTransaction` booleans (TypeMismatch, 14);
//! - commands that need no authentication (`hello`, `ping`, `buildInfo`)
//!   take neither `autocommit` (263) nor `txnNumber` (50889);
//! - `txnNumber` needs `lsid` (InvalidOptions, 72); a standalone refuses
//!   it (IllegalOperation, 20), as MongoDB's does: executing the command
//!   without its retry guarantee would give the client other semantics;
//!   it must not be negative (72);
//! - `txnRetryCounter` with a `txnNumber` is for internal clients (72);
//! - `autocommit` needs `txnNumber` and may only be `false`;
//!   `startTransaction` needs `autocommit` and may only be `true` (72);
//! - multi-document transactions are not implemented yet: a member
//!   refuses them with CommandNotSupported (115);
//! - `txnNumber` alone marks a retryable write, which only the retryable
//!   write commands are (NotARetryableWriteCommand, 50768). The retryable
//!   write itself (answering a retry with the first attempt's outcome) is
//!   `sessions::begin` and `sessions::retryable`.

use bson::{Bson, Document};

use crate::commands::CommandSpec;
use crate::error::CommandError;

/// The transaction fields of a command body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionArguments {
    pub has_lsid: bool,
    pub txn_number: Option<i64>,
    /// `startTransaction`, when given.
    pub start_transaction: Option<bool>,
    /// `autocommit`, when given: only `false` starts or continues a
    /// transaction; MongoDB refuses `true`.
    pub autocommit: Option<bool>,
    /// `txnRetryCounter` was given: only internal clients may send it.
    pub has_txn_retry_counter: bool,
}

impl SessionArguments {
    pub fn of(body: &Document) -> Result<SessionArguments, CommandError> {
        let txn_number = match body.get("txnNumber") {
            None => None,
            Some(Bson::Int64(n)) => Some(*n),
            Some(other) => return Err(wrong_type("txnNumber", other, "long")),
        };
        Ok(SessionArguments {
            has_lsid: body.contains_key("lsid"),
            txn_number,
            start_transaction: flag(body, "startTransaction")?,
            autocommit: flag(body, "autocommit")?,
            has_txn_retry_counter: match body.get("txnRetryCounter") {
                None => false,
                Some(Bson::Int32(_)) => true,
                Some(other) => return Err(wrong_type("txnRetryCounter", other, "int")),
            },
        })
    }

    /// A retryable write: `txnNumber` without `autocommit` (MongoDB's
    /// rule for the RetryableWriteError label).
    pub fn is_retryable_write(&self) -> bool {
        self.txn_number.is_some() && self.autocommit.is_none()
    }
}

fn flag(body: &Document, name: &str) -> Result<Option<bool>, CommandError> {
    match body.get(name) {
        None => Ok(None),
        Some(Bson::Boolean(value)) => Ok(Some(*value)),
        Some(other) => Err(wrong_type(name, other, "bool")),
    }
}

fn wrong_type(name: &str, value: &Bson, expected: &str) -> CommandError {
    CommandError::type_mismatch(format!(
        "BSON field 'OperationSessionInfoFromClient.{name}' is the wrong type '{}', expected type '{expected}'",
        crate::exec::args::type_name(value)
    ))
}

/// Refuses the session arguments this node cannot honour, before anything
/// else about the command is looked at.
pub fn check(spec: &CommandSpec, session: &SessionArguments, is_replica_set: bool) -> Result<(), CommandError> {
    if spec.without_authentication {
        if session.autocommit.is_some() {
            return Err(CommandError::new(263, "This command is not supported in transactions"));
        }
        if session.txn_number.is_some() {
            return Err(CommandError::new(50889, "It is illegal to provide a txnNumber for this command"));
        }
    }
    match session.txn_number {
        Some(_) if !session.has_lsid => {
            return Err(invalid_options("Transaction number requires a session ID to also be specified"))
        }
        Some(_) if !is_replica_set => {
            return Err(CommandError::new(
                20,
                "Transaction numbers are only allowed on a replica set member or mongos",
            ))
        }
        Some(txn_number) if txn_number < 0 => return Err(invalid_options("Transaction number cannot be negative")),
        Some(_) if session.has_txn_retry_counter => {
            return Err(invalid_options("txnRetryCounter is only allowed for internal clients"))
        }
        Some(_) => {}
        None if session.autocommit.is_some() => {
            return Err(invalid_options("'autocommit' field requires a transaction number to also be specified"))
        }
        None => {}
    }
    match session.autocommit {
        Some(true) => return Err(invalid_options("Specifying autocommit=true is not allowed.")),
        Some(false) => {}
        None if session.start_transaction.is_some() => {
            return Err(invalid_options("'startTransaction' field requires 'autocommit' field to also be specified"))
        }
        None => {}
    }
    if session.start_transaction == Some(false) {
        return Err(invalid_options("Specifying startTransaction=false is not allowed."));
    }
    if session.autocommit.is_some() {
        return Err(CommandError::new(
            115,
            "multi-document transactions are not supported by Slipstream yet",
        ));
    }
    if session.txn_number.is_some() && !spec.retryable_write {
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

fn invalid_options(message: &str) -> CommandError {
    CommandError::new(72, message)
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
    fn a_standalone_refuses_transaction_numbers_after_the_argument_checks() {
        assert_eq!(code("insert", doc! {"lsid": {}, "txnNumber": 1_i64}, false), Some(20));
        assert_eq!(code("insert", doc! {"lsid": {}, "txnNumber": 1_i64, "autocommit": false}, false), Some(20));
        assert_eq!(code("insert", doc! {"txnNumber": 1_i64}, false), Some(72));
        assert_eq!(code("find", doc! {"startTransaction": true}, false), Some(72));
        assert_eq!(code("find", doc! {"autocommit": false}, false), Some(72));
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
        assert_eq!(code("find", txn(doc! {"autocommit": false}), true), Some(115));
        assert_eq!(code("find", txn(doc! {}), true), Some(50768));
        assert_eq!(code("insert", doc! {"txnNumber": 1_i64}, true), Some(72));
        assert_eq!(code("insert", doc! {"lsid": {}, "txnNumber": -1_i64}, true), Some(72));
        assert_eq!(code("find", doc! {"autocommit": false}, true), Some(72));
        assert_eq!(code("insert", txn(doc! {}), true), None);
        assert_eq!(code("find", doc! {"lsid": {}}, true), None);
        // MongoDB's argument checks before its transaction machinery.
        assert_eq!(code("insert", txn(doc! {"autocommit": true}), true), Some(72));
        assert_eq!(code("insert", txn(doc! {"startTransaction": true}), true), Some(72));
        assert_eq!(code("insert", txn(doc! {"autocommit": false, "startTransaction": false}), true), Some(72));
        assert!(SessionArguments::of(&txn(doc! {})).unwrap().is_retryable_write());
    }

    #[test]
    fn session_fields_have_mongodbs_types() {
        let of = |body: Document| SessionArguments::of(&body).err().map(|error| error.code);
        assert_eq!(of(doc! {"lsid": {}, "txnNumber": 3_i32}), Some(14));
        assert_eq!(of(doc! {"lsid": {}, "txnNumber": 3.0}), Some(14));
        assert_eq!(of(doc! {"autocommit": 1}), Some(14));
        assert_eq!(of(doc! {"startTransaction": 1}), Some(14));
        assert_eq!(of(doc! {"lsid": {}, "txnNumber": 3_i64, "autocommit": false}), None);
        assert_eq!(of(doc! {"lsid": {}, "txnNumber": 3_i64, "txnRetryCounter": "x"}), Some(14));
    }

    #[test]
    fn a_txn_retry_counter_is_for_internal_clients() {
        let body = doc! {"lsid": {}, "txnNumber": 3_i64, "txnRetryCounter": 0};
        assert_eq!(code("insert", body, true), Some(72));
    }

    #[test]
    fn commands_without_authentication_take_no_transaction_fields() {
        assert_eq!(code("hello", doc! {"autocommit": false}, true), Some(263));
        assert_eq!(code("ping", doc! {"lsid": {}, "txnNumber": 1_i64}, true), Some(50889));
        assert_eq!(code("ping", doc! {"lsid": {}}, true), None);
    }
}
