//! The `webhooks` scenario: N closed-loop workers deliver signed webhooks to weft's receiver,
//! `POST {url}/v1/_webhooks/{tenant}/{name}` (no bearer token), as GitHub sends them: a body
//! `{"text":"hello <n>"}`, a unique `X-GitHub-Delivery` id and `X-Hub-Signature-256:
//! sha256=<hex HMAC-SHA256(secret, body)>`. A 202 is a verified and accepted delivery (a run
//! started or a message published, whatever the definition targets); any other answer is a
//! failure, counted by status.
//!
//! Time is a warm-up (deliveries not recorded, but counted in `ops_incl_warmup` so a script can
//! divide the server's CPU time over the whole run by it) and then the measured window.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use hmac::{Hmac, Mac as _};
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use sha2::Sha256;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::api::{base_url, snippet};
use crate::cli::WebhooksArgs;
use crate::cpu::self_seconds as cpu_seconds;
use crate::report::{Failure, Failures, Summary, histogram, micros};

/// After a failure a worker waits this long before its next delivery, so a refusing server
/// is not hammered by a tight loop of instant errors.
const BACKOFF: Duration = Duration::from_millis(20);
/// The receiver answers a few hundred bytes; more is read no further.
const MAX_BODY: usize = 64 << 10;

/// The signed delivery a sender makes: the body, its id and the GitHub signature header.
struct Signer {
    /// The HMAC keyed with the secret, cloned for each body (the key schedule is done once).
    keyed: Hmac<Sha256>,
    uri: Uri,
    /// Unique per invocation, so ids never collide with an earlier run's against the same
    /// database (a repeated id is answered as a replay, 200, not accepted again).
    nonce: String,
}

impl Signer {
    fn new(base: &str, tenant: &str, webhook: &str, secret: &str) -> anyhow::Result<Self> {
        let keyed = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .map_err(|_| anyhow::anyhow!("the secret cannot key an HMAC"))?;
        let uri = format!("{base}/v1/_webhooks/{tenant}/{webhook}")
            .parse()
            .context("the webhook URL")?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(Self {
            keyed,
            uri,
            nonce: format!("lt-{:x}-{:x}", std::process::id(), nanos),
        })
    }

    /// `sha256=<hex>` over `body`, as GitHub's `X-Hub-Signature-256`.
    fn signature(&self, body: &[u8]) -> String {
        let mut mac = self.keyed.clone();
        mac.update(body);
        format!("sha256={}", hex(&mac.finalize().into_bytes()))
    }

    /// Delivery `n` of worker `w`: the request, ready to send.
    fn request(&self, w: u32, n: u64) -> anyhow::Result<Request<Full<Bytes>>> {
        let body = format!("{{\"text\":\"hello {w}-{n}\"}}");
        let signature = self.signature(body.as_bytes());
        Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header("x-github-event", HeaderValue::from_static("push"))
            .header("x-github-delivery", format!("{}-{w}-{n}", self.nonce))
            .header("x-hub-signature-256", signature)
            .body(Full::new(Bytes::from(body)))
            .context("build a delivery")
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// What one delivery came to: the status and the start of the body (kept for non-202s).
struct Answer {
    status: u16,
    body: Bytes,
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client(connections: usize) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.enforce_http(true);
    connector.set_connect_timeout(Some(Duration::from_secs(10)));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(connections.max(1))
        .build(connector)
}

/// Sends one delivery and reads the whole answer (so the connection goes back to the pool).
async fn deliver(
    client: &HttpClient,
    req: Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<Answer, Failure> {
    let call = async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| Failure::new(if e.is_connect() { "connect" } else { "request" }, None))?;
        let status = resp.status().as_u16();
        let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|_| Failure::new("body", Some(format!("status {status}"))))?
            .to_bytes();
        Ok(Answer { status, body })
    };
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| Err(Failure::new("timeout", None)))
}

/// One worker's (and then the run's) tally.
struct Recorder {
    latency: Histogram<u64>,
    statuses: BTreeMap<String, u64>,
    failures: Failures,
}

impl Recorder {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            latency: histogram()?,
            statuses: BTreeMap::new(),
            failures: Failures::default(),
        })
    }

    /// Returns whether the delivery was accepted.
    fn record(&mut self, outcome: Result<(Answer, Duration), Failure>) -> bool {
        match outcome {
            Ok((answer, took)) => {
                *self.statuses.entry(answer.status.to_string()).or_default() += 1;
                if answer.status == 202 {
                    self.latency.saturating_record(micros(took).max(1));
                    true
                } else {
                    self.failures.add(Failure::new(
                        format!("status_{}", answer.status),
                        Some(snippet(&answer.body)),
                    ));
                    false
                }
            }
            Err(f) => {
                self.failures.add(f);
                false
            }
        }
    }

    fn merge(&mut self, other: &Self) -> anyhow::Result<()> {
        self.latency
            .add(&other.latency)
            .context("merge histograms")?;
        for (k, v) in &other.statuses {
            *self.statuses.entry(k.clone()).or_default() += v;
        }
        for (kind, count) in other.failures.counts() {
            for _ in 0..*count {
                self.failures.add(Failure::new(
                    kind.clone(),
                    other.failures.samples().get(kind).cloned(),
                ));
            }
        }
        Ok(())
    }
}

/// The JSON report.
#[derive(Debug, Serialize)]
pub struct WebhooksReport {
    pub scenario: &'static str,
    pub url: String,
    pub tenant: String,
    pub webhook: String,
    pub concurrency: u32,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub threads: u16,
    /// Deliveries answered 202 (verified and accepted) in the measured window.
    pub deliveries: u64,
    /// `deliveries` per second of `duration_s`.
    pub deliveries_per_s: f64,
    /// Accepted deliveries only, request sent → whole answer read.
    pub latency_us: Option<Summary>,
    /// Deliveries sent in the measured window, accepted or not.
    pub requests: u64,
    /// Every HTTP status answered in the measured window, by code (`"202"` included).
    pub statuses: BTreeMap<String, u64>,
    pub failures: u64,
    /// `status_<code>` (not 202), `connect`, `request`, `body`, `timeout`.
    pub failure_kinds: BTreeMap<String, u64>,
    pub failure_samples: BTreeMap<String, String>,
    /// Deliveries sent over preflight, warm-up and window together (accepted or not), for CPU
    /// per delivery.
    pub ops_incl_warmup: u64,
    /// The generator's own CPU time over the whole run (`/proc/self/stat`), and per delivery.
    pub generator_cpu_s: Option<f64>,
    pub generator_cpu_us_per_op: Option<f64>,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A name that can go into the receiver's path as is.
fn path_safe(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

pub async fn run(args: &WebhooksArgs) -> anyhow::Result<WebhooksReport> {
    let cpu0 = cpu_seconds();
    for (what, name) in [("--tenant", &args.tenant), ("--webhook", &args.webhook)] {
        if !path_safe(name) {
            bail!("{what} `{name}` must be letters, digits, `-`, `_` or `.`");
        }
    }
    let Some(secret) = args.secret.as_deref().filter(|s| !s.is_empty()) else {
        bail!(
            "no signing secret: set WEFT_LOADTEST_WEBHOOK_SECRET (or --secret) to the value of \
             the env var the webhook's `secret_env` names"
        );
    };
    let base = base_url(&args.url)?;
    let signer = Arc::new(Signer::new(&base, &args.tenant, &args.webhook, secret)?);
    let client = client(usize::try_from(args.concurrency).unwrap_or(usize::MAX));
    let sent = Arc::new(AtomicU64::new(0));

    if !args.no_preflight {
        let req = signer.request(u32::MAX, 0)?;
        sent.fetch_add(1, Ordering::Relaxed);
        match deliver(&client, req, args.timeout).await {
            Ok(a) if a.status == 202 => {}
            Ok(a) => bail!(
                "the preflight delivery to {} was answered {}: {}",
                signer.uri,
                a.status,
                snippet(&a.body)
            ),
            Err(f) => bail!(
                "the preflight delivery to {} failed: {}{}",
                signer.uri,
                f.kind,
                f.detail.map(|d| format!(" ({d})")).unwrap_or_default()
            ),
        }
    }

    eprintln!(
        "webhooks: {} workers → {} for {:?} after {:?} warm-up",
        args.concurrency, signer.uri, args.duration, args.warmup
    );
    let t0 = Instant::now();
    let measure_start = t0 + args.warmup;
    let end = measure_start + args.duration;
    let shared = Arc::new(Mutex::new(Recorder::new()?));
    let mut tasks = JoinSet::new();
    for w in 0..args.concurrency {
        let (client, signer, sent, shared) =
            (client.clone(), signer.clone(), sent.clone(), shared.clone());
        let timeout = args.timeout;
        tasks.spawn(async move {
            let mut local = Recorder::new()?;
            let mut n = 0_u64;
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                n += 1;
                let req = signer.request(w, n)?;
                let started = Instant::now();
                let outcome = deliver(&client, req, timeout)
                    .await
                    .map(|a| (a, started.elapsed()));
                sent.fetch_add(1, Ordering::Relaxed);
                let accepted = if now >= measure_start {
                    local.record(outcome)
                } else {
                    matches!(&outcome, Ok((a, _)) if a.status == 202)
                };
                if !accepted {
                    tokio::time::sleep(BACKOFF).await;
                }
            }
            shared
                .lock()
                .map_err(|_| anyhow::anyhow!("the recorder lock was poisoned"))?
                .merge(&local)
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
    let deliveries = rec.latency.len();
    let ops = sent.load(Ordering::Relaxed);
    let generator_cpu_s = cpu_seconds()
        .zip(cpu0)
        .map(|(now, then)| round3(now - then));
    Ok(WebhooksReport {
        scenario: "webhooks",
        url: base,
        tenant: args.tenant.clone(),
        webhook: args.webhook.clone(),
        concurrency: args.concurrency,
        warmup_s: round3(args.warmup.as_secs_f64()),
        duration_s: round3(seconds),
        threads: args.threads,
        deliveries,
        deliveries_per_s: (deliveries as f64 / seconds * 10.0).round() / 10.0,
        latency_us: Summary::of(&rec.latency),
        requests: rec.statuses.values().sum::<u64>()
            + rec
                .failures
                .counts()
                .iter()
                .filter(|(k, _)| !k.starts_with("status_"))
                .map(|(_, v)| v)
                .sum::<u64>(),
        statuses: rec.statuses.clone(),
        failures: rec.failures.total(),
        failure_kinds: rec.failures.counts().clone(),
        failure_samples: rec.failures.samples().clone(),
        ops_incl_warmup: ops,
        generator_cpu_s,
        generator_cpu_us_per_op: generator_cpu_s
            .filter(|_| ops > 0)
            .map(|s| (s * 1e6 / ops as f64).round()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_as_github_documents() {
        // GitHub's "Validating webhook deliveries" example: secret "It's a Secret to
        // Everybody", payload "Hello, World!".
        let s = Signer::new(
            "http://127.0.0.1:1",
            "default",
            "w",
            "It's a Secret to Everybody",
        )
        .unwrap();
        assert_eq!(
            s.signature(b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
    }

    #[test]
    fn requests_carry_unique_ids_and_a_matching_signature() {
        let s = Signer::new("http://127.0.0.1:1", "default", "bench-run", "k").unwrap();
        let a = s.request(3, 7).unwrap();
        let b = s.request(3, 8).unwrap();
        assert_eq!(a.uri(), "http://127.0.0.1:1/v1/_webhooks/default/bench-run");
        let id = |r: &Request<Full<Bytes>>| r.headers()["x-github-delivery"].clone();
        assert_ne!(id(&a), id(&b));
        assert_eq!(
            a.headers()["x-hub-signature-256"],
            s.signature(br#"{"text":"hello 3-7"}"#).as_str()
        );
    }

    #[test]
    fn only_202_counts_as_accepted() {
        let mut r = Recorder::new().unwrap();
        let ok = |status| {
            Ok((
                Answer {
                    status,
                    body: Bytes::from_static(b"{}"),
                },
                Duration::from_micros(500),
            ))
        };
        assert!(r.record(ok(202)));
        assert!(!r.record(ok(200)));
        assert!(!r.record(ok(401)));
        assert!(!r.record(Err(Failure::new("timeout", None))));
        assert_eq!(r.latency.len(), 1);
        assert_eq!(r.statuses.get("202"), Some(&1));
        assert_eq!(r.statuses.get("401"), Some(&1));
        assert_eq!(r.failures.total(), 3);
        assert_eq!(r.failures.counts().get("status_200"), Some(&1));
    }
}
