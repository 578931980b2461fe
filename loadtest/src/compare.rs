//! `compare`: the latency weft adds, from a run against the upstream directly and the same run
//! through weft. Added latency is `through - direct` per percentile (percentiles do not subtract
//! exactly, so this is an estimate of the overhead at that rank, and may even be negative when
//! the two runs are within noise of each other). A pair of `streams` reports gives the
//! inter-frame gap weft adds instead (see [`crate::streams::compare`]).

use std::path::Path;

use anyhow::{Context as _, bail};
use serde::Serialize;

use crate::cli::CompareArgs;
use crate::report::{Report, Summary};
use crate::streams::StreamsReport;

/// `through - direct` at each percentile, in microseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Added {
    pub p50: i64,
    pub p90: i64,
    pub p99: i64,
}

impl Added {
    fn between(direct: &Summary, through: &Summary) -> Self {
        let diff =
            |t: u64, d: u64| i64::try_from(i128::from(t) - i128::from(d)).unwrap_or(i64::MAX);
        Self {
            p50: diff(through.p50, direct.p50),
            p90: diff(through.p90, direct.p90),
            p99: diff(through.p99, direct.p99),
        }
    }
}

/// The comparison document `compare` prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub direct_url: String,
    pub through_url: String,
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    pub direct_latency_us: Summary,
    pub through_latency_us: Summary,
    pub added_latency_us: Added,
    /// Only when both runs recorded a time to first byte.
    pub added_ttfb_us: Option<Added>,
    pub direct_errors: u64,
    pub through_errors: u64,
    /// Why the two runs may not be comparable (different load, stream mode, errors).
    pub warnings: Vec<String>,
    /// The through run's server CPU and memory, when it was given `--server-pid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub through_server: Option<crate::report::ServerCost>,
}

pub fn compare(direct: &Report, through: &Report) -> anyhow::Result<Comparison> {
    let (Some(d), Some(t)) = (&direct.latency_us, &through.latency_us) else {
        bail!("both reports need successful requests to compare (a latency_us of null has none)");
    };
    let mut warnings = Vec::new();
    if direct.stream != through.stream {
        warnings.push("one run streamed and the other did not".to_owned());
    }
    if direct.concurrency != through.concurrency || direct.rate != through.rate {
        warnings.push("the runs applied different loads".to_owned());
    }
    for (name, r) in [("direct", direct), ("through", through)] {
        if r.errors > 0 {
            warnings.push(format!(
                "the {name} run had {} errors of {}",
                r.errors, r.requests
            ));
        }
    }
    let added_ttfb_us = match (&direct.ttfb_us, &through.ttfb_us) {
        (Some(d), Some(t)) => Some(Added::between(d, t)),
        _ => None,
    };
    Ok(Comparison {
        direct_url: direct.url.clone(),
        through_url: through.url.clone(),
        stream: through.stream,
        concurrency: through.concurrency,
        rate: through.rate,
        direct_latency_us: d.clone(),
        through_latency_us: t.clone(),
        added_latency_us: Added::between(d, t),
        added_ttfb_us,
        direct_errors: direct.errors,
        through_errors: through.errors,
        warnings,
        through_server: through.server.clone(),
    })
}

fn read_report(path: &Path) -> anyhow::Result<Report> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a weft-loadtest report", path.display()))
}

/// The `scenario` a report names (`chat` for reports older than the field).
fn scenario_of(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a weft-loadtest report", path.display()))?;
    Ok(v["scenario"].as_str().unwrap_or("chat").to_owned())
}

fn read_streams_report(path: &Path) -> anyhow::Result<StreamsReport> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a weft-loadtest streams report", path.display()))
}

/// Reads both reports, prints a human summary on stderr and the comparison as JSON on stdout.
pub fn run(args: &CompareArgs) -> anyhow::Result<()> {
    let kinds = (scenario_of(&args.direct)?, scenario_of(&args.through)?);
    match (kinds.0.as_str(), kinds.1.as_str()) {
        ("streams", "streams") => {
            let c = crate::streams::compare(
                &read_streams_report(&args.direct)?,
                &read_streams_report(&args.through)?,
            )?;
            eprintln!("{}", crate::streams::comparison_line(&c));
            for w in &c.warnings {
                eprintln!("warning: {w}");
            }
            return crate::emit(&c, args.out.as_deref());
        }
        ("chat", "chat") => {}
        (d, t) => bail!("cannot compare a `{d}` report with a `{t}` report"),
    }
    let direct = read_report(&args.direct)?;
    let through = read_report(&args.through)?;
    let c = compare(&direct, &through)?;
    let load = match (c.concurrency, c.rate) {
        (Some(n), _) => format!("concurrency {n}"),
        (_, Some(r)) => format!("{r}/s"),
        _ => "unknown load".to_owned(),
    };
    eprintln!(
        "added latency ({load}{}): p50 {} µs, p90 {} µs, p99 {} µs (direct p50 {} / p99 {} µs, through p50 {} / p99 {} µs)",
        if c.stream { ", stream" } else { "" },
        c.added_latency_us.p50,
        c.added_latency_us.p90,
        c.added_latency_us.p99,
        c.direct_latency_us.p50,
        c.direct_latency_us.p99,
        c.through_latency_us.p50,
        c.through_latency_us.p99,
    );
    if let Some(s) = &c.through_server {
        eprintln!(
            "server CPU: {} µs per request ({}% of a core), RSS {} KiB",
            s.cpu_us_per_request, s.cpu_pct, s.rss_kib
        );
    }
    for w in &c.warnings {
        eprintln!("warning: {w}");
    }
    crate::emit(&c, args.out.as_deref())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn report(p50: u64, p90: u64, p99: u64, errors: u64) -> Report {
        let s = Summary {
            p50,
            p90,
            p99,
            max: p99 * 2,
            mean: p50 as f64,
        };
        Report {
            scenario: "chat".to_owned(),
            url: "http://127.0.0.1:1/v1".to_owned(),
            model: "m".to_owned(),
            stream: false,
            concurrency: Some(1),
            rate: None,
            max_in_flight: None,
            warmup_s: 2.0,
            threads: 1,
            duration_s: 10.0,
            requests: 1000,
            errors,
            error_kinds: BTreeMap::new(),
            rps: 100.0,
            latency_us: Some(s.clone()),
            ttfb_us: Some(s),
            send_lag_us: None,
            server: None,
        }
    }

    #[test]
    fn added_latency_is_through_minus_direct() {
        let c = compare(&report(100, 150, 300, 0), &report(180, 260, 700, 0)).unwrap();
        assert_eq!(
            c.added_latency_us,
            Added {
                p50: 80,
                p90: 110,
                p99: 400
            }
        );
        assert_eq!(c.added_ttfb_us, Some(c.added_latency_us.clone()));
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn added_latency_can_be_negative() {
        let c = compare(&report(200, 300, 900, 0), &report(190, 310, 800, 0)).unwrap();
        assert_eq!(c.added_latency_us.p50, -10);
        assert_eq!(c.added_latency_us.p99, -100);
    }

    #[test]
    fn mismatched_runs_warn_and_empty_runs_fail() {
        let mut through = report(100, 100, 100, 3);
        through.concurrency = Some(64);
        through.stream = true;
        let c = compare(&report(100, 100, 100, 0), &through).unwrap();
        assert_eq!(c.warnings.len(), 3, "{:?}", c.warnings);

        let mut empty = report(1, 1, 1, 1000);
        empty.latency_us = None;
        assert!(compare(&report(1, 1, 1, 0), &empty).is_err());
    }

    #[test]
    fn reads_a_report_with_unknown_fields() {
        let mut v = serde_json::to_value(report(1, 2, 3, 0)).unwrap();
        v["from_the_future"] = serde_json::json!(true);
        let r: Report = serde_json::from_value(v).unwrap();
        assert_eq!(r.latency_us.unwrap().p99, 3);
    }
}
