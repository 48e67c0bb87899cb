//! The coordinator's inputs, and who steps them.
//!
//! Any thread queues an `Input`. The coordinator (and with it the
//! `consensus::Node`) sits behind one lock, and whoever holds the lock pops
//! and handles everything queued, oldest first, so inputs are stepped in
//! the order they were queued whatever thread steps them:
//!
//! - `send` queues and rings the doorbell of the `repl-coordinator` thread,
//!   which wakes, takes the lock and drains the queue (it also ticks the
//!   node's timers every `COORDINATOR_TICK_MS`);
//! - `send_and_step` queues and, when no other thread holds the
//!   coordinator, drains the queue on the calling thread at once (flat
//!   combining). When another thread holds it, that thread finds the input:
//!   a holder looks at the queue again after releasing the lock.
//!
//! `send_and_step` is for the inputs on a replicated write's path (a
//! fetched batch, the applier's positions, a secondary's
//! `replSetUpdatePosition`, a write waiting for its concern): each of them
//! used to wake the coordinator thread, a hand-off that costs 50-100 us of
//! a virtual CPU's wake-up here, two to three times per majority write.
//! Stepping is quick (no network I/O: the companions spawn their tasks);
//! the rare slow action (persisting a vote, writing a no-op) then runs on
//! whichever thread drains.
//!
//! `Input::Stop`, once popped, shuts the coordinator down and drops it; the
//! queue is emptied (answers waiting on dropped inputs learn the shutdown)
//! and later inputs are dropped.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::coordinator::{fatal, Coordinator, Input, COORDINATOR_TICK_MS};

#[derive(Default)]
pub struct Inputs {
    queue: Mutex<VecDeque<Input>>,
    doorbell: Condvar,
    /// `None` before the thread installed it and after `Stop`.
    coordinator: Mutex<Option<Coordinator>>,
    stopped: AtomicBool,
}

impl Inputs {
    /// Queues `input` for the coordinator thread.
    pub fn send(&self, input: Input) {
        if self.push(input) {
            self.doorbell.notify_one();
        }
    }

    /// Queues `input` and steps the queue on this thread unless another
    /// thread is stepping it.
    pub fn send_and_step(&self, input: Input) {
        if self.push(input) {
            self.drain_here();
        }
    }

    /// False once stopped (the input is dropped).
    fn push(&self, input: Input) -> bool {
        if self.stopped.load(Ordering::Acquire) {
            return false;
        }
        self.queue.lock().push_back(input);
        true
    }

    fn drain_here(&self) {
        loop {
            let Some(mut guard) = self.coordinator.try_lock() else {
                // The holder looks at the queue after it lets go.
                return;
            };
            if guard.is_none() {
                // Not installed yet (the thread drains once it is) or stopped.
                self.doorbell.notify_one();
                return;
            }
            if std::panic::catch_unwind(AssertUnwindSafe(|| self.drain(&mut guard))).is_err() {
                fatal("the replication coordinator panicked");
            }
            drop(guard);
            if self.queue.lock().is_empty() {
                return;
            }
        }
    }

    /// Handles every queued input; on `Stop`, shuts the coordinator down.
    fn drain(&self, guard: &mut MutexGuard<'_, Option<Coordinator>>) {
        loop {
            let Some(input) = self.queue.lock().pop_front() else {
                return;
            };
            let Some(coordinator) = guard.as_mut() else {
                return;
            };
            if matches!(input, Input::Stop) {
                self.stopped.store(true, Ordering::Release);
                let coordinator = guard.take().expect("checked above");
                coordinator.shutdown();
                let dropped: Vec<Input> = self.queue.lock().drain(..).collect();
                drop(dropped);
                self.doorbell.notify_all();
                return;
            }
            coordinator.handle(input);
        }
    }

    /// The `repl-coordinator` thread: starts the coordinator, then drains
    /// the queue when rung and ticks the node's timers, until `Stop`.
    pub fn run_thread(&self, mut coordinator: Coordinator) {
        coordinator.start();
        *self.coordinator.lock() = Some(coordinator);
        let tick = Duration::from_millis(COORDINATOR_TICK_MS);
        let mut next_tick = Instant::now() + tick;
        loop {
            {
                let mut queue = self.queue.lock();
                while queue.is_empty() && !self.stopped.load(Ordering::Acquire) {
                    if self.doorbell.wait_until(&mut queue, next_tick).timed_out() {
                        break;
                    }
                }
            }
            let mut guard = self.coordinator.lock();
            self.drain(&mut guard);
            let Some(coordinator) = guard.as_mut() else {
                return;
            };
            if Instant::now() >= next_tick {
                coordinator.tick();
                next_tick = Instant::now() + tick;
            }
        }
    }
}
