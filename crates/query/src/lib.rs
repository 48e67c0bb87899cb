//! The query language of Slipstream: BSON comparison order, dotted paths
//! with MongoDB's array semantics, filter matching, projection, sort,
//! update operators (and their idempotent oplog form), index key
//! generation, plan selection, the aggregation pipeline and the rules
//! for documents being stored.
//!
//! This crate is pure: no I/O, no clocks except where a caller passes the
//! current time in, no threads. It must not depend on storage, networking
//! or the server; those crates depend on it.

pub mod aggregate;
pub mod collation;
pub mod compare;
pub mod depth;
pub mod error;
pub mod expr;
pub mod filter;
pub mod index_key;
pub mod json_schema;
pub mod path;
pub mod pcre;
mod pcre_pattern;
pub mod planner;
pub mod projection;
pub mod quantile;
pub mod sort;
pub mod update;
pub mod validate;

pub use error::QueryError;
