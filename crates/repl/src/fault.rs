//! The test-only fault hook: which members this node must not talk to.
//!
//! With `--enable-test-commands`, `configureFailPoint: "blockMembers"` fills
//! the blocklist (`mode: "alwaysOn", data: {hosts: ["h:p", ...]}`) and
//! `mode: "off"` empties it. Two parts of a node consult the one shared
//! list, so that traffic with a blocked member stops in both directions:
//! the server closes (and keeps refusing) any connection whose handshake
//! named a blocked member (`slipstreamMember`), and the replication network
//! refuses to send to one. Driver connections never name a member, so a
//! test can still reach an isolated node.

use std::collections::BTreeSet;

use parking_lot::RwLock;
use tokio::sync::watch;

/// The most hosts one `blockMembers` may name: a replica set has at most
/// 50 members.
pub const BLOCKED_MEMBERS_MAX: usize = 50;

/// The blocked members of this node, shared by the server and the
/// replication network.
pub struct MemberBlocklist {
    /// `host:port` names. Written only by `configureFailPoint`; read on
    /// every message of a member's connection (an uncontended read lock).
    hosts: RwLock<BTreeSet<String>>,
    /// Bumped on every change, so that connections waiting for their
    /// member to be blocked look again.
    generation: watch::Sender<u64>,
}

impl Default for MemberBlocklist {
    fn default() -> Self {
        MemberBlocklist {
            hosts: RwLock::new(BTreeSet::new()),
            generation: watch::channel(0).0,
        }
    }
}

/// A blocklist with more hosts than a replica set has members.
#[derive(Debug, PartialEq, Eq)]
pub struct TooManyBlockedMembers(pub usize);

impl MemberBlocklist {
    /// Replaces the blocked hosts.
    pub fn block(&self, hosts: Vec<String>) -> Result<(), TooManyBlockedMembers> {
        if hosts.len() > BLOCKED_MEMBERS_MAX {
            return Err(TooManyBlockedMembers(hosts.len()));
        }
        *self.hosts.write() = hosts.into_iter().collect();
        self.generation.send_modify(|generation| *generation += 1);
        Ok(())
    }

    /// Heals: no member is blocked any more.
    pub fn clear(&self) {
        self.hosts.write().clear();
        self.generation.send_modify(|generation| *generation += 1);
    }

    pub fn is_blocked(&self, host: &str) -> bool {
        self.hosts.read().contains(host)
    }

    /// The blocked hosts, in order (for replies and logs).
    pub fn hosts(&self) -> Vec<String> {
        self.hosts.read().iter().cloned().collect()
    }

    /// Resolves once `host` is blocked (at once if it already is).
    pub async fn wait_until_blocked(&self, host: &str) {
        // Subscribed before the first look, so that a change between the
        // look and the wait still wakes the wait.
        let mut changes = self.generation.subscribe();
        loop {
            if self.is_blocked(host) {
                return;
            }
            // The sender lives as long as `self`, so `changed` only fails
            // if the list is gone, in which case nothing can block `host`.
            if changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn block_replaces_and_clear_heals() {
        let list = MemberBlocklist::default();
        list.block(vec!["a:1".into(), "b:2".into()]).unwrap();
        assert!(list.is_blocked("a:1") && list.is_blocked("b:2"));
        list.block(vec!["b:2".into()]).unwrap();
        assert!(!list.is_blocked("a:1"));
        assert_eq!(list.hosts(), vec!["b:2".to_owned()]);
        list.clear();
        assert!(!list.is_blocked("b:2"));
        let too_many = (0..=BLOCKED_MEMBERS_MAX).map(|i| format!("h:{i}")).collect();
        assert_eq!(
            list.block(too_many),
            Err(TooManyBlockedMembers(BLOCKED_MEMBERS_MAX + 1))
        );
    }

    #[test]
    fn a_waiter_wakes_when_its_host_is_blocked() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let list = Arc::new(MemberBlocklist::default());
            let waiter = {
                let list = list.clone();
                tokio::spawn(async move { list.wait_until_blocked("m:1").await })
            };
            tokio::time::sleep(Duration::from_millis(10)).await;
            list.block(vec!["other:2".into()]).unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert!(!waiter.is_finished(), "another host does not wake it");
            list.block(vec!["m:1".into()]).unwrap();
            tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .unwrap()
                .unwrap();
        });
    }
}
