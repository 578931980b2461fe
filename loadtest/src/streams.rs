//! The `streams` scenario: many concurrent streaming chat completions, each asking the paced
//! upstream (`upstream --deltas`) for `--deltas` sequence-numbered deltas `--gap-ms` apart with
//! a `#pace` line, and every frame timed on arrival by this client.
//!
//! N workers each open a stream, read it to its end and open the next: `--warmup-rounds`
//! streams first (not recorded), then `--rounds` streams or streams until `--duration` has
//! passed. The workers' first streams start spread over `--ramp` (one stream's length by
//! default), so both the requests and the deltas of different streams fall evenly over time:
//! streams that all start together also all end and restart together, and the burst of new
//! requests every stream-length delays everyone's deltas.
//!
//! What a stream is checked for: a 2xx status; the delta numbers `0..deltas` each exactly once
//! and in order (lost, duplicated, out of order, unexpected text, several numbers in one event
//! are all counted); a chunk with a `finish_reason`; `data: [DONE]` last; no error event.
//! What is timed, from the arrival of each body chunk that carries a delta (a time per chunk, so
//! a slow parse does not count): the gap between two consecutive delta events of one stream;
//! the time from sending the request to the first delta; and the schedule lag, how much later
//! than `first delta + k × gap` delta k arrived (the delay a stream accumulated).
//!
//! The generator shares the machine with what it measures; its timestamps are taken when its
//! runtime gets to a chunk, so a starved generator shows up as wider gaps in the direct run
//! too. Compare a run through weft with a direct run of the same shape (`compare`), and look at
//! `generator_cpu_pct`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail};
use hdrhistogram::Histogram;
use http_body_util::BodyExt as _;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio::time::Instant;
use weft_wire::openai;

use crate::api::snippet;
use crate::cli::StreamsArgs;
use crate::client::{Target, TargetSpec};
use crate::paced::pace_line;
use crate::report::{ErrorKind, Failure, Failures, histogram, micros};
use crate::sse::SseParser;

/// Measured streams per worker when neither `--rounds` nor `--duration` is given.
const DEFAULT_ROUNDS: u32 = 3;
/// After a failed stream a worker waits this long before its next, so a server refusing at
/// once is not hammered in a tight loop.
const BACKOFF: Duration = Duration::from_millis(50);
/// How much of an error body is read to say what the server answered.
const ERROR_BODY: usize = 64 << 10;
/// Slack on top of `deltas × gap` for the default per-stream deadline.
const TIMEOUT_SLACK: Duration = Duration::from_secs(30);
/// The preflight stream: a few deltas, quickly.
const PREFLIGHT_DELTAS: u32 = 3;
const PREFLIGHT_GAP_MS: u64 = 1;

/// A distribution in microseconds (HDR histogram, 3 significant digits).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    pub count: u64,
    pub min: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

impl Dist {
    fn of(h: &Histogram<u64>) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        Some(Self {
            count: h.len(),
            min: h.min(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: (h.mean() * 10.0).round() / 10.0,
        })
    }
}

/// The JSON report of one `streams` run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamsReport {
    pub scenario: String,
    pub url: String,
    pub model: String,
    pub concurrency: u32,
    pub deltas: u32,
    pub gap_ms: u64,
    /// Measured streams per worker, when the run was given in rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
    /// How long each worker opened measured streams, when the run was given a duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    pub warmup_rounds: u32,
    pub ramp_ms: f64,
    pub threads: u16,
    /// Wall time from the start of the first measured stream to the end of the last.
    pub window_s: f64,
    pub streams_started: u64,
    /// Streams that ended properly (`finish_reason`, `[DONE]`), lost frames or not.
    pub streams_completed: u64,
    pub streams_failed: u64,
    pub failure_kinds: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failure_samples: BTreeMap<String, String>,
    /// `deltas` per measured stream, failed ones included.
    pub frames_expected: u64,
    /// Delta numbers received, duplicates included.
    pub frames_received: u64,
    /// Delta numbers never received (failed streams included).
    pub frames_lost: u64,
    pub frames_duplicated: u64,
    /// Received after a higher number of the same stream.
    pub frames_out_of_order: u64,
    /// Content that is not a delta number of the stream.
    pub frames_unexpected: u64,
    /// Events that carried more than one delta number.
    pub events_coalesced: u64,
    /// Delta numbers received per second of `window_s`.
    pub frames_per_s: f64,
    /// Time between two consecutive delta events of one stream.
    pub gap_us: Option<Dist>,
    /// From sending the request to the first delta.
    pub ttff_us: Option<Dist>,
    /// How much later than `first delta + k × gap` delta k arrived.
    pub schedule_lag_us: Option<Dist>,
    /// CPU time this generator used over the whole run (warm-up included), from
    /// `/proc/self/stat`.
    pub generator_cpu_s: Option<f64>,
    /// `generator_cpu_s` over the run's wall time, in percent of one core.
    pub generator_cpu_pct: Option<f64>,
    /// With `--server-pid`: the server's CPU over the whole run; `cpu_us_per_request` is per
    /// frame received (warm-up rounds included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<crate::report::ServerCost>,
}

/// What one stream saw; times are from sending its request.
#[derive(Debug)]
struct StreamLog {
    deltas: u32,
    gap: Duration,
    seen: Vec<bool>,
    distinct: u32,
    max_seq: Option<u32>,
    received: u64,
    duplicated: u64,
    out_of_order: u64,
    unexpected: u64,
    coalesced: u64,
    /// Arrival and number of the first delta.
    first: Option<(Duration, u32)>,
    last_at: Option<Duration>,
    gaps: Vec<Duration>,
    lags: Vec<Duration>,
    finished: bool,
    done: bool,
}

fn clip(data: &str) -> String {
    snippet(data.as_bytes())
}

impl StreamLog {
    fn new(deltas: u32, gap: Duration) -> Self {
        let n = usize::try_from(deltas).unwrap_or(usize::MAX);
        Self {
            deltas,
            gap,
            seen: vec![false; n],
            distinct: 0,
            max_seq: None,
            received: 0,
            duplicated: 0,
            out_of_order: 0,
            unexpected: 0,
            coalesced: 0,
            first: None,
            last_at: None,
            gaps: Vec::with_capacity(n),
            lags: Vec::with_capacity(n),
            finished: false,
            done: false,
        }
    }

    fn lost(&self) -> u64 {
        u64::from(self.deltas - self.distinct)
    }

    /// One SSE event's data, whose chunk arrived `at`.
    fn on_event(&mut self, data: &str, at: Duration) -> Result<(), Failure> {
        if self.done {
            return Err(Failure::new(
                "invalid",
                Some(format!("data after [DONE]: {}", clip(data))),
            ));
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        // Read as the router reads an upstream's chunk.
        let chunk: openai::read::Chunk<'_> =
            serde_json::from_str(data).map_err(|_| Failure::new("invalid", Some(clip(data))))?;
        if chunk.error.is_some() {
            return Err(Failure::new("error_event", Some(clip(data))));
        }
        let choices = chunk.choices.iter().flatten().filter_map(|c| c.0.as_ref());
        for choice in choices {
            if choice.finish_reason.is_some() {
                self.finished = true;
            }
            if let Some(text) = choice.delta.as_ref().and_then(|d| d.content.as_deref()) {
                self.on_content(text, at);
            }
        }
        Ok(())
    }

    fn on_content(&mut self, text: &str, at: Duration) {
        let mut numbers = 0_u32;
        let mut top: Option<u32> = None;
        for token in text.split_whitespace() {
            let Some(seq) = token.parse::<u32>().ok().filter(|&s| s < self.deltas) else {
                self.unexpected += 1;
                continue;
            };
            numbers += 1;
            self.received += 1;
            let Some(seen) = usize::try_from(seq).ok().and_then(|i| self.seen.get_mut(i)) else {
                continue;
            };
            if *seen {
                self.duplicated += 1;
                continue;
            }
            *seen = true;
            self.distinct += 1;
            if self.max_seq.is_some_and(|m| seq < m) {
                self.out_of_order += 1;
            } else {
                self.max_seq = Some(seq);
            }
            top = Some(top.map_or(seq, |t| t.max(seq)));
        }
        if numbers == 0 {
            return;
        }
        if numbers > 1 {
            self.coalesced += 1;
        }
        if let Some(prev) = self.last_at {
            self.gaps.push(at.saturating_sub(prev));
        }
        self.last_at = Some(at);
        match (self.first, top) {
            (None, Some(seq)) => self.first = Some((at, seq)),
            (Some((t0, s0)), Some(seq)) if seq >= s0 => {
                let due = t0 + self.gap * (seq - s0);
                self.lags.push(at.saturating_sub(due));
            }
            _ => {}
        }
    }

    /// Whether the stream ended as a finished completion.
    fn finish(&self) -> Result<(), Failure> {
        if !self.done {
            return Err(Failure::new("incomplete", None));
        }
        if !self.finished {
            return Err(Failure::new(
                "invalid",
                Some("no chunk with a finish_reason".to_owned()),
            ));
        }
        Ok(())
    }
}

/// The measured streams of a run, all workers together.
struct Tally {
    gaps: Histogram<u64>,
    ttff: Histogram<u64>,
    lags: Histogram<u64>,
    started: u64,
    completed: u64,
    failures: Failures,
    expected: u64,
    received: u64,
    lost: u64,
    duplicated: u64,
    out_of_order: u64,
    unexpected: u64,
    coalesced: u64,
    window: Option<(Instant, Instant)>,
}

impl Tally {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            gaps: histogram()?,
            ttff: histogram()?,
            lags: histogram()?,
            started: 0,
            completed: 0,
            failures: Failures::default(),
            expected: 0,
            received: 0,
            lost: 0,
            duplicated: 0,
            out_of_order: 0,
            unexpected: 0,
            coalesced: 0,
            window: None,
        })
    }

    fn record(
        &mut self,
        log: &StreamLog,
        outcome: Result<(), Failure>,
        from: Instant,
        to: Instant,
    ) {
        self.started += 1;
        match outcome {
            Ok(()) => self.completed += 1,
            Err(f) => self.failures.add(f),
        }
        self.expected += u64::from(log.deltas);
        self.received += log.received;
        self.lost += log.lost();
        self.duplicated += log.duplicated;
        self.out_of_order += log.out_of_order;
        self.unexpected += log.unexpected;
        self.coalesced += log.coalesced;
        for g in &log.gaps {
            self.gaps.saturating_record(micros(*g));
        }
        for l in &log.lags {
            self.lags.saturating_record(micros(*l));
        }
        if let Some((t, _)) = log.first {
            self.ttff.saturating_record(micros(t));
        }
        self.window = Some(match self.window {
            None => (from, to),
            Some((a, b)) => (a.min(from), b.max(to)),
        });
    }
}

/// How long the measured part of a run is.
#[derive(Clone, Copy)]
enum Length {
    Rounds(u32),
    Duration(Duration),
}

/// What every worker shares.
struct Ctx {
    target: Target,
    deltas: u32,
    gap: Duration,
    warmup_rounds: u32,
    length: Length,
    timeout: Duration,
    tally: Mutex<Tally>,
    /// Frames received by every stream, warm-up rounds included (for the server's CPU per frame).
    all_frames: std::sync::atomic::AtomicU64,
}

/// Runs one stream to its end, filling `log`; the caller bounds it with the deadline, so what
/// arrived before a timeout stays in `log`.
async fn one_stream(target: &Target, sent: Instant, log: &mut StreamLog) -> Result<(), Failure> {
    let resp = target
        .open()
        .await
        .map_err(|k| Failure::new(k.to_string(), None))?;
    let status = resp.status();
    let mut body = resp.into_body();
    if !status.is_success() {
        let bytes = http_body_util::Limited::new(body, ERROR_BODY)
            .collect()
            .await
            .map(http_body_util::Collected::to_bytes)
            .unwrap_or_default();
        return Err(Failure::new(
            ErrorKind::Status(status.as_u16()).to_string(),
            Some(snippet(&bytes)),
        ));
    }
    let mut parser = SseParser::default();
    let mut events = VecDeque::new();
    while let Some(frame) = body.frame().await {
        let at = sent.elapsed();
        let frame = frame.map_err(|_| Failure::new(ErrorKind::Body.to_string(), None))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        parser
            .feed(&data, &mut events)
            .map_err(|k| Failure::new(k.to_string(), None))?;
        while let Some(ev) = events.pop_front() {
            log.on_event(&ev.data, at)?;
        }
    }
    if parser.is_mid_frame() {
        return Err(Failure::new(ErrorKind::Incomplete.to_string(), None));
    }
    log.finish()
}

/// One stream with its deadline.
async fn timed_stream(
    target: &Target,
    timeout: Duration,
    log: &mut StreamLog,
) -> Result<(), Failure> {
    let sent = Instant::now();
    match tokio::time::timeout(timeout, one_stream(target, sent, log)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(Failure::new(ErrorKind::Timeout.to_string(), None)),
    }
}

async fn worker(ctx: Arc<Ctx>, delay: Duration) {
    tokio::time::sleep(delay).await;
    let mut n: u32 = 0;
    let mut measure_until: Option<Instant> = None;
    loop {
        let measured = n >= ctx.warmup_rounds;
        if measured {
            match ctx.length {
                Length::Rounds(r) => {
                    if n - ctx.warmup_rounds >= r {
                        break;
                    }
                }
                Length::Duration(d) => {
                    let until = *measure_until.get_or_insert_with(|| Instant::now() + d);
                    if Instant::now() >= until {
                        break;
                    }
                }
            }
        }
        let mut log = StreamLog::new(ctx.deltas, ctx.gap);
        let from = Instant::now();
        let outcome = timed_stream(&ctx.target, ctx.timeout, &mut log).await;
        let failed = outcome.is_err();
        ctx.all_frames
            .fetch_add(log.received, std::sync::atomic::Ordering::Relaxed);
        if measured && let Ok(mut tally) = ctx.tally.lock() {
            tally.record(&log, outcome, from, Instant::now());
        }
        n = n.saturating_add(1);
        if failed {
            tokio::time::sleep(BACKOFF).await;
        }
    }
}

/// When worker `k` opens its first stream: the fractional parts of `k × φ⁻¹` (a low-discrepancy
/// sequence) spread over `ramp`. With `ramp` one stream long, stream starts are even over time
/// and so are the deltas' phases within one gap, whatever the concurrency; an even stride
/// (`ramp × k / n`) would put all deltas on a few phases of the gap when the stride divides it.
fn start_offset(k: u32, ramp: Duration) -> Duration {
    const INVERSE_GOLDEN_RATIO: f64 = 0.618_033_988_749_895;
    ramp.mul_f64((f64::from(k) * INVERSE_GOLDEN_RATIO).fract())
}

fn target(args: &StreamsArgs, prompt: &str) -> anyhow::Result<Target> {
    Target::new(&TargetSpec {
        url: &args.url,
        token: args.token.as_deref(),
        model: &args.model,
        prompt,
        stream: true,
        door: crate::client::Door::Chat,
        timeout: Duration::from_secs(10),
        connections: usize::try_from(args.concurrency).unwrap_or(usize::MAX),
        headers: &args.headers,
    })
}

/// A short stream before the load: a wrong URL, token or model, or an upstream that does not
/// pace, stops the run with an explanation instead of a report full of failures.
async fn preflight(args: &StreamsArgs) -> anyhow::Result<()> {
    let target = target(args, &pace_line(PREFLIGHT_DELTAS, PREFLIGHT_GAP_MS))?;
    let mut log = StreamLog::new(PREFLIGHT_DELTAS, Duration::from_millis(PREFLIGHT_GAP_MS));
    if let Err(f) = timed_stream(&target, Duration::from_secs(10), &mut log).await {
        bail!(
            "preflight stream to {} failed: {}{}",
            args.url,
            f.kind,
            f.detail.map(|d| format!(": {d}")).unwrap_or_default()
        );
    }
    if log.distinct != PREFLIGHT_DELTAS || log.duplicated + log.out_of_order + log.unexpected > 0 {
        bail!(
            "preflight stream to {} did not carry the delta numbers 0..{PREFLIGHT_DELTAS} \
             (got {} of them, {} unexpected pieces of text): is the upstream the paced one \
             (`weft-loadtest upstream --deltas N`)?",
            args.url,
            log.distinct,
            log.unexpected
        );
    }
    Ok(())
}

pub async fn run(args: &StreamsArgs) -> anyhow::Result<StreamsReport> {
    let gap = Duration::from_millis(args.gap_ms);
    let length = match (args.rounds, args.duration) {
        (_, Some(d)) => Length::Duration(d),
        (r, None) => Length::Rounds(r.unwrap_or(DEFAULT_ROUNDS)),
    };
    let timeout = match args.timeout {
        Some(t) => t,
        None => gap
            .checked_mul(args.deltas)
            .and_then(|d| d.checked_add(TIMEOUT_SLACK))
            .context("--deltas × --gap-ms is too long")?,
    };
    let ramp = match args.ramp {
        Some(r) => r,
        None => gap
            .checked_mul(args.deltas)
            .context("--deltas × --gap-ms is too long")?,
    };
    if !args.no_preflight {
        preflight(args).await?;
    }
    let ctx = Arc::new(Ctx {
        target: target(args, &pace_line(args.deltas, args.gap_ms))?,
        deltas: args.deltas,
        gap,
        warmup_rounds: args.warmup_rounds,
        length,
        timeout,
        tally: Mutex::new(Tally::new()?),
        all_frames: std::sync::atomic::AtomicU64::new(0),
    });
    eprintln!(
        "streams: {} concurrent streams of {} deltas {} ms apart against {}, {} after {} warm-up round(s)",
        args.concurrency,
        args.deltas,
        args.gap_ms,
        args.url,
        match length {
            Length::Rounds(r) => format!("{r} round(s)"),
            Length::Duration(d) => format!("{d:?}"),
        },
        args.warmup_rounds,
    );
    let pids = &args.server_pids;
    let server0 = crate::cpu::processes_seconds(pids);
    if !pids.is_empty() && server0.is_none() {
        anyhow::bail!("--server-pid {pids:?}: cannot read /proc/<pid>/stat (is it running?)");
    }
    let cpu0 = crate::cpu::self_seconds();
    let t0 = Instant::now();
    let mut workers = JoinSet::new();
    for k in 0..args.concurrency {
        workers.spawn(worker(ctx.clone(), start_offset(k, ramp)));
    }
    while let Some(done) = workers.join_next().await {
        done.context("a stream worker failed")?;
    }
    let wall = t0.elapsed();
    let cpu = cpu0.zip(crate::cpu::self_seconds()).map(|(a, b)| b - a);
    let server = server0
        .zip(crate::cpu::processes_seconds(pids))
        .filter(|_| !pids.is_empty())
        .map(|(a, b)| {
            let frames = ctx.all_frames.load(std::sync::atomic::Ordering::Relaxed);
            crate::report::ServerCost::new(pids, b - a, frames, wall.as_secs_f64())
        });
    let tally = ctx
        .tally
        .lock()
        .map_err(|_| anyhow::anyhow!("the tally lock was poisoned"))?;
    let mut r = report(args, length, ramp, &tally, cpu, wall);
    r.server = server;
    Ok(r)
}

fn round(x: f64, places: i32) -> f64 {
    let f = 10_f64.powi(places);
    (x * f).round() / f
}

fn report(
    args: &StreamsArgs,
    length: Length,
    ramp: Duration,
    t: &Tally,
    cpu: Option<f64>,
    wall: Duration,
) -> StreamsReport {
    let window = t
        .window
        .map_or(Duration::ZERO, |(a, b)| b.saturating_duration_since(a));
    let window_s = window.as_secs_f64();
    StreamsReport {
        scenario: "streams".to_owned(),
        url: args.url.clone(),
        model: args.model.clone(),
        concurrency: args.concurrency,
        deltas: args.deltas,
        gap_ms: args.gap_ms,
        rounds: match length {
            Length::Rounds(r) => Some(r),
            Length::Duration(_) => None,
        },
        duration_s: match length {
            Length::Rounds(_) => None,
            Length::Duration(d) => Some(round(d.as_secs_f64(), 3)),
        },
        warmup_rounds: args.warmup_rounds,
        ramp_ms: round(ramp.as_secs_f64() * 1e3, 3),
        threads: args.threads,
        window_s: round(window_s, 3),
        streams_started: t.started,
        streams_completed: t.completed,
        streams_failed: t.failures.total(),
        failure_kinds: t.failures.counts().clone(),
        failure_samples: t.failures.samples().clone(),
        frames_expected: t.expected,
        frames_received: t.received,
        frames_lost: t.lost,
        frames_duplicated: t.duplicated,
        frames_out_of_order: t.out_of_order,
        frames_unexpected: t.unexpected,
        events_coalesced: t.coalesced,
        frames_per_s: if window_s > 0.0 {
            round(t.received as f64 / window_s, 1)
        } else {
            0.0
        },
        gap_us: Dist::of(&t.gaps),
        ttff_us: Dist::of(&t.ttff),
        schedule_lag_us: Dist::of(&t.lags),
        generator_cpu_s: cpu.map(|c| round(c, 2)),
        generator_cpu_pct: cpu
            .filter(|_| !wall.is_zero())
            .map(|c| round(c / wall.as_secs_f64() * 100.0, 1)),
        server: None,
    }
}

fn dist_line(d: Option<&Dist>) -> String {
    d.map_or_else(
        || "n/a".to_owned(),
        |d| {
            format!(
                "p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  (min {}, n {})",
                d.p50, d.p90, d.p99, d.p999, d.max, d.min, d.count
            )
        },
    )
}

/// The human summary printed on stderr.
pub fn summary(r: &StreamsReport) -> String {
    let mut out = format!(
        "streams: {} started, {} completed, {} failed{} in {:.1} s\n",
        r.streams_started,
        r.streams_completed,
        r.streams_failed,
        if r.failure_kinds.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                r.failure_kinds
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        r.window_s,
    );
    out.push_str(&format!(
        "frames: {} expected, {} received, {} lost, {} duplicated, {} out of order, {} unexpected, {} coalesced events; {}/s\n",
        r.frames_expected,
        r.frames_received,
        r.frames_lost,
        r.frames_duplicated,
        r.frames_out_of_order,
        r.frames_unexpected,
        r.events_coalesced,
        r.frames_per_s,
    ));
    out.push_str(&format!(
        "inter-frame gap µs: {}\n",
        dist_line(r.gap_us.as_ref())
    ));
    out.push_str(&format!(
        "time to first frame µs: {}\n",
        dist_line(r.ttff_us.as_ref())
    ));
    out.push_str(&format!(
        "schedule lag µs: {}\n",
        dist_line(r.schedule_lag_us.as_ref())
    ));
    if let (Some(s), Some(p)) = (r.generator_cpu_s, r.generator_cpu_pct) {
        out.push_str(&format!("generator CPU: {s} s, {p}% of one core\n"));
    }
    out
}

/// `through - direct` at each rank, in microseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AddedTail {
    pub p50: i64,
    pub p90: i64,
    pub p99: i64,
    pub p999: i64,
    pub max: i64,
}

impl AddedTail {
    fn between(direct: &Dist, through: &Dist) -> Self {
        let diff =
            |t: u64, d: u64| i64::try_from(i128::from(t) - i128::from(d)).unwrap_or(i64::MAX);
        Self {
            p50: diff(through.p50, direct.p50),
            p90: diff(through.p90, direct.p90),
            p99: diff(through.p99, direct.p99),
            p999: diff(through.p999, direct.p999),
            max: diff(through.max, direct.max),
        }
    }
}

/// What `compare` prints for a pair of `streams` reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamsComparison {
    pub scenario: String,
    pub direct_url: String,
    pub through_url: String,
    pub concurrency: u32,
    pub deltas: u32,
    pub gap_ms: u64,
    pub direct_gap_us: Dist,
    pub through_gap_us: Dist,
    /// The inter-frame gap weft adds at each rank; `p99` is the benchmark's figure.
    pub added_gap_us: AddedTail,
    pub direct_ttff_us: Option<Dist>,
    pub through_ttff_us: Option<Dist>,
    pub added_ttff_us: Option<AddedTail>,
    pub direct_schedule_lag_us: Option<Dist>,
    pub through_schedule_lag_us: Option<Dist>,
    pub direct_frames_lost: u64,
    pub through_frames_lost: u64,
    pub direct_frames_expected: u64,
    pub through_frames_expected: u64,
    pub direct_streams_failed: u64,
    pub through_streams_failed: u64,
    pub direct_generator_cpu_pct: Option<f64>,
    pub through_generator_cpu_pct: Option<f64>,
    /// Why the two runs may not be comparable.
    pub warnings: Vec<String>,
}

pub fn compare(
    direct: &StreamsReport,
    through: &StreamsReport,
) -> anyhow::Result<StreamsComparison> {
    let (Some(d), Some(t)) = (&direct.gap_us, &through.gap_us) else {
        bail!("both reports need inter-frame gaps to compare (a gap_us of null has none)");
    };
    let mut warnings = Vec::new();
    if (direct.concurrency, direct.deltas, direct.gap_ms)
        != (through.concurrency, through.deltas, through.gap_ms)
    {
        warnings.push("the runs had different shapes (concurrency, deltas or gap)".to_owned());
    }
    for (name, r) in [("direct", direct), ("through", through)] {
        if r.streams_failed > 0 {
            warnings.push(format!(
                "the {name} run had {} failed streams of {}",
                r.streams_failed, r.streams_started
            ));
        }
        if r.frames_duplicated + r.frames_out_of_order + r.frames_unexpected + r.events_coalesced
            > 0
        {
            warnings.push(format!(
                "the {name} run saw {} duplicated, {} out-of-order and {} unexpected frames, and {} coalesced events",
                r.frames_duplicated, r.frames_out_of_order, r.frames_unexpected, r.events_coalesced
            ));
        }
    }
    let added_ttff_us = match (&direct.ttff_us, &through.ttff_us) {
        (Some(d), Some(t)) => Some(AddedTail::between(d, t)),
        _ => None,
    };
    Ok(StreamsComparison {
        scenario: "streams".to_owned(),
        direct_url: direct.url.clone(),
        through_url: through.url.clone(),
        concurrency: through.concurrency,
        deltas: through.deltas,
        gap_ms: through.gap_ms,
        direct_gap_us: d.clone(),
        through_gap_us: t.clone(),
        added_gap_us: AddedTail::between(d, t),
        direct_ttff_us: direct.ttff_us.clone(),
        through_ttff_us: through.ttff_us.clone(),
        added_ttff_us,
        direct_schedule_lag_us: direct.schedule_lag_us.clone(),
        through_schedule_lag_us: through.schedule_lag_us.clone(),
        direct_frames_lost: direct.frames_lost,
        through_frames_lost: through.frames_lost,
        direct_frames_expected: direct.frames_expected,
        through_frames_expected: through.frames_expected,
        direct_streams_failed: direct.streams_failed,
        through_streams_failed: through.streams_failed,
        direct_generator_cpu_pct: direct.generator_cpu_pct,
        through_generator_cpu_pct: through.generator_cpu_pct,
        warnings,
    })
}

/// The line `compare` prints on stderr for a pair of `streams` reports.
pub fn comparison_line(c: &StreamsComparison) -> String {
    format!(
        "added inter-frame gap ({} streams × {} deltas, {} ms apart): p99 {} µs (direct p99 {}, through p99 {}), p50 {} µs, p99.9 {} µs; frames lost: direct {} of {}, through {} of {}{}",
        c.concurrency,
        c.deltas,
        c.gap_ms,
        c.added_gap_us.p99,
        c.direct_gap_us.p99,
        c.through_gap_us.p99,
        c.added_gap_us.p50,
        c.added_gap_us.p999,
        c.direct_frames_lost,
        c.direct_frames_expected,
        c.through_frames_lost,
        c.through_frames_expected,
        c.added_ttff_us
            .as_ref()
            .map_or_else(String::new, |a| format!(
                "; added time to first frame p50 {} µs, p99 {} µs",
                a.p50, a.p99
            )),
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};
    use crate::paced::{self, Pace};

    const MS: Duration = Duration::from_millis(1);

    fn chunk(content: &str) -> String {
        serde_json::json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]})
            .to_string()
    }

    const FINISH: &str =
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}"#;

    #[test]
    fn a_clean_stream_counts_every_frame_once() {
        let mut log = StreamLog::new(3, 20 * MS);
        log.on_event(
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            MS,
        )
        .unwrap();
        log.on_event(&chunk("0 "), 2 * MS).unwrap();
        log.on_event(&chunk("1 "), 22 * MS).unwrap();
        log.on_event(&chunk("2 "), 45 * MS).unwrap();
        log.on_event(FINISH, 45 * MS).unwrap();
        log.on_event(r#"{"choices":[],"usage":{"prompt_tokens":1}}"#, 45 * MS)
            .unwrap();
        log.on_event("[DONE]", 45 * MS).unwrap();
        assert_eq!(log.finish(), Ok(()));
        assert_eq!((log.received, log.lost(), log.duplicated), (3, 0, 0));
        assert_eq!((log.out_of_order, log.unexpected, log.coalesced), (0, 0, 0));
        assert_eq!(log.gaps, vec![20 * MS, 23 * MS]);
        assert_eq!(log.first, Some((2 * MS, 0)));
        // Delta 1 was due at 22 ms, delta 2 at 42 ms.
        assert_eq!(log.lags, vec![Duration::ZERO, 3 * MS]);
    }

    #[test]
    fn lost_duplicated_reordered_and_coalesced_frames_are_told_apart() {
        let mut log = StreamLog::new(6, 20 * MS);
        for (text, at) in [
            ("0 ", 1),
            ("2 ", 41),
            ("1 ", 42),
            ("2 ", 43),
            ("3 4 ", 80),
            ("x", 81),
        ] {
            log.on_event(&chunk(text), at * MS).unwrap();
        }
        assert_eq!(log.lost(), 1, "5 never came");
        assert_eq!(log.duplicated, 1);
        assert_eq!(log.out_of_order, 1);
        assert_eq!(log.coalesced, 1);
        assert_eq!(log.unexpected, 1);
        assert_eq!(log.received, 6);
        assert_eq!(log.finish().unwrap_err().kind, "incomplete");
    }

    #[test]
    fn broken_streams_fail_by_kind() {
        let mut log = StreamLog::new(2, MS);
        let e = log
            .on_event(r#"{"error":{"message":"boom","type":"server_error"}}"#, MS)
            .unwrap_err();
        assert_eq!(e.kind, "error_event");
        assert!(e.detail.unwrap().contains("boom"));
        assert_eq!(log.on_event("{not json", MS).unwrap_err().kind, "invalid");
        log.on_event("[DONE]", MS).unwrap();
        assert_eq!(
            log.finish().unwrap_err().kind,
            "invalid",
            "no finish_reason"
        );
        assert_eq!(log.on_event(&chunk("1 "), MS).unwrap_err().kind, "invalid");
    }

    #[test]
    fn start_offsets_spread_over_the_ramp_and_the_gap() {
        let ramp = Duration::from_millis(1280);
        assert_eq!(start_offset(0, ramp), Duration::ZERO);
        let offsets: Vec<Duration> = (0..512).map(|k| start_offset(k, ramp)).collect();
        assert!(offsets.iter().all(|o| *o < ramp));
        // Every 20 ms phase (in 1 ms steps) gets some of the 512 streams, and none more than
        // twice its share of 25.6.
        let mut phases = [0_u32; 20];
        for o in &offsets {
            phases[usize::try_from(o.as_millis() % 20).unwrap()] += 1;
        }
        assert!(phases.iter().all(|&n| (10..=52).contains(&n)), "{phases:?}");
        // And every tenth of the ramp gets about a tenth of the starts.
        let mut tenths = [0_u32; 10];
        for o in &offsets {
            tenths[usize::try_from(o.as_millis() / 128).unwrap()] += 1;
        }
        assert!(tenths.iter().all(|&n| (40..=62).contains(&n)), "{tenths:?}");
    }

    #[test]
    fn added_gap_is_through_minus_direct_at_each_rank() {
        let d = Dist {
            count: 10,
            min: 19_000,
            p50: 20_000,
            p90: 20_500,
            p99: 21_000,
            p999: 22_000,
            max: 25_000,
            mean: 20_100.0,
        };
        let t = Dist {
            p99: 21_700,
            p50: 19_990,
            ..d.clone()
        };
        let a = AddedTail::between(&d, &t);
        assert_eq!((a.p50, a.p99, a.p999, a.max), (-10, 700, 0, 0));
    }

    fn args(url: &str, extra: &[&str]) -> StreamsArgs {
        let mut argv = vec!["weft-loadtest", "streams", "--url", url, "--model", "m"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Streams(a) => a,
            _ => panic!("expected streams"),
        }
    }

    async fn paced_upstream(pace: Pace) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
        tokio::spawn(paced::serve(listener, pace, calls));
        url
    }

    #[tokio::test]
    async fn streams_against_the_paced_upstream_lose_nothing() {
        // The upstream's default pace is not what the client asks for: the #pace line wins.
        let url = paced_upstream(Pace {
            deltas: 1,
            gap: Duration::ZERO,
        })
        .await;
        let report = run(&args(
            &url,
            &[
                "--concurrency",
                "4",
                "--deltas",
                "5",
                "--gap-ms",
                "2",
                "--rounds",
                "2",
            ],
        ))
        .await
        .unwrap();
        assert_eq!(report.streams_started, 8);
        assert_eq!(report.streams_completed, 8, "{:?}", report.failure_samples);
        assert_eq!(report.frames_expected, 40);
        assert_eq!(report.frames_received, 40);
        assert_eq!(report.frames_lost, 0);
        assert_eq!(report.events_coalesced, 0);
        assert_eq!(report.gap_us.as_ref().unwrap().count, 32);
        assert_eq!(report.ttff_us.as_ref().unwrap().count, 8);
        let v = serde_json::to_value(&report).unwrap();
        let back: StreamsReport = serde_json::from_value(v).unwrap();
        assert_eq!(back.frames_received, 40);
        assert!(summary(&back).contains("0 lost"));
    }

    #[tokio::test]
    async fn the_upstream_paces_the_deltas() {
        let url = paced_upstream(Pace {
            deltas: 5,
            gap: 10 * MS,
        })
        .await;
        let target = target(&args(&url, &[]), "no pace line: the upstream's default").unwrap();
        let mut log = StreamLog::new(5, 10 * MS);
        timed_stream(&target, Duration::from_secs(10), &mut log)
            .await
            .unwrap();
        assert_eq!((log.distinct, log.coalesced), (5, 0));
        // Delta 4 cannot leave before 40 ms after the request arrived (however late the timers
        // of a busy machine fire, they never fire early).
        assert!(log.last_at.unwrap() >= 40 * MS, "{log:?}");
        assert_eq!(log.gaps.len(), 4);
    }

    #[tokio::test]
    async fn preflight_refuses_an_upstream_that_does_not_pace() {
        let up = weft_testkit::FakeUpstream::start().await;
        let err = run(&args(&up.base_url, &["--concurrency", "1"]))
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("paced"), "{err:#}");
    }

    #[tokio::test]
    async fn failures_still_count_their_lost_frames() {
        let up = weft_testkit::FakeUpstream::start().await;
        up.set_default(weft_testkit::Behavior::Fail {
            status: 503,
            retry_after: None,
        });
        let report = run(&args(
            &up.base_url,
            &[
                "--concurrency",
                "2",
                "--rounds",
                "1",
                "--warmup-rounds",
                "0",
                "--no-preflight",
            ],
        ))
        .await
        .unwrap();
        assert_eq!(report.streams_failed, 2);
        assert_eq!(report.failure_kinds.get("status_503"), Some(&2));
        assert_eq!(report.frames_lost, 128);
        assert!(report.gap_us.is_none());
    }
}
