//! The server parameters a client may change while the node runs
//! (`setParameter`), each read where it takes effect. Parameters fixed at
//! start live in `ServerOptions`; `commands::diagnostics` lists both.

use std::sync::atomic::{AtomicBool, Ordering};

/// Runtime-settable parameters (atomics: any connection may read or set).
#[derive(Debug, Default)]
pub struct Parameters {
    /// `requireApiVersion`: every command must carry `apiVersion`
    /// (checked by `api_version::check`).
    require_api_version: AtomicBool,
}

impl Parameters {
    pub fn require_api_version(&self) -> bool {
        self.require_api_version.load(Ordering::Acquire)
    }

    /// Sets `requireApiVersion`; returns the previous value.
    pub fn set_require_api_version(&self, required: bool) -> bool {
        self.require_api_version.swap(required, Ordering::AcqRel)
    }
}
