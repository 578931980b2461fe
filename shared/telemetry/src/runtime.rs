//! The tokio runtime every weft binary runs on: tokio's multi-threaded default, whose idle workers
//! flush their allocator cache ([`crate::alloc::flush_when_idle`]). The program runs on a worker,
//! not on `main`'s thread, so its allocations too land in caches that get flushed (see
//! docs/performance.md, "Issue 14, seventh step").

use std::future::Future;
use std::process::ExitCode;

/// Runs `app` on a new multi-threaded runtime, as `#[tokio::main]` would (a panic unwinds out of
/// `main`, exit 101); a failure exit code when the runtime cannot be built.
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
