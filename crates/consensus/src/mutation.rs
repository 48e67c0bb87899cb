//! Deliberate defects that unit tests switch on, one thread at a time, to
//! show that the simulator catches them: a check that has never been seen
//! to fail proves nothing. Outside `cfg(test)` every defect is off and
//! `on` is a constant `false`, so the product never contains one.

/// A defect a test can switch on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mutation {
    /// A granted vote is made durable after the reply that grants it, not
    /// before (Raft: "updated on stable storage before responding").
    VotePersistedAfterReply,
    /// Seed 000's rule (section 3.2.1): roll back against any source whose
    /// branch is newer, without proof that no committed entry is removed.
    BareRollbackRule,
    /// The rollback rule before lasting partial partitions were simulated:
    /// only a source whose commit point lies past the common point, or the
    /// primary of our term, proves a rollback safe.
    RollbackRuleWithoutSourceTerm,
    /// The checker skips `DurableBeforeSend`, so that a test can measure what
    /// the crash model alone finds.
    UncheckedSendOrder,
    /// Safe reconfig as MongoDB has it, without rule 4 of `reconfig.rs`: in
    /// a set whose data-bearing voters are fewer than a majority, a member
    /// gains a vote without holding the commit point.
    NewVoterWithoutCommitPoint,
    /// Without rule 5 of `reconfig.rs`: such a set's primary commits under
    /// a configuration that is not committed yet.
    CommitInUncommittedConfig,
    /// Safe reconfig without rule 1 of `reconfig.rs`: a new configuration
    /// replaces one that a majority does not hold yet.
    ReconfigBeforeConfigCommitted,
}

/// Every mutation, for tools that pick them by name.
#[cfg(test)]
pub(crate) const ALL: [Mutation; 7] = [
    Mutation::VotePersistedAfterReply,
    Mutation::BareRollbackRule,
    Mutation::RollbackRuleWithoutSourceTerm,
    Mutation::UncheckedSendOrder,
    Mutation::NewVoterWithoutCommitPoint,
    Mutation::CommitInUncommittedConfig,
    Mutation::ReconfigBeforeConfigCommitted,
];

#[cfg(test)]
thread_local! {
    static ACTIVE: std::cell::RefCell<Vec<Mutation>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// True if `mutation` is switched on for this thread (never outside tests).
#[cfg(not(test))]
pub(crate) fn on(_mutation: Mutation) -> bool {
    false
}

/// True if `mutation` is switched on for this thread.
#[cfg(test)]
pub(crate) fn on(mutation: Mutation) -> bool {
    ACTIVE.with(|active| active.borrow().contains(&mutation))
}

/// Runs `f` with `mutations` switched on for this thread, then off again
/// (also when `f` panics, so that one test cannot leak into the next).
#[cfg(test)]
pub(crate) fn with<T>(mutations: &[Mutation], f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ACTIVE.with(|active| active.borrow_mut().clear());
        }
    }
    ACTIVE.with(|active| *active.borrow_mut() = mutations.to_vec());
    let _reset = Reset;
    f()
}
