//! The reconfigurations of randomized runs, as an administrator makes them
//! with `rs.add`, `rs.remove` and `rs.reconfig`: one change at a time,
//! through the primary, on its current configuration with the version
//! raised by one. The node decides whether to accept it (the current
//! configuration committed, the oplog committed in it, one voter changed
//! at most); the simulator only proposes.

use crate::config::{MemberConfig, MemberId, ReplSetConfig, VOTING_MEMBERS_MAX};
use crate::simulation::rng::Rng;

/// Fewest members a drawn configuration keeps.
pub const MEMBERS_MIN: usize = 2;

/// The next configuration after `current` (the primary's), changing one
/// member: adding a process outside it, removing a member other than the
/// primary, giving or taking a member's vote, or changing a priority.
/// `processes` are every simulated process's `_id` and host. `None` when
/// the drawn change does not apply or breaks a structural rule.
pub fn next_config(
    rng: &mut Rng,
    current: &ReplSetConfig,
    primary: MemberId,
    processes: &[(MemberId, String)],
) -> Option<ReplSetConfig> {
    let mut config = current.clone();
    config.version += 1;
    let others: Vec<usize> = (0..config.members.len())
        .filter(|&i| config.members[i].id != primary)
        .collect();
    match rng.below(4) {
        0 => add_member(rng, &mut config, processes)?,
        1 => {
            if config.members.len() <= MEMBERS_MIN || others.is_empty() {
                return None;
            }
            config.members.remove(others[rng.below(others.len() as u64) as usize]);
        }
        2 => toggle_vote(rng, &mut config, &others)?,
        _ => {
            let electable: Vec<usize> = (0..config.members.len())
                .filter(|&i| {
                    config.members[i].is_voter() && config.members[i].is_data_bearing() && !config.members[i].hidden
                })
                .collect();
            let i = electable[rng.below(electable.len() as u64) as usize];
            config.members[i].priority = rng.range(1, 3) as f64;
        }
    }
    config.validate().ok()?;
    if !electable_and_arbiters_are_a_majority(&config) {
        return None;
    }
    Some(config)
}

/// True if the electable voters and the arbiters (whose votes do not look
/// at logs) make a majority of the voters. Otherwise every election needs
/// the vote of a member that may not stand, which refuses a staler
/// candidate; with chaining off a staler electable member cannot pull
/// without a primary either, and the set stalls (as MongoDB's would). The
/// liveness checks promise progress, so the draws avoid such sets; the
/// initial configurations never are.
pub fn electable_and_arbiters_are_a_majority(config: &ReplSetConfig) -> bool {
    let free_votes = config
        .members
        .iter()
        .filter(|m| m.is_electable() || m.arbiter_only)
        .count();
    free_votes >= config.majority()
}

/// Adds a process outside `config`: a voter if there is room (and half
/// the time), else a non-voter that a later draw may give a vote.
fn add_member(rng: &mut Rng, config: &mut ReplSetConfig, processes: &[(MemberId, String)]) -> Option<()> {
    let outsiders: Vec<&(MemberId, String)> = processes
        .iter()
        .filter(|(id, _)| config.member(*id).is_none())
        .collect();
    if outsiders.is_empty() {
        return None;
    }
    let (id, host) = outsiders[rng.below(outsiders.len() as u64) as usize];
    let mut member = MemberConfig::new(*id, host.clone());
    if config.voter_count() >= VOTING_MEMBERS_MAX || rng.chance(500_000) {
        member.votes = 0;
        member.priority = 0.0;
    }
    config.members.push(member);
    Some(())
}

/// Takes the vote of a data-bearing member other than the primary, or
/// gives one back (priority 1 unless hidden).
fn toggle_vote(rng: &mut Rng, config: &mut ReplSetConfig, others: &[usize]) -> Option<()> {
    let data: Vec<usize> = others
        .iter()
        .copied()
        .filter(|&i| config.members[i].is_data_bearing())
        .collect();
    if data.is_empty() {
        return None;
    }
    let voters = config.voter_count();
    let m = &mut config.members[data[rng.below(data.len() as u64) as usize]];
    if m.votes > 0 {
        m.votes = 0;
        m.priority = 0.0;
    } else if voters < VOTING_MEMBERS_MAX {
        m.votes = 1;
        m.priority = if m.hidden { 0.0 } else { 1.0 };
    } else {
        return None;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::next_config;
    use crate::config::{MemberConfig, ReplSetConfig};
    use crate::simulation::rng::Rng;

    #[test]
    fn drawn_configurations_change_one_voter_at_most_and_keep_the_primary() {
        let members = (1..=3).map(|i| MemberConfig::new(i, format!("m{i}:27017"))).collect();
        let start = ReplSetConfig::new("sim", members);
        let processes: Vec<(u32, String)> = (1..=4).map(|i| (i, format!("m{i}:27017"))).collect();
        let mut rng = Rng::new(3);
        let mut current = start;
        let mut drawn = 0;
        for _ in 0..500 {
            let Some(next) = next_config(&mut rng, &current, 1, &processes) else {
                continue;
            };
            drawn += 1;
            assert_eq!(current.check_replacement(&next, false), Ok(()));
            assert!(next.member(1).is_some_and(|m| m.is_electable()));
            assert!(super::electable_and_arbiters_are_a_majority(&next));
            current = next;
        }
        assert!(drawn > 250, "only {drawn} of 500 draws gave a configuration");
    }
}
