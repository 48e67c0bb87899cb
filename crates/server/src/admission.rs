//! Request admission: a node-wide budget of bytes for the large requests
//! being read, parsed and executed at once.
//!
//! Why: a client may send a 48 MB message on each of its connections, and
//! each is held while it is parsed and run (the frame, the parsed
//! document, the values being written): without a budget, 64 connections
//! of large inserts hold gigabytes however small `--cache-size-mb` is. A
//! connection asks for its next frame's bytes as soon as the frame's length
//! is known and before the buffer for it grows, waits (in arrival order)
//! until the budget has them, and gives them back once the reply is
//! written. A frame larger than the whole budget takes the whole budget:
//! it waits for every other charged request to finish and then runs alone.
//!
//! Frames up to `UNCHARGED_FRAME_BYTES` are not charged: a connection reads
//! one frame at a time, so these are bounded by the per-connection
//! allowance of the memory bound (`memory.rs`). Not charging them also
//! keeps replication's and monitoring's small requests (`getMore` on the
//! oplog, `hello`) from ever waiting behind large writes that themselves
//! wait for replication.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Frames up to this size are admitted without charge (see the module
/// comment); the same as the read buffer a connection keeps.
pub const UNCHARGED_FRAME_BYTES: u64 = 1024 * 1024;
/// The budget counts in units of this many bytes, so that a budget of any
/// size fits the semaphore's `u32` permit counts.
const UNIT_BYTES: u64 = 1024;
/// The largest budget (in units) a semaphore's single request may take.
const BUDGET_UNITS_MAX: u64 = u32::MAX as u64;

/// The node's budget of request bytes in flight.
pub struct RequestAdmission {
    units: Arc<Semaphore>,
    budget_units: u64,
    /// Bytes charged to requests admitted now.
    charged_bytes: AtomicU64,
    /// Requests that waited for budget, and for how long in total.
    waits: AtomicU64,
    wait_micros: AtomicU64,
}

/// Budget held by one admitted request; returned when dropped (on every
/// path: reply written, connection closed, task cancelled).
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    charged_bytes: u64,
    admission: Arc<RequestAdmission>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission
            .charged_bytes
            .fetch_sub(self.charged_bytes, Ordering::Relaxed);
    }
}

/// What `serverStatus.slipstream.memory.requests` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionStats {
    pub budget_bytes: u64,
    pub charged_bytes: u64,
    pub waits: u64,
    pub wait_micros: u64,
}

impl RequestAdmission {
    pub fn new(budget_bytes: u64) -> Arc<RequestAdmission> {
        let budget_units = (budget_bytes / UNIT_BYTES).clamp(1, BUDGET_UNITS_MAX);
        Arc::new(RequestAdmission {
            units: Arc::new(Semaphore::new(budget_units as usize)),
            budget_units,
            charged_bytes: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            wait_micros: AtomicU64::new(0),
        })
    }

    /// Waits until the budget has room for a frame of `frame_bytes`; `None`
    /// for a frame that is not charged.
    pub async fn admit(self: &Arc<Self>, frame_bytes: u64) -> Option<Admitted> {
        if frame_bytes <= UNCHARGED_FRAME_BYTES {
            return None;
        }
        // Larger than the whole budget: all of it, so the frame runs alone.
        let units = frame_bytes.div_ceil(UNIT_BYTES).min(self.budget_units);
        let permit = match self.units.clone().try_acquire_many_owned(units as u32) {
            Ok(permit) => permit,
            Err(_) => {
                let started = std::time::Instant::now();
                let permit = self.units.clone().acquire_many_owned(units as u32).await;
                self.waits.fetch_add(1, Ordering::Relaxed);
                self.wait_micros
                    .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                // The semaphore is never closed.
                permit.expect("the admission semaphore stays open")
            }
        };
        let charged_bytes = units * UNIT_BYTES;
        self.charged_bytes.fetch_add(charged_bytes, Ordering::Relaxed);
        Some(Admitted {
            _permit: permit,
            charged_bytes,
            admission: self.clone(),
        })
    }

    pub fn stats(&self) -> AdmissionStats {
        AdmissionStats {
            budget_bytes: self.budget_units * UNIT_BYTES,
            charged_bytes: self.charged_bytes.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            wait_micros: self.wait_micros.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MB: u64 = 1024 * 1024;
    /// Long enough for a runnable task to have run on a loaded machine.
    const SETTLE: Duration = Duration::from_millis(200);

    /// What a spawned admission returned, once it has finished (a hang
    /// fails the test after 30 s instead of hanging it).
    async fn joined<T>(task: tokio::task::JoinHandle<T>) -> T {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("the admission never finished")
            .expect("the admission panicked")
    }

    #[tokio::test]
    async fn small_frames_are_not_charged() {
        let admission = RequestAdmission::new(4 * MB);
        assert!(admission.admit(UNCHARGED_FRAME_BYTES).await.is_none());
        assert_eq!(admission.stats().charged_bytes, 0);
    }

    #[tokio::test]
    async fn a_request_over_the_remaining_budget_waits_until_budget_returns() {
        let admission = RequestAdmission::new(8 * MB);
        let first = admission.admit(6 * MB).await.expect("charged");
        assert_eq!(admission.stats().charged_bytes, 6 * MB);
        let waiting = tokio::spawn({
            let admission = admission.clone();
            async move { admission.admit(4 * MB).await.map(|admitted| admitted.charged_bytes) }
        });
        tokio::time::sleep(SETTLE).await;
        assert!(!waiting.is_finished(), "admitted past the budget");
        drop(first);
        let charged = joined(waiting).await;
        assert_eq!(charged, Some(4 * MB));
        let stats = admission.stats();
        assert_eq!(stats.waits, 1);
        assert_eq!(stats.charged_bytes, 0, "every admitted request gave its bytes back");
    }

    #[tokio::test]
    async fn a_request_larger_than_the_budget_runs_alone() {
        let admission = RequestAdmission::new(8 * MB);
        let small = admission.admit(2 * MB).await.expect("charged");
        let huge = tokio::spawn({
            let admission = admission.clone();
            async move { admission.admit(48 * MB).await }
        });
        tokio::time::sleep(SETTLE).await;
        assert!(!huge.is_finished(), "the huge request must wait for the small one");
        drop(small);
        let huge = joined(huge).await.expect("charged");
        assert_eq!(admission.stats().charged_bytes, 8 * MB, "it holds the whole budget");
        // While it runs, nothing else is admitted.
        assert!(tokio::time::timeout(SETTLE, admission.admit(2 * MB)).await.is_err());
        drop(huge);
        assert!(admission.admit(2 * MB).await.is_some());
    }

    #[tokio::test]
    async fn budget_comes_back_when_a_waiting_or_running_request_is_cancelled() {
        let admission = RequestAdmission::new(8 * MB);
        let running = tokio::spawn({
            let admission = admission.clone();
            async move {
                let _admitted = admission.admit(8 * MB).await;
                std::future::pending::<()>().await;
            }
        });
        tokio::time::sleep(SETTLE).await;
        assert_eq!(admission.stats().charged_bytes, 8 * MB);
        // A waiter dropped while it waits takes nothing with it.
        assert!(tokio::time::timeout(SETTLE, admission.admit(4 * MB)).await.is_err());
        // The connection's task ends (client gone, error, shutdown).
        running.abort();
        assert!(running.await.unwrap_err().is_cancelled());
        assert_eq!(admission.stats().charged_bytes, 0);
        let whole = tokio::time::timeout(Duration::from_secs(30), admission.admit(8 * MB))
            .await
            .unwrap();
        assert_eq!(whole.map(|admitted| admitted.charged_bytes), Some(8 * MB));
    }
}
