//! The memory of the process being measured (the executor; under `weft up` the whole fleet),
//! read from `/proc/<pid>/status` on Linux: `VmRSS` now and `VmHWM`, the peak so far.

use anyhow::Context as _;
use serde::Serialize;

/// One reading, in KiB as the kernel reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Memory {
    /// Resident set size now.
    pub rss_kib: u64,
    /// Highest resident set size since the process started.
    pub hwm_kib: u64,
}

/// Reads the memory of `pid`.
pub fn read(pid: u32) -> anyhow::Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("read {path} (is {pid} running?)"))?;
    parse(&text).with_context(|| format!("{path} has no VmRSS/VmHWM lines"))
}

/// Reads the memory of `pid` when one was given; a failure is a warning on stderr and a `null`
/// in the report, not the end of a run that took minutes.
pub fn read_opt(pid: Option<u32>) -> Option<Memory> {
    let pid = pid?;
    match read(pid) {
        Ok(m) => Some(m),
        Err(e) => {
            eprintln!("weft-loadtest: warning: {e:#}");
            None
        }
    }
}

fn parse(status: &str) -> Option<Memory> {
    let field = |name: &str| {
        status.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
    };
    Some(Memory {
        rss_kib: field("VmRSS")?,
        hwm_kib: field("VmHWM")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_status() {
        let text = "Name:\tweft\nVmPeak:\t 900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nThreads:\t9\n";
        assert_eq!(
            parse(text),
            Some(Memory {
                rss_kib: 40960,
                hwm_kib: 51200
            })
        );
        assert_eq!(parse("Name:\tkthreadd\n"), None);
    }

    #[test]
    fn reads_this_process() {
        let m = read(std::process::id()).unwrap();
        assert!(m.rss_kib > 0 && m.hwm_kib >= m.rss_kib, "{m:?}");
    }
}
