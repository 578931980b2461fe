//! The allocator every weft binary runs on: jemalloc, configured to give memory a burst freed back
//! to the OS within about a second. Installed with [`global_allocator!`](crate::global_allocator).
//!
//! jemalloc rather than glibc (a quarter of weft's CPU under load) or mimalloc (its 64 KiB pages
//! stay pinned by the few objects a burst leaves behind); measurements in docs/performance.md,
//! "Issue 14, seventh step". [`MALLOC_CONF`] is baked in (`_RJEM_MALLOC_CONF` adds to it at run
//! time): background purging, a 1 s dirty decay, no lazily-freed (`MADV_FREE`) pages, and at most
//! 4 cached large (16–32 KiB) objects per thread. Idle workers flush their thread cache
//! ([`flush_when_idle`]), which jemalloc otherwise trims only when the thread allocates again.

use std::cell::Cell;
use std::time::{Duration, Instant};

pub use tikv_jemallocator::Jemalloc;

/// How often one idle worker thread flushes its jemalloc thread cache at most.
pub const IDLE_FLUSH_EVERY: Duration = Duration::from_secs(1);

/// jemalloc's options for every weft binary (NUL-terminated, as jemalloc reads it).
pub const MALLOC_CONF: &[u8; 82] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,tcache_nslots_large:4\0";

/// Installs [`Jemalloc`] with [`MALLOC_CONF`]; call once, at the top level of `main.rs`.
#[macro_export]
macro_rules! global_allocator {
    () => {
        #[global_allocator]
        static GLOBAL: $crate::alloc::Jemalloc = $crate::alloc::Jemalloc;

        /// jemalloc's `malloc_conf` (prefixed `_rjem_`); its own definition is weak.
        #[expect(
            unsafe_code,
            reason = "exporting `malloc_conf` under jemalloc's symbol name is how its options are \
                      set at build time; the value is a NUL-terminated static string, as it expects"
        )]
        #[unsafe(export_name = "_rjem_malloc_conf")]
        #[used]
        static MALLOC_CONF: &[u8; $crate::alloc::MALLOC_CONF.len()] = $crate::alloc::MALLOC_CONF;
    };
}

/// Flushes the calling thread's jemalloc cache unless it did within [`IDLE_FLUSH_EVERY`] (so a
/// busy worker pays a clock read per park). A park within that second of the last flush skips it.
pub fn flush_when_idle() {
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    let due = LAST.with(|last| {
        let due = last
            .get()
            .is_none_or(|t| now.duration_since(t) >= IDLE_FLUSH_EVERY);
        if due {
            last.set(Some(now));
        }
        due
    });
    if due {
        flush_thread_cache();
    }
}

/// `thread.tcache.flush`; a failure (no cache on this thread) is nothing to act on.
fn flush_thread_cache() {
    #[expect(
        unsafe_code,
        reason = "jemalloc's mallctl with a NUL-terminated name and no old or new value, which is \
                  how `thread.tcache.flush` is called; it touches only this thread's cache"
    )]
    // SAFETY: the name is NUL-terminated; null old/new pointers with zero lengths are how a
    // void mallctl is called.
    let _ = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"thread.tcache.flush".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
}
