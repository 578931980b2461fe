//! Every weft binary runs on jemalloc with the options `weft_telemetry::alloc::MALLOC_CONF` bakes
//! in (background purging, a 1 s decay, no lazily-freed pages, a small cache of large objects):
//! the parked-runs memory figures in docs/performance.md depend on them.

use std::process::Command;

#[test]
fn the_weft_binary_runs_on_jemalloc_with_the_options_it_bakes_in() {
    // jemalloc prints its options on exit when asked to; the variable adds `stats_print` to the
    // baked options without replacing them.
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .expect("run weft --version");
    assert!(out.status.success(), "weft --version failed: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for opt in [
        "opt.background_thread: true",
        "opt.dirty_decay_ms: 1000",
        "opt.muzzy_decay_ms: 0",
        "opt.tcache_nslots_large: 4",
    ] {
        assert!(
            stderr.contains(opt),
            "jemalloc's options lack `{opt}`; it printed:\n{stderr}"
        );
    }
}
