//! The `memory` scenario: N closed-loop workers over weft's memory routes, each op chosen from
//! a fixed mix — `PUT /v1/memory/{scope}/{scope_id}/{key}` (set), `GET …/{key}` (get) and
//! `POST /v1/memory/search` (search) — over a key space seeded before the load (every key
//! written, the first `--embedded` of them with `embed: true`, so gets hit and searches have
//! candidates). Latencies per kind, ops/s overall and for get+set.
//!
//! Time is a warm-up (ops not recorded, but counted in `ops_incl_warmup` so a script can divide
//! the server's CPU time over the whole run by it) and then the measured window.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http::Method;
use serde::Serialize;
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::api::Api;
use crate::cli::MemoryArgs;
use crate::report::{Failure, Failures, Summary, histogram, micros};

/// After a failure a worker waits this long before its next op.
const BACKOFF: Duration = Duration::from_millis(20);
/// Texts the seeded embedded entries and the search queries are made of.
const WORDS: [&str; 8] = [
    "apple", "river", "engine", "garden", "signal", "harbor", "violet", "summit",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Get,
    Set,
    Search,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Set => "set",
            Self::Search => "search",
        }
    }
}

/// Op `n` of the deterministic mix: out of every 100, `search_pct` searches, `set_pct` sets,
/// the rest gets, interleaved.
fn op_for(n: u64, set_pct: u64, search_pct: u64) -> Op {
    let slot = (n * 37) % 100;
    if slot < search_pct {
        Op::Search
    } else if slot < search_pct + set_pct {
        Op::Set
    } else {
        Op::Get
    }
}

/// The text of key `i` (embedded keys get two words, so searches rank them).
fn text(i: u64) -> String {
    let at = |j: u64| WORDS[usize::try_from(j % 8).unwrap_or(0)];
    let (a, b) = (at(i), at(i / 8));
    format!("{a} {b} {i}")
}

struct Recorder {
    kinds: BTreeMap<&'static str, Histogram<u64>>,
    all: Histogram<u64>,
    failures: Failures,
}

impl Recorder {
    fn new() -> anyhow::Result<Self> {
        let mut kinds = BTreeMap::new();
        for op in [Op::Get, Op::Set, Op::Search] {
            kinds.insert(op.name(), histogram()?);
        }
        Ok(Self {
            kinds,
            all: histogram()?,
            failures: Failures::default(),
        })
    }

    fn record(&mut self, op: Op, outcome: Result<Duration, Failure>) {
        match outcome {
            Ok(d) => {
                let us = micros(d).max(1);
                if let Some(h) = self.kinds.get_mut(op.name()) {
                    let _ = h.record(us);
                }
                let _ = self.all.record(us);
            }
            Err(f) => self.failures.add(f),
        }
    }

    fn summary(&self, op: Op) -> Option<Summary> {
        self.kinds.get(op.name()).and_then(Summary::of)
    }

    fn count(&self, op: Op) -> u64 {
        self.kinds.get(op.name()).map_or(0, Histogram::len)
    }
}

/// The JSON report.
#[derive(Debug, Serialize)]
pub struct MemoryReport {
    pub scenario: &'static str,
    pub url: String,
    pub scope: String,
    pub scope_id: String,
    pub concurrency: u32,
    pub keys: u64,
    pub embedded: u64,
    pub value_bytes: usize,
    pub set_pct: u64,
    pub search_pct: u64,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub threads: u16,
    /// Successful ops in the measured window.
    pub ops: u64,
    pub ops_per_s: f64,
    pub get_set_per_s: f64,
    /// Ops sent over warm-up and window together (successful or not).
    pub ops_incl_warmup: u64,
    pub gets: u64,
    pub sets: u64,
    pub searches: u64,
    pub all_us: Option<Summary>,
    pub get_us: Option<Summary>,
    pub set_us: Option<Summary>,
    pub search_us: Option<Summary>,
    pub failures: u64,
    pub failure_kinds: BTreeMap<String, u64>,
    pub failure_samples: BTreeMap<String, String>,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Shared request material.
struct Plan {
    base: String,
    keys: u64,
    set_body: Bytes,
    searches: Vec<Bytes>,
}

async fn one(api: &Api, plan: &Plan, op: Op, n: u64) -> Result<Duration, Failure> {
    let key = (n.wrapping_mul(2_654_435_761)) % plan.keys;
    let t = Instant::now();
    let r = match op {
        Op::Get => {
            api.call(Method::GET, &format!("{}/k{key}", plan.base), None, &[200])
                .await
        }
        Op::Set => {
            api.call(
                Method::PUT,
                &format!("{}/k{key}", plan.base),
                Some(plan.set_body.clone()),
                &[200],
            )
            .await
        }
        Op::Search => {
            let i = usize::try_from(n % WORDS.len() as u64).unwrap_or(0);
            let body = plan.searches.get(i).cloned().unwrap_or_default();
            api.call(Method::POST, "/v1/memory/search", Some(body), &[200])
                .await
        }
    };
    r.map(|_| t.elapsed()).map_err(|e| e.during(op.name()))
}

/// Writes every key once (the first `embedded` with `embed: true`), 64 at a time.
async fn seed(api: &Arc<Api>, args: &MemoryArgs, base: &str) -> anyhow::Result<()> {
    let mut tasks = JoinSet::new();
    let next = Arc::new(AtomicU64::new(0));
    for _ in 0..64 {
        let (api, next, base) = (api.clone(), next.clone(), base.to_owned());
        let (keys, embedded) = (args.keys, args.embedded);
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= keys {
                    return Ok::<(), anyhow::Error>(());
                }
                let body = json!({"value": text(i), "embed": i < embedded});
                api.call(
                    Method::PUT,
                    &format!("{base}/k{i}"),
                    Some(Bytes::from(serde_json::to_vec(&body)?)),
                    &[200],
                )
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "seeding key k{i}: {}{}",
                        e.kind,
                        e.detail.map(|d| format!(": {d}")).unwrap_or_default()
                    )
                })?;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a seeding task failed")??;
    }
    Ok(())
}

pub async fn run(args: &MemoryArgs) -> anyhow::Result<MemoryReport> {
    anyhow::ensure!(
        args.set_pct + args.search_pct <= 100,
        "--set-pct plus --search-pct must be at most 100"
    );
    let api = Arc::new(Api::new(
        &args.weft.url,
        args.weft.token.as_deref(),
        usize::try_from(args.concurrency).unwrap_or(usize::MAX),
    )?);
    let base = format!("/v1/memory/{}/{}", args.scope, args.scope_id);
    eprintln!(
        "memory: seeding {} keys ({} embedded) at {}{}",
        args.keys,
        args.embedded,
        api.base(),
        base
    );
    seed(&api, args, &base).await?;
    let value = json!({"value": {"text": "x".repeat(args.value_bytes)}});
    let searches = WORDS
        .iter()
        .map(|w| {
            serde_json::to_vec(&json!({
                "scope": args.scope, "scope_id": args.scope_id,
                "query": format!("{w} garden"), "top_k": 10,
            }))
            .map(Bytes::from)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let plan = Arc::new(Plan {
        base,
        keys: args.keys.max(1),
        set_body: Bytes::from(serde_json::to_vec(&value)?),
        searches,
    });
    eprintln!(
        "memory: concurrency {} for {:?} after {:?} warm-up; {}% set, {}% search, the rest get",
        args.concurrency, args.duration, args.warmup, args.set_pct, args.search_pct
    );
    let t0 = Instant::now();
    let measure_start = t0 + args.warmup;
    let end = measure_start + args.duration;
    let sent = Arc::new(AtomicU64::new(0));
    let shared = Arc::new(Mutex::new(Recorder::new()?));
    let mut tasks = JoinSet::new();
    for w in 0..args.concurrency {
        let (api, plan, sent, shared) = (api.clone(), plan.clone(), sent.clone(), shared.clone());
        let (set_pct, search_pct) = (args.set_pct, args.search_pct);
        tasks.spawn(async move {
            let mut local = Recorder::new()?;
            let mut n = u64::from(w) * 1_000_003;
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                n += 1;
                let op = op_for(n, set_pct, search_pct);
                let outcome = one(&api, &plan, op, n).await;
                sent.fetch_add(1, Ordering::Relaxed);
                let failed = outcome.is_err();
                if now >= measure_start {
                    local.record(op, outcome);
                }
                if failed {
                    tokio::time::sleep(BACKOFF).await;
                }
            }
            let mut rec = shared
                .lock()
                .map_err(|_| anyhow::anyhow!("the recorder lock was poisoned"))?;
            for (k, h) in &local.kinds {
                if let Some(into) = rec.kinds.get_mut(k) {
                    into.add(h).context("merge histograms")?;
                }
            }
            rec.all.add(&local.all).context("merge histograms")?;
            for (kind, count) in local.failures.counts() {
                for _ in 0..*count {
                    rec.failures.add(Failure::new(
                        kind.clone(),
                        local.failures.samples().get(kind).cloned(),
                    ));
                }
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a load worker failed")??;
    }
    let window = Instant::now().saturating_duration_since(measure_start);
    let rec = shared
        .lock()
        .map_err(|_| anyhow::anyhow!("the recorder lock was poisoned"))?;
    let seconds = window.as_secs_f64().max(f64::EPSILON);
    let (gets, sets, searches) = (
        rec.count(Op::Get),
        rec.count(Op::Set),
        rec.count(Op::Search),
    );
    let per_s = |n: u64| (n as f64 / seconds * 10.0).round() / 10.0;
    Ok(MemoryReport {
        scenario: "memory",
        url: api.base().to_owned(),
        scope: args.scope.clone(),
        scope_id: args.scope_id.clone(),
        concurrency: args.concurrency,
        keys: args.keys,
        embedded: args.embedded,
        value_bytes: args.value_bytes,
        set_pct: args.set_pct,
        search_pct: args.search_pct,
        warmup_s: round3(args.warmup.as_secs_f64()),
        duration_s: round3(seconds),
        threads: args.weft.threads,
        ops: gets + sets + searches,
        ops_per_s: per_s(gets + sets + searches),
        get_set_per_s: per_s(gets + sets),
        ops_incl_warmup: sent.load(Ordering::Relaxed),
        gets,
        sets,
        searches,
        all_us: Summary::of(&rec.all),
        get_us: rec.summary(Op::Get),
        set_us: rec.summary(Op::Set),
        search_us: rec.summary(Op::Search),
        failures: rec.failures.total(),
        failure_kinds: rec.failures.counts().clone(),
        failure_samples: rec.failures.samples().clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_has_the_asked_shares() {
        let mut counts = BTreeMap::new();
        for n in 0..1000 {
            *counts.entry(op_for(n, 30, 2).name()).or_insert(0) += 1;
        }
        assert_eq!(counts.get("search"), Some(&20));
        assert_eq!(counts.get("set"), Some(&300));
        assert_eq!(counts.get("get"), Some(&680));
    }
}
