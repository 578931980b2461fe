//! The tokio runtime every weft binary runs on: tokio's multi-threaded default, with two things
//! that give memory back once a burst of work is over.
//!
//! - **Idle threads hand their free pages back.** mimalloc keeps the pages a thread freed in that
//!   thread's own heap until the thread allocates again; a worker that goes idle after a burst
//!   would keep them (and the process's RSS) for good. Each worker, as it goes idle, collects its
//!   heap at most once a second ([`IDLE_COLLECT_EVERY`]) with `force`: its empty pages go back
//!   to mimalloc's arenas, and the arenas' free memory (the whole process's) back to the OS.
//!   Limit: a worker whose last park of a burst comes within a second of its previous collect
//!   skips it, and keeps that last second's free pages until it next parks after a second.
//! - **The program runs on the workers, not on the thread that called `main`.** That thread only
//!   waits; the program's own allocations (a dispatch loop spawning one task per run, say) land
//!   in heaps that are collected when idle. The program's future is polled on a worker's stack
//!   (tokio's 2 MiB), not `main`'s.
//!
//! Measured with `loadtest/runs-bench.sh` (`PARKED_SPLIT=1`): a separate `weft executor`'s RSS
//! after 2 × 10,000 parked runs was +7.7 MiB over its RSS before the first batch (+8 to +12 MiB
//! in other runs) instead of +17.5 MiB; see docs/performance.md, "Issue 14, fifth step".

use std::cell::Cell;
use std::future::Future;
use std::process::ExitCode;
use std::time::{Duration, Instant};

// Linked for `mi_collect` below; the binaries pick mimalloc as their global allocator.
use libmimalloc_sys as _;

/// How often one idle worker thread collects its allocator heap at most.
pub const IDLE_COLLECT_EVERY: Duration = Duration::from_secs(1);

#[expect(
    unsafe_code,
    reason = "mimalloc's mi_collect, which libmimalloc-sys exposes only with its `extended` feature; \
              it takes a bool and returns nothing, and is safe to call from any thread at any time"
)]
unsafe extern "C" {
    /// Frees the calling thread's empty pages; with `force`, also purges every arena's free
    /// memory (process-wide) back to the OS at once.
    safe fn mi_collect(force: bool);
}

/// Runs `app` to completion on a new multi-threaded runtime, as `#[tokio::main]` would, and
/// returns its exit code (a failure when the runtime cannot be built; a panic in `app` unwinds
/// out of `main`, exit code 101, as it did under `#[tokio::main]`).
pub fn run<F>(name: &str, app: F) -> ExitCode
where
    F: Future<Output = ExitCode> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(collect_when_idle)
        .build();
    match runtime {
        Ok(rt) => rt.block_on(async move {
            match tokio::spawn(app).await {
                Ok(code) => code,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => {
                    eprintln!("{name}: the program was cancelled: {e}");
                    ExitCode::FAILURE
                }
            }
        }),
        Err(e) => {
            eprintln!("{name}: cannot start the tokio runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Called by a worker thread about to park: collects its heap if it has not in the last
/// [`IDLE_COLLECT_EVERY`]. Under load a worker parks often: most parks cost one clock read, and
/// one a second per worker a forced collect (measured: no change in the runs benchmark).
fn collect_when_idle() {
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    let due = LAST.with(|last| {
        let due = last
            .get()
            .is_none_or(|t| now.duration_since(t) >= IDLE_COLLECT_EVERY);
        if due {
            last.set(Some(now));
        }
        due
    });
    if due {
        mi_collect(true);
    }
}
