//! One simulated client: a connection to the member its role picks, a loop
//! of operations until told to stop, and the way back after a failure (a
//! lost connection or a "not primary" answer sends it to the deployment
//! for a fresh view, then to the member that view names).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{reply_ok, says_not_primary, Client};
use super::deployment::{Deployment, View};
use super::histogram::Histogram;
use super::workload::{self, Workload};
use super::{ReadPreferenceArg, WorkloadName};

/// How many times in a row a client may fail to find and reach its member
/// before it gives up for the rest of the run.
const RECONNECTS_MAX: u32 = 10;
/// Pause before reconnecting to a node named directly (a set's discovery
/// paces itself).
const DIRECT_RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// Longest one rediscovery may look for a primary (an election takes about
/// an election timeout).
pub const REDISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest one operation may wait for its reply before the client drops the
/// connection and counts it as failed (a member that stopped answering).
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Counters shared by every client of a run.
#[derive(Default)]
pub struct Progress {
    pub ops: AtomicU64,
    pub errors: AtomicU64,
    pub stop: AtomicBool,
}

/// Which member a client sends its operations to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Primary,
    Secondary,
    SecondaryPreferred,
    Nearest,
}

impl Role {
    pub fn of(workload: WorkloadName, read_preference: ReadPreferenceArg) -> Role {
        if workload.writes() {
            return Role::Primary;
        }
        match read_preference {
            ReadPreferenceArg::Primary => Role::Primary,
            ReadPreferenceArg::Secondary => Role::Secondary,
            ReadPreferenceArg::SecondaryPreferred => Role::SecondaryPreferred,
            ReadPreferenceArg::Nearest => Role::Nearest,
        }
    }

    /// The member client `index` uses in `view`: clients spread evenly over
    /// the members their role allows.
    pub fn pick(self, view: &View, index: u64) -> Result<String, String> {
        let spread = |members: &[String]| members[(index % members.len() as u64) as usize].clone();
        match self {
            Role::Primary => Ok(view.primary.clone()),
            Role::Secondary if view.secondaries.is_empty() => Err("no member is a secondary".into()),
            Role::Secondary | Role::SecondaryPreferred if !view.secondaries.is_empty() => Ok(spread(&view.secondaries)),
            Role::SecondaryPreferred | Role::Secondary => Ok(view.primary.clone()),
            Role::Nearest => {
                let mut members = vec![view.primary.clone()];
                members.extend(view.secondaries.iter().cloned());
                Ok(spread(&members))
            }
        }
    }
}

/// One operation's fate, as an observer sees it.
pub struct Outcome<'a> {
    pub sent: Instant,
    pub done: Instant,
    /// The reply was a full success (its write concern satisfied).
    pub acknowledged: bool,
    /// The member the operation went to.
    pub target: &'a str,
}

/// Sees every operation of every client as it completes (the failover
/// bench's timeline and windows).
pub trait Observer: Send + Sync {
    fn observe(&self, outcome: &Outcome<'_>);
}

struct Connection {
    client: Client,
    target: String,
    /// The view generation the target was picked from.
    generation: u64,
}

pub struct Driver {
    deployment: Arc<Deployment>,
    role: Role,
    index: u64,
    connection: Option<Connection>,
    /// The generation of the view that led to the last failure: the next
    /// connection must come from a newer one.
    stale: Option<u64>,
}

impl Driver {
    /// A client connected to its member (the run does not start without
    /// every client connected).
    pub async fn connect(deployment: Arc<Deployment>, role: Role, index: u64) -> Result<Driver, String> {
        let mut driver = Driver { deployment, role, index, connection: None, stale: None };
        driver.reconnect().await?;
        Ok(driver)
    }

    async fn reconnect(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + REDISCOVERY_TIMEOUT;
        let view = match self.stale {
            Some(stale) => self.deployment.rediscover(stale, deadline).await?,
            None => self.deployment.view(deadline).await?,
        };
        let target = self.role.pick(&view, self.index)?;
        let client = Client::connect(&target).await.map_err(|err| format!("connect to {target}: {err}"))?;
        self.connection = Some(Connection { client, target, generation: view.generation });
        self.stale = None;
        Ok(())
    }

    /// Runs operations until `progress.stop`; successful operations'
    /// latencies go into the returned histogram, failures are counted.
    pub async fn run(
        mut self,
        workload: Arc<Workload>,
        progress: Arc<Progress>,
        observer: Option<Arc<dyn Observer>>,
    ) -> Histogram {
        let mut histogram = Histogram::default();
        let mut random =
            workload::Random::new(0x9e37_79b9_7f4a_7c15 ^ (self.index + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
        let mut sequence = 0u64;
        let mut failures = 0;
        while !progress.stop.load(Ordering::Relaxed) {
            if self.connection.is_none() {
                if self.deployment.is_direct() {
                    tokio::time::sleep(DIRECT_RECONNECT_PAUSE).await;
                }
                if let Err(err) = self.reconnect().await {
                    failures += 1;
                    if failures > RECONNECTS_MAX {
                        eprintln!("[bench] client {} gives up: {err}", self.index);
                        break;
                    }
                    continue;
                }
            }
            let Some(connection) = self.connection.as_mut() else {
                continue;
            };
            let (body, sequences) = workload.next_operation(self.index, sequence, &mut random);
            sequence += 1;
            let sent = Instant::now();
            let result = tokio::time::timeout(OPERATION_TIMEOUT, connection.client.command(&body, &sequences)).await;
            let done = Instant::now();
            let acknowledged = matches!(&result, Ok(Ok(reply)) if reply_ok(reply));
            if let Some(observer) = &observer {
                observer.observe(&Outcome { sent, done, acknowledged, target: &connection.target });
            }
            if acknowledged {
                histogram.record(done.duration_since(sent).as_micros() as u64);
                progress.ops.fetch_add(1, Ordering::Relaxed);
                failures = 0;
                continue;
            }
            progress.errors.fetch_add(1, Ordering::Relaxed);
            let lost = match &result {
                Ok(Ok(reply)) => says_not_primary(reply),
                Ok(Err(_)) | Err(_) => true,
            };
            if lost {
                self.stale = Some(connection.generation);
                self.connection = None;
            }
        }
        histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(secondaries: &[&str]) -> View {
        View { primary: "p:1".into(), secondaries: secondaries.iter().map(|s| s.to_string()).collect(), generation: 1 }
    }

    #[test]
    fn roles_spread_clients_over_the_members_they_allow() {
        let set = view(&["s:2", "s:3"]);
        assert_eq!(Role::Primary.pick(&set, 5).unwrap(), "p:1");
        assert_eq!(Role::Secondary.pick(&set, 0).unwrap(), "s:2");
        assert_eq!(Role::Secondary.pick(&set, 1).unwrap(), "s:3");
        assert_eq!(Role::SecondaryPreferred.pick(&set, 2).unwrap(), "s:2");
        let nearest: Vec<String> = (0..3).map(|index| Role::Nearest.pick(&set, index).unwrap()).collect();
        assert_eq!(nearest, vec!["p:1", "s:2", "s:3"]);
        let lonely = view(&[]);
        assert!(Role::Secondary.pick(&lonely, 0).is_err());
        assert_eq!(Role::SecondaryPreferred.pick(&lonely, 0).unwrap(), "p:1");
    }

    #[test]
    fn writes_always_go_to_the_primary() {
        assert_eq!(Role::of(WorkloadName::Update, ReadPreferenceArg::Nearest), Role::Primary);
        assert_eq!(Role::of(WorkloadName::Read, ReadPreferenceArg::Secondary), Role::Secondary);
    }
}
