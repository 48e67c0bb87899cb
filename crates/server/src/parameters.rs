//! The server parameters a client may change while the node runs
//! (`setParameter`), each read where it takes effect. Parameters fixed at
//! start live in `ServerOptions`; `commands::diagnostics` lists both.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::Notify;

/// MongoDB's default pause between two passes of the TTL monitor.
pub const TTL_MONITOR_SLEEP_SECS_DEFAULT: u64 = 60;

/// Runtime-settable parameters (atomics: any connection may read or set).
#[derive(Debug)]
pub struct Parameters {
    /// `requireApiVersion`: every command must carry `apiVersion`
    /// (checked by `api_version::check`).
    require_api_version: AtomicBool,
    /// `ttlMonitorSleepSecs`: seconds between TTL passes (at least 1).
    ttl_monitor_sleep_secs: AtomicU64,
    /// `ttlMonitorEnabled`.
    ttl_monitor_enabled: AtomicBool,
    /// Woken when a TTL parameter changes, so that the monitor does not
    /// finish a 60 s sleep before honouring a shorter one.
    pub ttl_changed: Notify,
}

impl Default for Parameters {
    fn default() -> Self {
        Parameters {
            require_api_version: AtomicBool::new(false),
            ttl_monitor_sleep_secs: AtomicU64::new(TTL_MONITOR_SLEEP_SECS_DEFAULT),
            ttl_monitor_enabled: AtomicBool::new(true),
            ttl_changed: Notify::new(),
        }
    }
}

impl Parameters {
    pub fn require_api_version(&self) -> bool {
        self.require_api_version.load(Ordering::Acquire)
    }

    /// Sets `requireApiVersion`; returns the previous value.
    pub fn set_require_api_version(&self, required: bool) -> bool {
        self.require_api_version.swap(required, Ordering::AcqRel)
    }

    pub fn ttl_monitor_sleep_secs(&self) -> u64 {
        self.ttl_monitor_sleep_secs.load(Ordering::Acquire)
    }

    /// Sets `ttlMonitorSleepSecs` (at least 1); returns the previous value.
    pub fn set_ttl_monitor_sleep_secs(&self, seconds: u64) -> u64 {
        assert!(seconds >= 1, "ttlMonitorSleepSecs must be positive");
        let previous = self.ttl_monitor_sleep_secs.swap(seconds, Ordering::AcqRel);
        self.ttl_changed.notify_one();
        previous
    }

    pub fn ttl_monitor_enabled(&self) -> bool {
        self.ttl_monitor_enabled.load(Ordering::Acquire)
    }

    pub fn set_ttl_monitor_enabled(&self, enabled: bool) -> bool {
        let previous = self.ttl_monitor_enabled.swap(enabled, Ordering::AcqRel);
        self.ttl_changed.notify_one();
        previous
    }
}
