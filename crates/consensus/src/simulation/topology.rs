//! Lasting partial partitions, and the progress the protocol owes inside
//! one. A partial partition cuts some links (both directions) and keeps
//! some members down for a long phase. Whether progress is owed depends on
//! the shape, so the expectation is derived from it:
//!
//! - **Electable members**: up, electable by configuration, with a majority
//!   of voters among themselves and the members they are linked to. Dry
//!   runs and real votes travel over direct links only, so nobody else can
//!   ever win an election, nor raise the term (a real election follows only
//!   a successful dry run).
//! - The electable members must be **pairwise linked**. Whichever of them is
//!   primary, every other one hears its heartbeats and stays put (priority
//!   and catch-up takeovers aside, which are finitely many). Two electable
//!   members that cannot hear each other may each win in turn: voters grant
//!   a fresher candidate while a primary lives (MongoDB has no leader
//!   stickiness), and no bound on progress holds. Such shapes are left to
//!   the safety checks.
//! - **Core**: the data-bearing members joined to the electable ones through
//!   links between data-bearing members. Entries, UpdatePosition and the
//!   commit point all travel along sync sources, which hold data, so this
//!   is the pull chain; an arbiter relays nothing. With
//!   `chainingAllowed: false` a member pulls from the primary only, so the
//!   core keeps only members linked to every electable member. The core
//!   must hold a write majority of data-bearing voters.
//! - **Freshness**: some electable member's last applied OpTime is at least
//!   that of every data-bearing member joined to it by data-bearing links
//!   (the core before the chaining rule: entries can still flow from a
//!   member a core member may not choose, through a sync source believed
//!   primary on a stale heartbeat). A vote goes only to a candidate whose log is at
//!   least the voter's, and a member behind a divergent branch catches up
//!   only by rolling back, which needs a proof that may not exist before a
//!   primary of the current term has written (`rollback_is_proven_safe` in
//!   `replication.rs`); with `chainingAllowed: false` it pulls from a
//!   primary only. So an electable member that is not the freshest may
//!   never collect the votes it needs (the price of the stricter rollback
//!   rule: seed 000's bare rule would let it roll back and catch up). With
//!   the freshest core member electable, it can win, and no core member can
//!   overtake it except by pulling from a primary.
//!
//! When all of this holds, the promise checked inside the partition is: a
//! primary emerges among the electable members, a write it accepts is
//! committed, and every core member holds it and knows it is committed,
//! within the phase.

use crate::config::ReplSetConfig;
use crate::simulation::rng::Rng;
use slipstream_clock::OpTime;

/// Most random shapes drawn before settling for the fallback (no cuts).
pub const DRAW_ATTEMPTS_MAX: usize = 64;

/// A lasting partial partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// `link[a][b]`: messages from a reach b (symmetric here).
    pub link: Vec<Vec<bool>>,
    /// Members kept down for the whole phase.
    pub down: Vec<bool>,
}

/// What the protocol owes inside a partition (see the module comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expectation {
    /// Members that can win an election; pairwise linked.
    pub electable: Vec<usize>,
    /// Data-bearing members that must hold a committed write and know it.
    pub core: Vec<usize>,
    /// Some core member has no link to some electable member: progress
    /// depends on the pull chain through a third member.
    pub needs_chain: bool,
}

impl Partition {
    /// Every member up, every link working.
    pub fn none(members: usize) -> Partition {
        Partition {
            link: vec![vec![true; members]; members],
            down: vec![false; members],
        }
    }

    /// True if `a` and `b` are both up and talk both ways (`a == b`: up).
    pub fn linked(&self, a: usize, b: usize) -> bool {
        !self.down[a] && !self.down[b] && (a == b || (self.link[a][b] && self.link[b][a]))
    }

    /// The progress owed inside this partition, given each member's last
    /// applied OpTime when it begins, or `None` if none is owed.
    pub fn expectation(&self, config: &ReplSetConfig, last_applied: &[OpTime]) -> Option<Expectation> {
        let n = config.members.len();
        let voters_around = |x: usize| {
            (0..n)
                .filter(|&y| config.members[y].is_voter() && self.linked(x, y))
                .count()
        };
        let electable: Vec<usize> = (0..n)
            .filter(|&x| config.members[x].is_electable() && self.linked(x, x))
            .filter(|&x| voters_around(x) >= config.majority())
            .collect();
        if electable.is_empty() {
            return None;
        }
        if electable.iter().any(|&a| electable.iter().any(|&b| !self.linked(a, b))) {
            return None;
        }
        let mut core = self.data_reachable(config, &electable);
        // Even a member that may not pull from it can receive its entries
        // (through a sync source believed primary on a stale heartbeat).
        let freshest = core.iter().map(|&x| last_applied[x]).max().unwrap_or(OpTime::NULL);
        if !electable.iter().any(|&w| last_applied[w] == freshest) {
            return None;
        }
        if !config.settings.chaining_allowed {
            core.retain(|&x| electable.iter().all(|&w| self.linked(x, w)));
        }
        let data_voters = core.iter().filter(|&&x| config.members[x].is_voter()).count();
        if data_voters < config.write_majority() {
            return None;
        }
        let needs_chain = core.iter().any(|&x| electable.iter().any(|&w| !self.linked(x, w)));
        Some(Expectation {
            electable,
            core,
            needs_chain,
        })
    }

    /// Data-bearing members reachable from `start` over links between
    /// data-bearing members, in index order.
    fn data_reachable(&self, config: &ReplSetConfig, start: &[usize]) -> Vec<usize> {
        let n = config.members.len();
        let mut seen = vec![false; n];
        let mut stack: Vec<usize> = start.to_vec();
        while let Some(x) = stack.pop() {
            if seen[x] {
                continue;
            }
            seen[x] = true;
            stack.extend((0..n).filter(|&y| !seen[y] && config.members[y].is_data_bearing() && self.linked(x, y)));
        }
        (0..n).filter(|&x| seen[x]).collect()
    }

    /// Draws a partition that owes progress: up to `DRAW_ATTEMPTS_MAX` random
    /// shapes (up to half the members down, each link cut with a drawn
    /// probability), preferring, half of the time, shapes in which some core
    /// member reaches an electable one only through a third member; then a
    /// partition with no cuts at all. `None` if not even that owes progress
    /// (the freshest log is on a member that cannot be elected).
    pub fn draw(rng: &mut Rng, config: &ReplSetConfig, last_applied: &[OpTime]) -> Option<(Partition, Expectation)> {
        let n = config.members.len();
        let want_chain = rng.chance(500_000);
        let mut fallback = None;
        for _ in 0..DRAW_ATTEMPTS_MAX {
            let partition = Partition::random(rng, n);
            let Some(expectation) = partition.expectation(config, last_applied) else {
                continue;
            };
            if expectation.needs_chain || !want_chain {
                return Some((partition, expectation));
            }
            fallback.get_or_insert((partition, expectation));
        }
        fallback.or_else(|| {
            let partition = Partition::none(n);
            partition
                .expectation(config, last_applied)
                .map(|expectation| (partition, expectation))
        })
    }

    /// Up to half the members down, each link cut with a drawn probability.
    pub fn random(rng: &mut Rng, n: usize) -> Partition {
        let mut partition = Partition::none(n);
        for _ in 0..rng.range(0, n as u64 / 2) {
            partition.down[rng.below(n as u64) as usize] = true;
        }
        let cut_per_million = rng.range(50_000, 600_000);
        for a in 0..n {
            for b in a + 1..n {
                if rng.chance(cut_per_million) {
                    partition.link[a][b] = false;
                    partition.link[b][a] = false;
                }
            }
        }
        partition
    }

    /// `down=[4] cut=[1-3 2-5]` in member `_id`s, for reports.
    pub fn describe(&self, config: &ReplSetConfig) -> String {
        let n = config.members.len();
        let id = |i: usize| config.members[i].id;
        let down: Vec<String> = (0..n).filter(|&i| self.down[i]).map(|i| id(i).to_string()).collect();
        let mut cut = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                if !self.link[a][b] || !self.link[b][a] {
                    cut.push(format!("{}-{}", id(a), id(b)));
                }
            }
        }
        format!("down=[{}] cut=[{}]", down.join(" "), cut.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::Partition;
    use crate::config::{MemberConfig, ReplSetConfig};
    use slipstream_clock::OpTime;

    /// Every log equal (at most seven members here).
    const FRESH: [OpTime; 7] = [OpTime::NULL; 7];

    fn config(n: u32, arbiters: &[u32]) -> ReplSetConfig {
        let mut members: Vec<MemberConfig> = (1..=n).map(|i| MemberConfig::new(i, format!("m{i}:27017"))).collect();
        for &a in arbiters {
            let m = &mut members[a as usize - 1];
            m.arbiter_only = true;
            m.priority = 0.0;
        }
        ReplSetConfig::new("rs", members)
    }

    fn cut(partition: &mut Partition, a: u32, b: u32) {
        let (a, b) = (a as usize - 1, b as usize - 1);
        partition.link[a][b] = false;
        partition.link[b][a] = false;
    }

    #[test]
    fn whole_set_owes_progress_everywhere() {
        let e = Partition::none(5).expectation(&config(5, &[]), &FRESH).unwrap();
        assert_eq!(e.electable, vec![0, 1, 2, 3, 4]);
        assert_eq!(e.core, vec![0, 1, 2, 3, 4]);
        assert!(!e.needs_chain);
    }

    #[test]
    fn one_cut_link_between_two_who_can_win_owes_nothing() {
        // 1 and 2 each reach a majority but not each other: ping-pong.
        let mut p = Partition::none(5);
        cut(&mut p, 1, 2);
        assert_eq!(p.expectation(&config(5, &[]), &FRESH), None);
    }

    #[test]
    fn primary_cut_from_a_member_it_needs_owes_progress_through_the_chain() {
        // The filed defect's shape: P=1, S=2, M=3 hold data, 4 and 5 are
        // arbiters linked to P only; M reaches P only through S, and the
        // write majority (3 data-bearing voters) needs M.
        let mut p = Partition::none(5);
        for (a, b) in [(1, 3), (3, 4), (3, 5), (2, 4), (2, 5)] {
            cut(&mut p, a, b);
        }
        let e = p.expectation(&config(5, &[4, 5]), &FRESH).unwrap();
        assert_eq!(e.electable, vec![0, 1]);
        assert_eq!(e.core, vec![0, 1, 2]);
        assert!(e.needs_chain);
    }

    #[test]
    fn a_core_short_of_the_write_majority_owes_nothing() {
        // Two of five down and 3 reachable only through arbiter 5.
        let mut p = Partition::none(5);
        p.down[3] = true;
        cut(&mut p, 1, 3);
        cut(&mut p, 2, 3);
        assert_eq!(p.expectation(&config(5, &[5]), &FRESH), None);
    }

    #[test]
    fn without_chaining_a_member_that_cannot_reach_the_primary_does_not_count() {
        // The filed defect's shape again: with chaining off, M (3) may pull
        // from the primary only, which it cannot reach, and the core falls
        // short of the write majority.
        let mut p = Partition::none(5);
        for (a, b) in [(1, 3), (3, 4), (3, 5), (2, 4), (2, 5)] {
            cut(&mut p, a, b);
        }
        let mut c = config(5, &[4, 5]);
        c.settings.chaining_allowed = false;
        assert_eq!(p.expectation(&c, &FRESH), None);
        // With 3 linked to both electable members it counts again.
        p.link[0][2] = true;
        p.link[2][0] = true;
        assert_eq!(p.expectation(&c, &FRESH).unwrap().core, vec![0, 1, 2]);
    }

    #[test]
    fn an_electable_member_behind_a_fresher_one_that_cannot_win_owes_nothing() {
        // 1 has priority 0 and the freshest log; 3, the only electable
        // member reaching a majority, is behind it.
        let mut p = Partition::none(3);
        p.down[1] = true;
        let mut c = config(3, &[]);
        c.members[0].priority = 0.0;
        let term = |term: i64| OpTime::new(slipstream_clock::Timestamp::new(1, 1), term);
        let logs = [term(5), OpTime::NULL, term(2)];
        assert_eq!(p.expectation(&c, &logs), None);
        let logs = [term(5), OpTime::NULL, term(5)];
        assert_eq!(p.expectation(&c, &logs).unwrap().electable, vec![2]);
    }

    #[test]
    fn drawn_partitions_owe_progress() {
        let mut rng = crate::simulation::rng::Rng::new(7);
        let c = config(7, &[7]);
        let mut chains = 0;
        for _ in 0..200 {
            let (p, e) = Partition::draw(&mut rng, &c, &FRESH).unwrap();
            assert_eq!(p.expectation(&c, &FRESH), Some(e.clone()));
            chains += usize::from(e.needs_chain);
        }
        assert!(chains > 20, "only {chains} of 200 drawn partitions need the pull chain");
    }
}
