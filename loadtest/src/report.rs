//! What a run measured: a [`Recorder`] collects outcomes into HDR histograms (microseconds) and
//! an error tally, and a [`Report`] is the JSON document `chat` prints and `compare` reads. The
//! `runs` and `parked` scenarios build their own reports from the same [`Summary`] and count
//! their [`Failures`] by kind.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use anyhow::Context as _;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest latency the histograms track; longer samples are clamped to it (an hour is far beyond
/// any per-request timeout).
const MAX_TRACKED_US: u64 = 3_600_000_000;
/// Three significant digits: 0.1% relative error at any magnitude.
const SIGNIFICANT_DIGITS: u8 = 3;

/// Why a request did not count as a success. The `Display` form is the key in `error_kinds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The server answered with a non-2xx status.
    Status(u16),
    /// No TCP connection could be made.
    Connect,
    /// The request failed after connecting (reset, closed, protocol error).
    Request,
    /// Reading the response body failed part way.
    Body,
    /// A 2xx body that is not a finished completion (bad JSON, no `finish_reason`, an error event).
    Invalid,
    /// A stream that ended without `data: [DONE]`.
    Incomplete,
    /// The per-request deadline passed.
    Timeout,
    /// Open loop only: the in-flight cap was reached, so the arrival was never sent.
    Dropped,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Status(code) => write!(f, "status_{code}"),
            Self::Connect => f.write_str("connect"),
            Self::Request => f.write_str("request"),
            Self::Body => f.write_str("body"),
            Self::Invalid => f.write_str("invalid"),
            Self::Incomplete => f.write_str("incomplete"),
            Self::Timeout => f.write_str("timeout"),
            Self::Dropped => f.write_str("dropped"),
        }
    }
}

/// A failed operation of the `runs` or `parked` scenario: `kind` is the key in
/// `failure_kinds` (`<phase>:<what>`, e.g. `start:status_429`, `run:failed`), `detail` what was
/// seen (the start of an error body, the `run_finished` data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub kind: String,
    pub detail: Option<String>,
}

impl Failure {
    pub fn new(kind: impl Into<String>, detail: Option<String>) -> Self {
        Self {
            kind: kind.into(),
            detail,
        }
    }
}

/// Failures counted by kind, with the first detail seen of each kind, so a report says what
/// the server answered and not only how often.
#[derive(Clone, Debug, Default)]
pub struct Failures {
    counts: BTreeMap<String, u64>,
    samples: BTreeMap<String, String>,
}

impl Failures {
    pub fn add(&mut self, f: Failure) {
        *self.counts.entry(f.kind.clone()).or_default() += 1;
        if let Some(detail) = f.detail {
            self.samples.entry(f.kind).or_insert(detail);
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    pub fn counts(&self) -> &BTreeMap<String, u64> {
        &self.counts
    }

    pub fn samples(&self) -> &BTreeMap<String, String> {
        &self.samples
    }
}

/// Timings of one successful request, both measured from the same origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Until the whole body was read (for a stream, through `data: [DONE]`).
    pub latency: Duration,
    /// Until the first body bytes arrived.
    pub ttfb: Duration,
}

/// Outcomes of the measured requests of a run.
pub struct Recorder {
    latency: Histogram<u64>,
    ttfb: Histogram<u64>,
    send_lag: Histogram<u64>,
    ok: u64,
    errors: BTreeMap<String, u64>,
}

pub(crate) fn histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, MAX_TRACKED_US, SIGNIFICANT_DIGITS).context("create a histogram")
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Recorder {
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            latency: histogram()?,
            ttfb: histogram()?,
            send_lag: histogram()?,
            ok: 0,
            errors: BTreeMap::new(),
        })
    }

    pub fn record(&mut self, outcome: Result<Timing, ErrorKind>) {
        match outcome {
            Ok(t) => {
                self.ok += 1;
                self.latency.saturating_record(micros(t.latency));
                self.ttfb.saturating_record(micros(t.ttfb));
            }
            Err(kind) => *self.errors.entry(kind.to_string()).or_default() += 1,
        }
    }

    /// Open loop: how late a request was sent relative to its scheduled time.
    pub fn record_send_lag(&mut self, lag: Duration) {
        self.send_lag.saturating_record(micros(lag));
    }

    pub fn merge(&mut self, other: &Self) -> anyhow::Result<()> {
        self.latency
            .add(&other.latency)
            .context("merge histograms")?;
        self.ttfb.add(&other.ttfb).context("merge histograms")?;
        self.send_lag
            .add(&other.send_lag)
            .context("merge histograms")?;
        self.ok += other.ok;
        for (k, v) in &other.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
        Ok(())
    }

    pub fn errors(&self) -> u64 {
        self.errors.values().sum()
    }

    pub fn requests(&self) -> u64 {
        self.ok + self.errors()
    }
}

/// Percentiles of one histogram, in microseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
    pub mean: f64,
}

impl Summary {
    /// `None` when nothing was recorded: a report says `null` rather than a misleading zero.
    pub(crate) fn of(h: &Histogram<u64>) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        Some(Self {
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
            mean: (h.mean() * 10.0).round() / 10.0,
        })
    }
}

/// How the load was applied.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    Concurrency(u32),
    Rate { per_second: f64, max_in_flight: u32 },
}

/// What the run was, for the report header.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub url: String,
    pub model: String,
    pub stream: bool,
    pub load: Load,
    pub warmup: Duration,
    pub threads: u16,
}

/// The JSON report of one `chat` run. Extra fields are tolerated when reading, so `compare`
/// keeps working on reports from newer or older generators.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub scenario: String,
    pub url: String,
    #[serde(default)]
    pub model: String,
    pub stream: bool,
    /// Closed loop: the number of workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Open loop: the arrival rate, per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Open loop: the in-flight cap beyond which arrivals were dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    #[serde(default)]
    pub warmup_s: f64,
    #[serde(default)]
    pub threads: u16,
    /// Wall time of the measured window: from the end of the warm-up until the last measured
    /// request finished.
    pub duration_s: f64,
    /// Measured requests, successes and errors (including dropped arrivals).
    pub requests: u64,
    pub errors: u64,
    pub error_kinds: BTreeMap<String, u64>,
    /// Successful requests per second of `duration_s`.
    pub rps: f64,
    /// Full-response latency of successful requests.
    pub latency_us: Option<Summary>,
    /// Time to the first body bytes of successful requests.
    pub ttfb_us: Option<Summary>,
    /// Open loop only: how late requests were sent against their schedule. A high p99 means the
    /// generator itself could not keep up and the run measured the generator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_lag_us: Option<Summary>,
    /// With `--server-pid`: what the measured process(es) spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerCost>,
}

/// CPU and memory of the measured server process(es) over a run's measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerCost {
    pub pids: Vec<u32>,
    /// User + system CPU seconds of all `pids` over the window (10 ms resolution).
    pub cpu_s: f64,
    /// `cpu_s` per measured request (successes and errors), in microseconds.
    pub cpu_us_per_request: f64,
    /// `cpu_s` over the window's wall time, in percent of one core.
    pub cpu_pct: f64,
    /// Resident memory of all `pids` at the end, and their summed peaks, in KiB.
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

impl ServerCost {
    /// `cpu_s` from two readings, spread over `units` (requests or frames) and `wall_s`.
    pub fn new(pids: &[u32], cpu_s: f64, units: u64, wall_s: f64) -> Self {
        let (rss_kib, hwm_kib) = pids
            .iter()
            .filter_map(|p| crate::rss::read_opt(Some(*p)))
            .fold((0, 0), |(r, h), m| (r + m.rss_kib, h + m.hwm_kib));
        let round1 = |x: f64| (x * 10.0).round() / 10.0;
        Self {
            pids: pids.to_vec(),
            cpu_s: (cpu_s * 100.0).round() / 100.0,
            cpu_us_per_request: if units > 0 {
                round1(cpu_s * 1e6 / units as f64)
            } else {
                0.0
            },
            cpu_pct: if wall_s > 0.0 {
                round1(cpu_s / wall_s * 100.0)
            } else {
                0.0
            },
            rss_kib,
            hwm_kib,
        }
    }
}

impl Report {
    pub fn new(info: &RunInfo, rec: &Recorder, window: Duration) -> Self {
        let seconds = window.as_secs_f64();
        let round3 = |x: f64| (x * 1000.0).round() / 1000.0;
        let (concurrency, rate, max_in_flight) = match info.load {
            Load::Concurrency(c) => (Some(c), None, None),
            Load::Rate {
                per_second,
                max_in_flight,
            } => (None, Some(per_second), Some(max_in_flight)),
        };
        Self {
            scenario: "chat".to_owned(),
            url: info.url.clone(),
            model: info.model.clone(),
            stream: info.stream,
            concurrency,
            rate,
            max_in_flight,
            warmup_s: round3(info.warmup.as_secs_f64()),
            threads: info.threads,
            duration_s: round3(seconds),
            requests: rec.requests(),
            errors: rec.errors(),
            error_kinds: rec.errors.clone(),
            rps: if seconds > 0.0 {
                (rec.ok as f64 / seconds * 10.0).round() / 10.0
            } else {
                0.0
            },
            latency_us: Summary::of(&rec.latency),
            ttfb_us: Summary::of(&rec.ttfb),
            send_lag_us: rate.and_then(|_| Summary::of(&rec.send_lag)),
            server: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(us: u64) -> Result<Timing, ErrorKind> {
        Ok(Timing {
            latency: Duration::from_micros(us),
            ttfb: Duration::from_micros(us / 2),
        })
    }

    fn info(load: Load) -> RunInfo {
        RunInfo {
            url: "http://127.0.0.1:1/v1".to_owned(),
            model: "m".to_owned(),
            stream: false,
            load,
            warmup: Duration::from_secs(2),
            threads: 1,
        }
    }

    #[test]
    fn percentiles_of_one_to_a_thousand() {
        let mut r = Recorder::new().unwrap();
        for us in 1..=1000 {
            r.record(ok(us));
        }
        let s = Summary::of(&r.latency).unwrap();
        // Three significant digits: values up to 1000 are exact.
        assert_eq!(s.p50, 500);
        assert_eq!(s.p90, 900);
        assert_eq!(s.p99, 990);
        assert_eq!(s.max, 1000);
        assert!((s.mean - 500.5).abs() < 0.5, "mean {}", s.mean);
        let t = Summary::of(&r.ttfb).unwrap();
        assert_eq!(t.max, 500);
    }

    #[test]
    fn merge_adds_counts_and_errors() {
        let mut a = Recorder::new().unwrap();
        let mut b = Recorder::new().unwrap();
        a.record(ok(100));
        a.record(Err(ErrorKind::Status(502)));
        b.record(ok(300));
        b.record(Err(ErrorKind::Status(502)));
        b.record(Err(ErrorKind::Timeout));
        a.merge(&b).unwrap();
        assert_eq!(a.requests(), 5);
        assert_eq!(a.errors(), 3);
        assert_eq!(a.errors.get("status_502"), Some(&2));
        assert_eq!(a.errors.get("timeout"), Some(&1));
        assert_eq!(Summary::of(&a.latency).unwrap().max, 300);
    }

    #[test]
    fn report_counts_rps_from_successes_over_the_window() {
        let mut r = Recorder::new().unwrap();
        for _ in 0..30 {
            r.record(ok(1000));
        }
        r.record(Err(ErrorKind::Dropped));
        let rep = Report::new(
            &info(Load::Rate {
                per_second: 10.0,
                max_in_flight: 4,
            }),
            &r,
            Duration::from_secs(3),
        );
        assert_eq!(rep.requests, 31);
        assert_eq!(rep.errors, 1);
        assert!((rep.rps - 10.0).abs() < 1e-9);
        assert_eq!(rep.rate, Some(10.0));
        assert_eq!(rep.concurrency, None);
    }

    #[test]
    fn report_json_shape_and_round_trip() {
        let mut r = Recorder::new().unwrap();
        r.record(ok(250));
        r.record(Err(ErrorKind::Incomplete));
        let rep = Report::new(&info(Load::Concurrency(8)), &r, Duration::from_secs(1));
        let v = serde_json::to_value(&rep).unwrap();
        assert_eq!(v["scenario"], "chat");
        assert_eq!(v["concurrency"], 8);
        assert!(v.get("rate").is_none());
        assert!(v.get("send_lag_us").is_none());
        assert_eq!(v["error_kinds"]["incomplete"], 1);
        for k in ["p50", "p90", "p99", "max", "mean"] {
            assert!(v["latency_us"][k].is_number(), "latency_us.{k}");
            assert!(v["ttfb_us"][k].is_number(), "ttfb_us.{k}");
        }
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back, rep);
    }

    #[test]
    fn failures_keep_counts_and_the_first_detail() {
        let mut a = Failures::default();
        a.add(Failure::new("start:status_500", Some("first".into())));
        a.add(Failure::new("start:status_500", Some("second".into())));
        a.add(Failure::new("run:failed", None));
        a.add(Failure::new("run:failed", Some("later".into())));
        assert_eq!(a.total(), 4);
        assert_eq!(a.counts().get("run:failed"), Some(&2));
        assert_eq!(
            a.samples().get("start:status_500").map(String::as_str),
            Some("first")
        );
        assert_eq!(
            a.samples().get("run:failed").map(String::as_str),
            Some("later")
        );
    }

    #[test]
    fn no_successes_means_null_latency() {
        let mut r = Recorder::new().unwrap();
        r.record(Err(ErrorKind::Connect));
        let rep = Report::new(&info(Load::Concurrency(1)), &r, Duration::from_secs(1));
        let v = serde_json::to_value(&rep).unwrap();
        assert!(v["latency_us"].is_null());
        assert_eq!(v["rps"], 0.0);
    }
}
