//! Write and read concern arguments as a command carries them, parsed for
//! syntax only. Whether a topology can honour them (`w: 3` on a standalone,
//! `linearizable` on a secondary) is the `Topology`'s decision.

use std::time::{Duration, Instant};

use bson::{Bson, Document};
use slipstream_clock::Timestamp;

use crate::error::ReplError;

/// The `w` of a write concern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum W {
    /// `w: N`: N data-bearing members (the primary included) have the write.
    Nodes(u32),
    /// `w: "majority"`: the write is committed.
    Majority,
    /// `w: "<tag set name>"`: a custom mode of the configuration.
    Tag(String),
}

/// A parsed write concern `{w, j, wtimeout}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteConcern {
    pub w: W,
    /// `j` (or the legacy `fsync`): wait for the journal. `None` when the
    /// client did not say; majority writes are journaled either way
    /// (`writeConcernMajorityJournalDefault`).
    pub journal: Option<bool>,
    /// `wtimeout` in milliseconds; 0 waits without limit, and a negative
    /// one ends the wait at once when the concern does not hold yet
    /// (MongoDB's deadline is `now + wtimeout`).
    pub wtimeout_ms: i64,
    /// True when the command carried no `writeConcern` (or no `w`), so the
    /// topology's default applies (`provenance: "implicitDefault"`).
    pub implicit: bool,
}

impl WriteConcern {
    /// `{w: 1}`.
    pub fn w1() -> WriteConcern {
        WriteConcern { w: W::Nodes(1), journal: None, wtimeout_ms: 0, implicit: false }
    }

    /// `{w: "majority"}`.
    pub fn majority() -> WriteConcern {
        WriteConcern { w: W::Majority, journal: None, wtimeout_ms: 0, implicit: false }
    }

    /// When a wait for this concern that starts at `from` gives up (None:
    /// never).
    pub fn wtimeout_deadline(&self, from: Instant) -> Option<Instant> {
        // One past what the clock can add is no limit either.
        (self.wtimeout_ms != 0)
            .then(|| from.checked_add(Duration::from_millis(self.wtimeout_ms.max(0) as u64)))
            .flatten()
    }

    /// Whether the write must be in the journal before the reply.
    pub fn needs_journal(&self) -> bool {
        self.journal == Some(true) || self.w == W::Majority
    }

    /// `w: 0`: the client wants no acknowledgement at all.
    pub fn is_unacknowledged(&self) -> bool {
        self.w == W::Nodes(0) && self.journal != Some(true)
    }

    /// Reads `writeConcern` from a command body: `Ok(None)` when absent, so
    /// that the caller applies its topology's default.
    pub fn parse(body: &Document) -> Result<Option<WriteConcern>, ReplError> {
        match body.get("writeConcern") {
            None | Some(Bson::Null) => Ok(None),
            Some(Bson::Document(spec)) => WriteConcern::parse_spec(spec).map(Some),
            Some(_) => Err(ReplError::type_mismatch("writeConcern must be an object")),
        }
    }

    /// Parses the `writeConcern` document itself. A document without `w`
    /// keeps the default `w` (`implicit`), with its `j` and `wtimeout`.
    /// As MongoDB 7.0's `WriteConcernIdl` (strict): an unknown field is
    /// refused (40415), `wElectionId`, `wOpTime` and `getLastError` are
    /// accepted and ignored, `provenance` must name a known source, `j`
    /// and `fsync` may not both be true, and `w` is at most 50 (the most
    /// members a set may have).
    pub fn parse_spec(spec: &Document) -> Result<WriteConcern, ReplError> {
        if let Some(key) = spec.keys().find(|key| !WRITE_CONCERN_FIELDS.contains(&key.as_str())) {
            return Err(ReplError::BadArgument {
                code: 40415,
                message: format!("BSON field 'WriteConcernOptions.{key}' is an unknown field."),
            });
        }
        let (w, implicit) = match spec.get("w") {
            None | Some(Bson::Null) => (W::Nodes(1), true),
            Some(Bson::String(mode)) if mode == "majority" => (W::Majority, false),
            Some(Bson::String(mode)) => (W::Tag(mode.clone()), false),
            Some(Bson::Document(_)) => {
                return Err(ReplError::CommandNotSupported(
                    "w as a document of tag counts is not supported: no member tags are evaluated".into(),
                ))
            }
            Some(value) => match truncated_number(value) {
                Some(n) if !(0..=W_NODES_MAX).contains(&n) => {
                    return Err(ReplError::failed_to_parse(format!(
                        "w has to be a non-negative number and not greater than {W_NODES_MAX}; found: {n}"
                    )))
                }
                Some(n) => (W::Nodes(n as u32), false),
                None => return Err(ReplError::failed_to_parse("w has to be a number or a string")),
            },
        };
        check_provenance(spec, "WriteConcernOptions")?;
        let journal = match (flag(spec, "j")?, flag(spec, "fsync")?) {
            (Some(true), Some(true)) => {
                return Err(ReplError::failed_to_parse("fsync and j options cannot be used together"))
            }
            (None, None) => None,
            (j, fsync) => Some(j.unwrap_or(false) || fsync.unwrap_or(false)),
        };
        let wtimeout_ms = match spec.get("wtimeout") {
            None | Some(Bson::Null) => 0,
            Some(value) => match truncated_number(value) {
                Some(ms) => ms,
                None => return Err(ReplError::failed_to_parse("wtimeout must be a number")),
            },
        };
        Ok(WriteConcern { w, journal, wtimeout_ms, implicit })
    }

    /// The concern as a reply's `errInfo.writeConcern` shows it.
    pub fn to_document(&self) -> Document {
        let mut doc = Document::new();
        match &self.w {
            W::Nodes(n) => doc.insert("w", i64::from(*n) as i32),
            W::Majority => doc.insert("w", "majority"),
            W::Tag(tag) => doc.insert("w", tag.clone()),
        };
        if let Some(journal) = self.journal {
            doc.insert("j", journal);
        }
        // An int as MongoDB shows it, a long when it does not fit.
        match i32::try_from(self.wtimeout_ms) {
            Ok(ms) => doc.insert("wtimeout", ms),
            Err(_) => doc.insert("wtimeout", self.wtimeout_ms),
        };
        doc.insert("provenance", if self.implicit { "implicitDefault" } else { "clientSupplied" });
        doc
    }
}

/// A number as MongoDB's `safeNumberLong` reads `w` and `wtimeout`: a
/// double is truncated (2.5 is 2), NaN is 0, and an out-of-range one is
/// clamped.
fn truncated_number(value: &Bson) -> Option<i64> {
    match value {
        Bson::Double(n) if n.is_nan() => Some(0),
        Bson::Double(n) => Some(n.trunc() as i64),
        other => integral(other),
    }
}

/// The fields of a `writeConcern` document (MongoDB 7.0's
/// `write_concern_options.idl`).
const WRITE_CONCERN_FIELDS: &[&str] =
    &["w", "j", "wtimeout", "fsync", "wElectionId", "wOpTime", "getLastError", "provenance"];

/// The largest numeric `w` (MongoDB's `ReplSetConfig::kMaxMembers`).
const W_NODES_MAX: i64 = 50;

/// The values of `provenance` (MongoDB's `ReadWriteConcernProvenanceSource`).
const PROVENANCE_SOURCES: &[&str] =
    &["clientSupplied", "implicitDefault", "customDefault", "getLastErrorDefaults", "internalWriteDefault"];

/// A concern document's `provenance`, if any, names one of
/// `PROVENANCE_SOURCES`.
fn check_provenance(spec: &Document, document: &str) -> Result<(), ReplError> {
    match spec.get("provenance") {
        None | Some(Bson::Null) => Ok(()),
        Some(Bson::String(source)) if PROVENANCE_SOURCES.contains(&source.as_str()) => Ok(()),
        Some(Bson::String(source)) => Err(ReplError::bad_value(format!(
            "Enumeration value '{source}' for field '{document}.provenance' is not a valid value."
        ))),
        Some(_) => Err(ReplError::type_mismatch(format!("{document}.provenance must be a string"))),
    }
}

/// The fields of a `readConcern` document a client may send.
/// `afterOpTime` (an internal, pre-4.0 field) is not among them: it would
/// be ignored here.
const READ_CONCERN_FIELDS: &[&str] = &["level", "afterClusterTime", "atClusterTime", "provenance"];

/// `readConcern.level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadConcernLevel {
    Local,
    Available,
    Majority,
    Linearizable,
    Snapshot,
}

impl ReadConcernLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            ReadConcernLevel::Local => "local",
            ReadConcernLevel::Available => "available",
            ReadConcernLevel::Majority => "majority",
            ReadConcernLevel::Linearizable => "linearizable",
            ReadConcernLevel::Snapshot => "snapshot",
        }
    }
}

/// A parsed `readConcern {level, afterClusterTime, atClusterTime}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadConcernArgs {
    /// `None`: the client gave no level (the default, `local`).
    pub level: Option<ReadConcernLevel>,
    /// Causal sessions: read a state at least this new.
    pub after_cluster_time: Option<Timestamp>,
    /// Snapshot reads: read exactly this state.
    pub at_cluster_time: Option<Timestamp>,
}

impl ReadConcernArgs {
    /// The level in force (`local` when none was given).
    pub fn effective_level(&self) -> ReadConcernLevel {
        self.level.unwrap_or(ReadConcernLevel::Local)
    }

    /// Reads `readConcern` from a command body (absent: the default).
    pub fn parse(body: &Document) -> Result<ReadConcernArgs, ReplError> {
        let spec = match body.get("readConcern") {
            None | Some(Bson::Null) => return Ok(ReadConcernArgs::default()),
            Some(Bson::Document(spec)) => spec,
            Some(_) => return Err(ReplError::type_mismatch("readConcern must be an object")),
        };
        // MongoDB 7.0's `ReadConcernArgs::parse` refuses the rest so.
        if let Some(key) = spec.keys().find(|key| !READ_CONCERN_FIELDS.contains(&key.as_str())) {
            return Err(ReplError::invalid_options(format!("Unrecognized option in readConcern: {key}")));
        }
        check_provenance(spec, "readConcern")?;
        let timestamp = |name: &str| -> Result<Option<Timestamp>, ReplError> {
            match spec.get(name) {
                None | Some(Bson::Null) => Ok(None),
                Some(Bson::Timestamp(ts)) => Ok(Some(Timestamp::new(ts.time, ts.increment))),
                Some(_) => Err(ReplError::type_mismatch(format!("{name} must be a timestamp"))),
            }
        };
        let after_cluster_time = timestamp("afterClusterTime")?;
        let at_cluster_time = timestamp("atClusterTime")?;
        // A null level is a wrong type, as MongoDB's bsonExtractStringField
        // reads it (14), not an absent one.
        let level = match spec.get("level") {
            None => None,
            Some(Bson::String(level)) => Some(match level.as_str() {
                "local" => ReadConcernLevel::Local,
                "available" => ReadConcernLevel::Available,
                "majority" => ReadConcernLevel::Majority,
                "linearizable" => ReadConcernLevel::Linearizable,
                "snapshot" => ReadConcernLevel::Snapshot,
                other => return Err(ReplError::failed_to_parse(format!("readConcern level '{other}' is not valid"))),
            }),
            Some(_) => return Err(ReplError::type_mismatch("readConcern.level must be a string")),
        };
        let args = ReadConcernArgs { level, after_cluster_time, at_cluster_time };
        args.check_combination()?;
        Ok(args)
    }

    /// The combinations MongoDB refuses whatever the topology.
    fn check_combination(&self) -> Result<(), ReplError> {
        let level = self.effective_level();
        if self.at_cluster_time.is_some() && level != ReadConcernLevel::Snapshot {
            return Err(ReplError::invalid_options(
                "readConcern.atClusterTime is only valid with readConcern level snapshot",
            ));
        }
        if self.at_cluster_time.is_some() && self.after_cluster_time.is_some() {
            return Err(ReplError::invalid_options(
                "Specifying a timestamp for readConcern snapshot in a causally consistent session is not allowed",
            ));
        }
        let causal_levels = [ReadConcernLevel::Local, ReadConcernLevel::Majority, ReadConcernLevel::Snapshot];
        if self.after_cluster_time.is_some() && !causal_levels.contains(&level) {
            return Err(ReplError::invalid_options(
                "afterClusterTime field can be set only if level is equal to majority, local, or snapshot",
            ));
        }
        if self.after_cluster_time.is_some_and(|ts| ts.is_zero()) {
            return Err(ReplError::invalid_options("afterClusterTime cannot be a null timestamp"));
        }
        if self.at_cluster_time.is_some_and(|ts| ts.is_zero()) {
            return Err(ReplError::invalid_options("atClusterTime cannot be a null timestamp"));
        }
        Ok(())
    }
}

/// An integral BSON number (int32, int64, or a double without fraction).
fn integral(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.fract() == 0.0 && f.is_finite() => Some(*f as i64),
        Bson::Decimal128(_) => None,
        _ => None,
    }
}

/// A boolean option that old clients also send as a number.
fn flag(spec: &Document, name: &str) -> Result<Option<bool>, ReplError> {
    match spec.get(name) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(Bson::Int32(n)) => Ok(Some(*n != 0)),
        Some(Bson::Int64(n)) => Ok(Some(*n != 0)),
        Some(Bson::Double(f)) => Ok(Some(*f != 0.0)),
        Some(_) => Err(ReplError::failed_to_parse(format!("{name} must be a boolean"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn code(err: ReplError) -> i32 {
        match err {
            ReplError::BadArgument { code, .. } => code,
            other => panic!("not an argument error: {other:?}"),
        }
    }

    #[test]
    fn write_concern_forms() {
        assert_eq!(WriteConcern::parse(&doc! {}).unwrap(), None);
        let majority =
            WriteConcern::parse(&doc! {"writeConcern": {"w": "majority", "wtimeout": 500}}).unwrap().unwrap();
        assert_eq!(majority.w, W::Majority);
        assert_eq!(majority.wtimeout_ms, 500);
        assert!(majority.needs_journal());
        let j = WriteConcern::parse(&doc! {"writeConcern": {"w": 2.0, "j": 1}}).unwrap().unwrap();
        assert_eq!((j.w, j.journal), (W::Nodes(2), Some(true)));
        let only_j = WriteConcern::parse(&doc! {"writeConcern": {"j": true}}).unwrap().unwrap();
        assert!(only_j.implicit);
        let tag = WriteConcern::parse(&doc! {"writeConcern": {"w": "dc1"}}).unwrap().unwrap();
        assert_eq!(tag.w, W::Tag("dc1".into()));
        assert!(WriteConcern::parse(&doc! {"writeConcern": {"w": 0}}).unwrap().unwrap().is_unacknowledged());
        // MongoDB's deadline is now + wtimeout: a negative one has passed.
        let now = Instant::now();
        let negative = WriteConcern::parse(&doc! {"writeConcern": {"w": 2, "wtimeout": -5}}).unwrap().unwrap();
        assert_eq!(negative.wtimeout_deadline(now), Some(now));
        assert_eq!(majority.wtimeout_deadline(now), Some(now + Duration::from_millis(500)));
        assert_eq!(WriteConcern::majority().wtimeout_deadline(now), None);
        let huge = WriteConcern::parse(&doc! {"writeConcern": {"w": 2, "wtimeout": i64::MAX}}).unwrap().unwrap();
        assert!(huge.wtimeout_deadline(now).is_none_or(|deadline| deadline > now));
        assert_eq!(huge.to_document().get_i64("wtimeout").unwrap(), i64::MAX);
    }

    #[test]
    fn write_concern_errors() {
        assert_eq!(code(WriteConcern::parse(&doc! {"writeConcern": 1}).unwrap_err()), 14);
        assert_eq!(code(WriteConcern::parse(&doc! {"writeConcern": {"w": -1}}).unwrap_err()), 9);
        // A double is truncated, as MongoDB's `safeNumberLong` reads it.
        let truncated = WriteConcern::parse(&doc! {"writeConcern": {"w": 1.5, "wtimeout": 2.9}}).unwrap().unwrap();
        assert_eq!((truncated.w, truncated.wtimeout_ms), (W::Nodes(1), 2));
        let tags = WriteConcern::parse(&doc! {"writeConcern": {"w": {"dc": 1}}}).unwrap_err();
        assert!(matches!(tags, ReplError::CommandNotSupported(_)), "{tags:?}");
        assert_eq!(code(WriteConcern::parse(&doc! {"writeConcern": {"j": "yes"}}).unwrap_err()), 9);
        assert_eq!(code(WriteConcern::parse(&doc! {"writeConcern": {"wtimeout": "x"}}).unwrap_err()), 9);
        // As MongoDB 7.0's strict WriteConcernIdl.
        let unknown = WriteConcern::parse(&doc! {"writeConcern": {"w": 1, "foo": 1}}).unwrap_err();
        assert_eq!(unknown.to_string(), "BSON field 'WriteConcernOptions.foo' is an unknown field.");
        assert_eq!(code(unknown), 40415);
        let both = WriteConcern::parse(&doc! {"writeConcern": {"w": 1, "j": true, "fsync": true}}).unwrap_err();
        assert_eq!(both.to_string(), "fsync and j options cannot be used together");
        assert_eq!(code(WriteConcern::parse(&doc! {"writeConcern": {"w": 51}}).unwrap_err()), 9);
        assert_eq!(code(WriteConcern::parse(&doc! {"writeConcern": {"provenance": "mine"}}).unwrap_err()), 2);
        // Accepted: the legacy fields MongoDB ignores, a known provenance,
        // j and fsync when not both true, w up to 50.
        let legacy = doc! {"writeConcern": {"w": 50, "wElectionId": 1, "wOpTime": 2, "getLastError": 1,
                                             "provenance": "clientSupplied", "j": false, "fsync": true}};
        let parsed = WriteConcern::parse(&legacy).unwrap().unwrap();
        assert_eq!((parsed.w, parsed.journal), (W::Nodes(50), Some(true)));
    }

    #[test]
    fn read_concern_forms() {
        assert_eq!(ReadConcernArgs::parse(&doc! {}).unwrap(), ReadConcernArgs::default());
        let ts = bson::Timestamp { time: 5, increment: 1 };
        let causal = ReadConcernArgs::parse(&doc! {"readConcern": {"afterClusterTime": ts}}).unwrap();
        assert_eq!(causal.after_cluster_time, Some(Timestamp::new(5, 1)));
        assert_eq!(causal.effective_level(), ReadConcernLevel::Local);
        let snapshot =
            ReadConcernArgs::parse(&doc! {"readConcern": {"level": "snapshot", "atClusterTime": ts}}).unwrap();
        assert_eq!(snapshot.at_cluster_time, Some(Timestamp::new(5, 1)));
    }

    #[test]
    fn read_concern_errors() {
        let ts = bson::Timestamp { time: 5, increment: 1 };
        assert_eq!(code(ReadConcernArgs::parse(&doc! {"readConcern": {"level": "bogus"}}).unwrap_err()), 9);
        let unknown = ReadConcernArgs::parse(&doc! {"readConcern": {"level": "local", "foo": 1}}).unwrap_err();
        assert_eq!(unknown.to_string(), "Unrecognized option in readConcern: foo");
        assert_eq!(code(unknown), 72);
        let after_op_time = doc! {"readConcern": {"afterOpTime": {"ts": ts, "t": 1_i64}}};
        assert_eq!(code(ReadConcernArgs::parse(&after_op_time).unwrap_err()), 72);
        assert_eq!(code(ReadConcernArgs::parse(&doc! {"readConcern": {"provenance": "x"}}).unwrap_err()), 2);
        ReadConcernArgs::parse(&doc! {"readConcern": {"level": "majority", "provenance": "clientSupplied"}}).unwrap();
        assert_eq!(code(ReadConcernArgs::parse(&doc! {"readConcern": {"level": 1}}).unwrap_err()), 14);
        assert_eq!(code(ReadConcernArgs::parse(&doc! {"readConcern": {"level": null}}).unwrap_err()), 14);
        assert_eq!(code(ReadConcernArgs::parse(&doc! {"readConcern": {"atClusterTime": ts}}).unwrap_err()), 72);
        // afterClusterTime only with local, majority or snapshot.
        for level in ["linearizable", "available"] {
            let args = doc! {"readConcern": {"level": level, "afterClusterTime": ts}};
            assert_eq!(code(ReadConcernArgs::parse(&args).unwrap_err()), 72, "{level}");
        }
        for level in ["local", "majority", "snapshot"] {
            ReadConcernArgs::parse(&doc! {"readConcern": {"level": level, "afterClusterTime": ts}}).unwrap();
        }
    }
}
