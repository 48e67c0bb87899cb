//! The process's allocator: mimalloc, with the bytes the program holds
//! counted.
//!
//! Why counted: `--cache-size-mb` bounds the resident set, and
//! `serverStatus` (`slipstream.memory`) shows where it goes. The resident
//! set is the program's live heap (this counter), plus what the allocator
//! holds beyond it (free and partly used pages), plus code and stacks.
//!
//! One tuning: no transparent huge pages for the process. mimalloc asks
//! the kernel for huge pages on its arenas (`madvise(MADV_HUGEPAGE)`, which
//! this machine's `madvise` mode honours), and a 2 MB huge page is resident
//! whole as soon as one of its blocks is touched: under 1 KB inserts on 64
//! connections (73 threads, each with its own pages) 241 of 286 MB
//! resident were huge pages over a 60-80 MB live heap. Without them
//! (release, `--cache-size-mb 256`, the same load, two rounds each) the
//! resident set beyond the heap went from 228-279 MB to 59-106 MB, and CPU
//! per insert from 98-104 to 85-88 us. What else was tried, at 1 KB
//! inserts, updates and reads on 32 to 64 connections: a 250, 50 or 0 ms
//! purge delay, a forced `mi_collect` every second, no full-page retention,
//! pages committed on demand: each moved the peak by less than the run to
//! run noise or cost CPU (0 ms: about 20% more per operation).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};

use mimalloc::MiMalloc;

/// Bytes a thread counts locally before it adds them to the shared
/// counter: a shared atomic on every allocation would put one cache line
/// between all threads. The shared counter is off by at most this much per
/// thread.
const THREAD_UNCOUNTED_BYTES_MAX: i64 = 64 * 1024;

/// Bytes allocated and not yet freed, as far as threads have reported them.
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

thread_local! {
    /// This thread's allocations not yet added to `LIVE_BYTES` (no
    /// destructor: it is usable while the thread's other locals drop).
    static UNCOUNTED_BYTES: Cell<i64> = const { Cell::new(0) };
}

fn count(delta: i64) {
    let counted_locally = UNCOUNTED_BYTES.try_with(|uncounted| {
        let total = uncounted.get() + delta;
        if total.abs() >= THREAD_UNCOUNTED_BYTES_MAX {
            LIVE_BYTES.fetch_add(total, Ordering::Relaxed);
            uncounted.set(0);
        } else {
            uncounted.set(total);
        }
    });
    if counted_locally.is_err() {
        LIVE_BYTES.fetch_add(delta, Ordering::Relaxed);
    }
}

/// mimalloc with every allocation's size counted.
pub struct CountingMimalloc;

unsafe impl GlobalAlloc for CountingMimalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let pointer = MiMalloc.alloc(layout);
        if !pointer.is_null() {
            count(layout.size() as i64);
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let pointer = MiMalloc.alloc_zeroed(layout);
        if !pointer.is_null() {
            count(layout.size() as i64);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        MiMalloc.dealloc(pointer, layout);
        count(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = MiMalloc.realloc(pointer, layout, new_size);
        if !moved.is_null() {
            count(new_size as i64 - layout.size() as i64);
        }
        moved
    }
}

/// What the allocator holds, for `serverStatus`.
pub fn report() -> slipstream_server::memory::AllocatorReport {
    slipstream_server::memory::AllocatorReport {
        name: "mimalloc",
        heap_bytes_in_use: LIVE_BYTES.load(Ordering::Relaxed).max(0) as u64,
        huge_pages_disabled: huge_pages_disabled(),
    }
}

/// Hands `report` to the server and turns transparent huge pages off for
/// the process (see the module comment). Called once, before the node
/// serves: pages faulted in before it may stay huge, later ones are not.
pub fn configure() {
    slipstream_server::memory::install_allocator_report(report);
    // SAFETY: PR_SET_THP_DISABLE only sets a flag on this process; it
    // reads no memory of ours.
    let disabled = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if disabled != 0 {
        // Older kernels lack it: the node runs as before, with a larger
        // resident set under load.
        tracing::warn!("cannot turn transparent huge pages off: {}", std::io::Error::last_os_error());
    }
}

/// Whether transparent huge pages are off for this process.
pub fn huge_pages_disabled() -> bool {
    // SAFETY: as above, a flag of this process.
    unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_tracks_allocations_and_frees_through_realloc() {
        // This is the test binary's global allocator too: other tests'
        // threads move the counter meanwhile, by far less than the slack.
        const SLACK: i64 = 16 << 20;
        let before = LIVE_BYTES.load(Ordering::Relaxed);
        let layout = Layout::from_size_align(64 << 20, 8).unwrap();
        let grown;
        unsafe {
            let pointer = CountingMimalloc.alloc(layout);
            assert!(!pointer.is_null());
            let after_alloc = LIVE_BYTES.load(Ordering::Relaxed) - before;
            assert!((after_alloc - (64 << 20)).abs() <= SLACK, "{after_alloc}");
            grown = CountingMimalloc.realloc(pointer, layout, 96 << 20);
            assert!(!grown.is_null());
            let after_realloc = LIVE_BYTES.load(Ordering::Relaxed) - before;
            assert!((after_realloc - (96 << 20)).abs() <= SLACK, "{after_realloc}");
            CountingMimalloc.dealloc(grown, Layout::from_size_align(96 << 20, 8).unwrap());
        }
        let after_free = LIVE_BYTES.load(Ordering::Relaxed) - before;
        assert!(after_free.abs() <= SLACK, "{after_free}");
    }
}
