//! The `channels` scenario: N publishers and M long-polling readers on weft's channel routes.
//!
//! It creates `--channels` tenant channels (`PUT /v1/channels/{prefix}-{i}`), then publishers
//! publish `{"t": <send time, µs since the epoch>}` at `--rate` messages per second in total
//! (each publisher paced at its share, one publish in flight at a time), and every reader
//! long-polls one channel (`POST /v1/channels/{name}/read {cursor, wait_ms, max}`) from the head
//! it found before the load, keeping its cursor (no acks). Readers are spread over the channels,
//! so each message is delivered to `readers / channels` readers.
//!
//! Measured after `--warmup`, for `--duration`: publish latency (the HTTP round trip), delivery
//! latency (from a message's send time to the moment a reader's read returned it — the
//! publish→delivery latency a subscriber sees), read calls, failures, and CPU: the weft process's
//! (`--server-pid`, from `/proc/<pid>/stat`) and the whole machine's (from `/proc/stat`, which
//! includes Postgres, NATS and this generator) per delivered message.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http::Method;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::api::Api;
use crate::cli::ChannelsArgs;

/// A latency distribution in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Dist {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Dist {
    fn of(h: &Histogram<u64>) -> Self {
        Self {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

/// What the scenario prints.
#[derive(Clone, Debug, Serialize)]
pub struct ChannelsReport {
    pub scenario: &'static str,
    pub url: String,
    pub publishers: u32,
    pub readers: u32,
    pub channels: u32,
    pub target_rate_per_s: f64,
    pub wait_ms: u32,
    pub duration_s: f64,
    /// Measured publishes per second.
    pub publish_rate_per_s: f64,
    /// Messages readers received per second (publishes × readers per channel).
    pub delivery_rate_per_s: f64,
    /// Read calls per second.
    pub read_rate_per_s: f64,
    /// Publishes + read calls per second.
    pub ops_per_s: f64,
    pub publish_latency: Dist,
    /// From the publisher's send to the reader's receipt.
    pub delivery_latency: Dist,
    pub read_latency: Dist,
    pub failures: BTreeMap<String, u64>,
    pub failure_samples: BTreeMap<String, String>,
    /// CPU seconds of `--server-pid` during the measurement.
    pub server_cpu_s: Option<f64>,
    /// `server_cpu_s` per delivered message, in milliseconds.
    pub server_cpu_ms_per_message: Option<f64>,
    /// Busy CPU seconds of the whole machine (all cores) during the measurement.
    pub machine_cpu_s: Option<f64>,
    pub machine_cpu_ms_per_message: Option<f64>,
}

#[derive(Default)]
struct Tally {
    failures: BTreeMap<String, u64>,
    samples: BTreeMap<String, String>,
}

impl Tally {
    fn fail(&mut self, kind: String, detail: Option<String>) {
        *self.failures.entry(kind.clone()).or_default() += 1;
        if let Some(d) = detail {
            self.samples.entry(kind).or_insert(d);
        }
    }
}

struct Shared {
    api: Api,
    measuring: AtomicBool,
    stop: AtomicBool,
    publish: Mutex<Histogram<u64>>,
    delivery: Mutex<Histogram<u64>>,
    read: Mutex<Histogram<u64>>,
    tally: Mutex<Tally>,
}

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).context("make a histogram")
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn elapsed_us(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

fn channel_name(args: &ChannelsArgs, i: u32) -> String {
    format!("{}-{i}", args.prefix)
}

async fn setup(sh: &Shared, args: &ChannelsArgs) -> anyhow::Result<Vec<String>> {
    let mut cursors = Vec::new();
    for i in 0..args.channels {
        let name = channel_name(args, i);
        let body = json!({"scope": "tenant", "ttl_seconds": 3600, "max_messages": 100_000});
        sh.api
            .call(
                Method::PUT,
                &format!("/v1/channels/{name}"),
                Some(Bytes::from(body.to_string())),
                &[200, 201],
            )
            .await
            .map_err(|e| anyhow::anyhow!("create channel {name}: {} {:?}", e.kind, e.detail))?;
        // The head: a peek of the newest message gives its cursor; an empty channel starts at
        // the beginning (no cursor).
        let peek = sh
            .api
            .json(
                Method::GET,
                &format!("/v1/channels/{name}/peek?max=1"),
                None,
                &[200],
            )
            .await
            .map_err(|e| anyhow::anyhow!("peek {name}: {} {:?}", e.kind, e.detail))?;
        cursors.push(
            peek["messages"][0]["cursor"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    Ok(cursors)
}

async fn publisher(sh: Arc<Shared>, args: Arc<ChannelsArgs>, id: u32) {
    let per = args.rate / f64::from(args.publishers);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut k: u64 = 0;
    while !sh.stop.load(Ordering::Relaxed) {
        tick.tick().await;
        // Publishers take the channels in turn, each from its own starting point.
        let i = (u64::from(id) + k) % u64::from(args.channels);
        let name = channel_name(&args, u32::try_from(i).unwrap_or(0));
        k += 1;
        let body = json!({"payload": {"t": now_us(), "p": id}}).to_string();
        let started = Instant::now();
        let r = sh
            .api
            .call(
                Method::POST,
                &format!("/v1/channels/{name}/publish"),
                Some(Bytes::from(body)),
                &[201],
            )
            .await;
        if !sh.measuring.load(Ordering::Relaxed) {
            continue;
        }
        match r {
            Ok(_) => {
                let _ = sh.publish.lock().await.record(elapsed_us(started).max(1));
            }
            Err(e) => sh
                .tally
                .lock()
                .await
                .fail(format!("publish:{}", e.kind), e.detail),
        }
    }
}

async fn reader(sh: Arc<Shared>, args: Arc<ChannelsArgs>, name: String, mut cursor: String) {
    while !sh.stop.load(Ordering::Relaxed) {
        let mut body = json!({"wait_ms": args.wait_ms, "max": 1000});
        if !cursor.is_empty() {
            body["cursor"] = Value::String(cursor.clone());
        }
        let started = Instant::now();
        let r = sh
            .api
            .json(
                Method::POST,
                &format!("/v1/channels/{name}/read"),
                Some(Bytes::from(body.to_string())),
                &[200],
            )
            .await;
        let received = now_us();
        let measuring = sh.measuring.load(Ordering::Relaxed);
        match r {
            Ok(v) => {
                if let Some(c) = v["cursor"].as_str() {
                    c.clone_into(&mut cursor);
                }
                if measuring {
                    let _ = sh.read.lock().await.record(elapsed_us(started).max(1));
                    let mut h = sh.delivery.lock().await;
                    for m in v["messages"].as_array().into_iter().flatten() {
                        if let Some(t) = m["payload"]["t"].as_u64() {
                            let _ = h.record(received.saturating_sub(t).max(1));
                        }
                    }
                }
            }
            Err(e) => {
                if measuring {
                    sh.tally
                        .lock()
                        .await
                        .fail(format!("read:{}", e.kind), e.detail);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// Runs the scenario and returns its report.
pub async fn run(args: &ChannelsArgs) -> anyhow::Result<ChannelsReport> {
    if args.readers < args.channels {
        bail!("--readers must be at least --channels, so every channel has a reader");
    }
    let connections = usize::try_from(args.publishers + args.readers).unwrap_or(1024) + 4;
    let sh = Arc::new(Shared {
        api: Api::new(&args.weft.url, args.weft.token.as_deref(), connections)?,
        measuring: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        publish: Mutex::new(histogram()?),
        delivery: Mutex::new(histogram()?),
        read: Mutex::new(histogram()?),
        tally: Mutex::new(Tally::default()),
    });
    let heads = setup(&sh, args).await?;
    let shared_args = Arc::new(args.clone());
    let mut tasks = Vec::new();
    for j in 0..args.readers {
        let i = j % args.channels;
        let idx = usize::try_from(i).unwrap_or(0);
        tasks.push(tokio::spawn(reader(
            sh.clone(),
            shared_args.clone(),
            channel_name(args, i),
            heads[idx].clone(),
        )));
    }
    for id in 0..args.publishers {
        tasks.push(tokio::spawn(publisher(sh.clone(), shared_args.clone(), id)));
    }
    tokio::time::sleep(args.warmup).await;
    let cpu0 = args.server_pid.and_then(crate::cpu::process_seconds);
    let machine0 = crate::cpu::machine_busy_seconds();
    sh.measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(args.duration).await;
    sh.measuring.store(false, Ordering::Relaxed);
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu0
        .zip(args.server_pid.and_then(crate::cpu::process_seconds))
        .map(|(a, b)| b - a);
    let machine = machine0
        .zip(crate::cpu::machine_busy_seconds())
        .map(|(a, b)| b - a);
    sh.stop.store(true, Ordering::Relaxed);
    // Readers may be in a long-poll: give them their wait, then stop them.
    let grace = Duration::from_millis(u64::from(args.wait_ms) + 2000);
    for t in tasks {
        if tokio::time::timeout(grace, t).await.is_err() {
            eprintln!("weft-loadtest: a channels task did not stop within its grace period");
        }
    }
    let publish = Dist::of(&*sh.publish.lock().await);
    let delivery = Dist::of(&*sh.delivery.lock().await);
    let read = Dist::of(&*sh.read.lock().await);
    let tally = std::mem::take(&mut *sh.tally.lock().await);
    let per_s = |n: u64| round(n as f64 / wall, 1);
    let per_msg =
        |s: f64| (delivery.count > 0).then(|| round(s * 1000.0 / delivery.count as f64, 4));
    Ok(ChannelsReport {
        scenario: "channels",
        url: args.weft.url.clone(),
        publishers: args.publishers,
        readers: args.readers,
        channels: args.channels,
        target_rate_per_s: args.rate,
        wait_ms: args.wait_ms,
        duration_s: round(wall, 3),
        publish_rate_per_s: per_s(publish.count),
        delivery_rate_per_s: per_s(delivery.count),
        read_rate_per_s: per_s(read.count),
        ops_per_s: per_s(publish.count + read.count),
        publish_latency: publish,
        delivery_latency: delivery.clone(),
        read_latency: read,
        failures: tally.failures,
        failure_samples: tally.samples,
        server_cpu_s: cpu.map(|c| round(c, 2)),
        server_cpu_ms_per_message: cpu.and_then(per_msg),
        machine_cpu_s: machine.map(|c| round(c, 2)),
        machine_cpu_ms_per_message: machine.and_then(per_msg),
    })
}
