//! CPU time from `/proc`: a process's (user + system, from `/proc/<pid>/stat`) and the whole
//! machine's busy time (from `/proc/stat`). Reported next to latency because on a shared VM
//! the CPU spent per request moves far less than wall-clock times do.

/// The kernel's clock ticks per second for `/proc` CPU times (`USER_HZ`, 100 on Linux whatever
/// the kernel's internal `HZ`). Readings are therefore in 10 ms steps.
const USER_HZ: f64 = 100.0;

/// CPU seconds (user + system) of process `pid` so far, or `None` when it cannot be read.
pub fn process_seconds(pid: u32) -> Option<f64> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// CPU seconds (user + system) of this process so far.
pub fn self_seconds() -> Option<f64> {
    parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// The summed CPU seconds of `pids`; `None` when any of them cannot be read.
pub fn processes_seconds(pids: &[u32]) -> Option<f64> {
    pids.iter().map(|p| process_seconds(*p)).sum()
}

fn parse_stat(stat: &str) -> Option<f64> {
    // The command name (field 2) may contain spaces; the fields after it are plain numbers.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12th and 13th after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// Busy CPU seconds of the whole machine (all but idle and iowait), from `/proc/stat`.
pub fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4)?;
    Some((total - idle) as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_spaces_in_the_name() {
        let line = "42 (weft (up) x) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0";
        assert_eq!(parse_stat(line), Some(3.25));
    }

    #[test]
    fn this_process_is_readable() {
        assert!(self_seconds().is_some());
        assert!(process_seconds(std::process::id()).is_some());
        assert!(processes_seconds(&[std::process::id(), std::process::id()]).is_some());
        assert!(machine_busy_seconds().is_some());
    }
}
