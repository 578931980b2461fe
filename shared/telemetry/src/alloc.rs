//! The allocator every weft binary runs on: jemalloc, configured to hand memory a burst of work
//! freed back to the OS within about a second. Each binary installs it with
//! [`global_allocator!`](crate::global_allocator).
//!
//! Why jemalloc, not mimalloc (used until 2026-11-27) or glibc's malloc:
//! - glibc's malloc cost a quarter of weft's CPU under load (`malloc_consolidate` and friends;
//!   docs/performance.md, issue 13).
//! - mimalloc was as fast, but kept what a burst touched: after 10,000 interactive runs parked
//!   through a separate `weft executor`, that process's RSS stayed ~10 MiB above where it
//!   started, although its live heap had grown by only ~1.2 MiB (heaptrack). The ~1 MiB of
//!   objects that outlive a burst (connections opened, caches and slabs grown) lie scattered
//!   over mimalloc's 64 KiB pages, and a page holding one live object cannot be given back: 120
//!   such pages stayed resident. jemalloc packs small objects into slabs of a few 4 KiB pages,
//!   so the same survivors pin far less; see docs/performance.md, "Issue 14, seventh step".
//!
//! The configuration ([`MALLOC_CONF`], baked into the binary, overridable at run time with the
//! `_RJEM_MALLOC_CONF` environment variable):
//! - `background_thread:true`: a jemalloc thread purges unused pages; an idle process
//!   (nothing allocating, so nothing to trigger purging inline) still gives memory back.
//! - `dirty_decay_ms:1000`: freed pages are kept about a second for reuse, then purged.
//! - `muzzy_decay_ms:0`: purged pages leave RSS at once (`MADV_DONTNEED`), instead of lingering
//!   as lazily-freed (`MADV_FREE`) pages the kernel reclaims only under memory pressure.
//! - `tcache_nslots_large:4`: a thread caches at most 4 freed objects of each size class from
//!   16 to 32 KiB (a run's task, protocol buffers), not 20. A full cache of those is over a MiB
//!   per thread that no purge reaches; measured, the parked executor's RSS grew 4.4–4.7 MiB with
//!   it and 5.0–7.6 MiB without, at no CPU cost the runs benchmark could tell apart.
//!
//! And one thing at run time: **an idle worker flushes its thread cache** ([`flush_when_idle`],
//! called by [`crate::runtime`] as a tokio worker is about to park, at most once per
//! [`IDLE_FLUSH_EVERY`]). jemalloc keeps each thread's recently freed small objects in that
//! thread's cache, and trims it only as the thread allocates again; a worker that goes idle
//! after a burst would keep them, and the slabs they sit in, for good (measured: ~3.5 MiB of the
//! parked executor's RSS).

use std::cell::Cell;
use std::time::{Duration, Instant};

pub use tikv_jemallocator::Jemalloc;

/// How often one idle worker thread flushes its jemalloc thread cache at most.
pub const IDLE_FLUSH_EVERY: Duration = Duration::from_secs(1);

/// jemalloc's options for every weft binary (NUL-terminated, as jemalloc reads it).
pub const MALLOC_CONF: &[u8; 82] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,tcache_nslots_large:4\0";

/// Installs jemalloc ([`Jemalloc`]) as the binary's global allocator, with [`MALLOC_CONF`]. Call
/// once, at the top level of a binary's `main.rs`.
#[macro_export]
macro_rules! global_allocator {
    () => {
        #[global_allocator]
        static GLOBAL: $crate::alloc::Jemalloc = $crate::alloc::Jemalloc;

        /// jemalloc reads its options from this symbol (`malloc_conf`, with the `_rjem_` prefix
        /// tikv-jemalloc-sys gives its symbols); jemalloc's own definition is weak.
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

/// Flushes the calling thread's jemalloc cache if it has not in the last [`IDLE_FLUSH_EVERY`].
/// Under load a worker parks often: most calls cost one clock read, and one a second per worker
/// a flush. Limit: a worker whose last park of a burst comes within a second of its previous
/// flush skips it, and keeps that last second's cache until it next parks after a second.
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

/// `thread.tcache.flush`: gives the calling thread's cached objects back to their arenas. A
/// failure (no cache on this thread) is nothing to act on.
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
