//! What the engine does once durability can no longer be promised: a write
//! or fsync of the journal or the checkpoint failed, or a thread that makes
//! data durable panicked.
//!
//! After a failed fsync the kernel may have dropped the dirty pages, so a
//! retry could report success for data that is gone, and the state in
//! memory may hold writes that will not survive a restart. Serving on
//! would show clients such writes (and leave `j: true` writers waiting for
//! an fsync that never comes, if the thread died). MongoDB stops the
//! process instead (an `fassert` on a storage engine panic), so that a
//! supervisor restarts it and recovery begins from what is on disk. The
//! default policy does the same: log the cause, then `abort`.

/// What happens when the journal or a checkpoint fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PoisonPolicy {
    /// Log the cause (an error event with the reason) and abort the
    /// process. What a node must do.
    #[default]
    AbortProcess,
    /// Keep the process alive and refuse every later call that needs the
    /// failed part with `StorageError::Poisoned`. Reads of the versioned
    /// store still answer, including writes that will vanish on restart,
    /// so this is only for tests that inspect a failure in-process.
    RefuseLaterCalls,
}

/// The part of the engine that failed, for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FailedPart {
    Journal,
    Checkpoint,
    /// A durable local document (a vote, a config).
    LocalStore,
}

impl PoisonPolicy {
    /// Logs the failure; under `AbortProcess` the process ends here.
    /// Callers mark their state poisoned after it returns.
    pub(crate) fn on_failure(self, part: FailedPart, reason: &str) {
        let aborting = self == PoisonPolicy::AbortProcess;
        match part {
            FailedPart::Journal => tracing::error!(
                target: "journal",
                error = %reason,
                aborting,
                "the journal failed: durability can no longer be promised"
            ),
            FailedPart::Checkpoint => tracing::error!(
                target: "storage",
                error = %reason,
                aborting,
                "a checkpoint failed: durability can no longer be promised"
            ),
            FailedPart::LocalStore => tracing::error!(
                target: "storage",
                error = %reason,
                aborting,
                "writing a local document failed: durability can no longer be promised"
            ),
        }
        if aborting {
            // The process restarts from what is durable; nothing in memory
            // may be trusted or served any more (MongoDB's fassert).
            std::process::abort();
        }
    }
}

/// The message of a caught panic, for the log.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        return (*message).to_string();
    }
    if let Some(message) = payload.downcast_ref::<String>() {
        return message.clone();
    }
    "a panic without a message".to_string()
}
