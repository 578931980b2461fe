//! The tokio runtime every weft binary runs on: tokio's multi-threaded default, with two things
//! that give memory back once a burst of work is over.
//!
//! - **Idle workers flush their allocator cache** ([`crate::alloc::flush_when_idle`], at most once
//!   a second per worker); jemalloc's background thread then returns the free pages to the OS.
//! - **The program runs on the workers, not on the thread that called `main`.** That thread only
//!   waits; the program's own allocations (a dispatch loop spawning one task per run, say) land
//!   in the caches of threads that flush when idle. The program's future is polled on a worker's
//!   stack (tokio's 2 MiB), not `main`'s.
//!
//! Measured with `loadtest/runs-bench.sh` (`PARKED_SPLIT=1`): see docs/performance.md, "Issue 14,
//! seventh step".

use std::future::Future;
use std::process::ExitCode;

/// Runs `app` to completion on a new multi-threaded runtime, as `#[tokio::main]` would, and
/// returns its exit code (a failure when the runtime cannot be built; a panic in `app` unwinds
/// out of `main`, exit code 101, as it did under `#[tokio::main]`).
pub fn run<F>(name: &str, app: F) -> ExitCode
where
    F: Future<Output = ExitCode> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(crate::alloc::flush_when_idle)
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
