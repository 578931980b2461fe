//! The paced upstream (`upstream --deltas N`): an OpenAI-compatible `/v1/chat/completions`
//! whose streamed answers are N content deltas spaced a fixed gap apart, for the `streams`
//! scenario. The k-th delta's text is `k` followed by a space (`"0 "`, `"1 "`, …), so a client
//! can tell lost, repeated and reordered frames apart, and coalesced ones (two numbers in one
//! event). The upstream sends no timestamps: every time is taken by the client.
//!
//! Delta k leaves at `start + k × gap` on an absolute schedule (a late timer does not push the
//! later deltas back). The role chunk goes out with delta 0, and the finish chunk, the usage
//! chunk (with `stream_options.include_usage`) and `data: [DONE]` with the last delta, so every
//! write carries exactly one content delta.
//!
//! A request chooses its own pace with a line `#pace {"deltas": N, "gap_ms": D}` in its last
//! user message; the `--deltas`/`--gap-ms` flags are the default. A non-streamed request gets
//! the same text at once.
//!
//! A small hyper HTTP/1.1 server rather than the testkit's fake (whose behaviours answer at
//! once): the benchmark needs the upstream's own cost per frame to stay small and known.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Instant;
use weft_wire::openai::{ChatCompletionChunk, Usage};

use crate::cli::{MAX_DELTAS, MAX_GAP_MS};

/// A request body larger than this is not a benchmark prompt.
const MAX_REQUEST: usize = 1 << 20;
/// The marker of the per-request pace line in the last user message.
const PACE_MARKER: &str = "#pace";

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// How one stream is paced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// Content deltas in the answer.
    pub deltas: u32,
    /// Time between two deltas.
    pub gap: Duration,
}

/// The `#pace` line that asks the paced upstream for `deltas` deltas `gap_ms` apart.
pub fn pace_line(deltas: u32, gap_ms: u64) -> String {
    format!(
        "{PACE_MARKER} {}",
        json!({"deltas": deltas, "gap_ms": gap_ms})
    )
}

/// The text of delta `k`.
pub fn delta_text(k: u32) -> String {
    format!("{k} ")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PaceSpec {
    deltas: Option<u32>,
    gap_ms: Option<u64>,
}

/// The pace a request asks for: its `#pace` line over `default`; an error says what is wrong
/// with the line.
fn pace_of(body: &Value, default: Pace) -> Result<Pace, String> {
    let Some(text) = last_user_text(body) else {
        return Ok(default);
    };
    let Some(spec) = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(PACE_MARKER))
    else {
        return Ok(default);
    };
    let spec: PaceSpec = serde_json::from_str(spec.trim()).map_err(|e| {
        format!("the {PACE_MARKER} line must be JSON like {{\"deltas\": 64, \"gap_ms\": 20}}: {e}")
    })?;
    let deltas = spec.deltas.unwrap_or(default.deltas);
    if !(1..=MAX_DELTAS).contains(&i64::from(deltas)) {
        return Err(format!(
            "`deltas` must be between 1 and {MAX_DELTAS}, got {deltas}"
        ));
    }
    let gap = match spec.gap_ms {
        Some(ms) if ms <= MAX_GAP_MS => Duration::from_millis(ms),
        Some(ms) => return Err(format!("`gap_ms` must be at most {MAX_GAP_MS}, got {ms}")),
        None => default.gap,
    };
    Ok(Pace { deltas, gap })
}

fn last_user_text(body: &Value) -> Option<String> {
    let m = body["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "user")?;
    match &m["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// The running server's shared state.
struct Shared {
    default: Pace,
    calls: Arc<AtomicU64>,
}

/// Serves on `listener` until the future is dropped, counting chat requests in `calls`.
pub async fn serve(listener: TcpListener, default: Pace, calls: Arc<AtomicU64>) -> Infallible {
    let shared = Arc::new(Shared { default, calls });
    // The connections' tasks belong to this set: dropping the server (at shutdown) aborts them.
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors or a connection reset before it was accepted: keep
                // serving the others.
                eprintln!("upstream: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if let Err(e) = tcp.set_nodelay(true) {
            eprintln!("upstream: cannot set TCP_NODELAY on an accepted socket: {e}");
        }
        let shared = shared.clone();
        connections.spawn(async move {
            let svc = service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(&shared, req).await) }
            });
            // A client going away mid-stream is an error here and nothing to report.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), svc)
                .await;
        });
    }
}

async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    match (req.method(), req.uri().path()) {
        (&Method::POST, "/v1/chat/completions") => chat(shared, req).await,
        (&Method::GET, "/v1/models") => json_response(
            StatusCode::OK,
            &json!({"object": "list", "data": [{"id": "paced", "object": "model", "created": 0, "owned_by": "weft-loadtest"}]}),
        ),
        _ => error(StatusCode::NOT_FOUND, "no such route on the paced upstream"),
    }
}

fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(v.to_string())).boxed_unsync());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    json_response(
        status,
        &json!({"error": {"message": message, "type": "invalid_request_error", "code": null, "param": null}}),
    )
}

async fn chat(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let bytes = match http_body_util::Limited::new(req.into_body(), MAX_REQUEST)
        .collect()
        .await
    {
        Ok(c) => c.to_bytes(),
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            );
        }
    };
    let Ok(body) = serde_json::from_slice::<Value>(&bytes) else {
        return error(StatusCode::BAD_REQUEST, "the request body is not JSON");
    };
    shared.calls.fetch_add(1, Ordering::Relaxed);
    let pace = match pace_of(&body, shared.default) {
        Ok(p) => p,
        Err(msg) => return error(StatusCode::BAD_REQUEST, &msg),
    };
    let model = body["model"].as_str().unwrap_or("paced");
    let prompt_tokens = u64::try_from(bytes.len() / 4).unwrap_or(u64::MAX).max(1);
    let usage = Usage {
        prompt_tokens,
        completion_tokens: u64::from(pace.deltas),
        total_tokens: prompt_tokens + u64::from(pace.deltas),
    };
    if !body["stream"].as_bool().unwrap_or(false) {
        let text: String = (0..pace.deltas).map(delta_text).collect();
        return json_response(
            StatusCode::OK,
            &json!({
                "id": ID, "object": "chat.completion", "created": CREATED,
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop", "logprobs": null}],
                "usage": usage,
            }),
        );
    }
    let include_usage = body["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false);
    let chunks = Chunks::new(model, include_usage.then_some(usage));
    let start = Instant::now();
    let frames = futures::stream::unfold(0_u32, move |k| {
        let chunks = chunks.clone();
        async move {
            if k >= pace.deltas {
                return None;
            }
            if k > 0 {
                tokio::time::sleep_until(start + pace.gap * k).await;
            }
            let data = chunks.frame(k, pace.deltas);
            Some((Ok(Frame::data(Bytes::from(data))), k + 1))
        }
    });
    let mut resp = Response::new(StreamBody::new(frames).boxed_unsync());
    let headers = resp.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(CACHE_CONTROL, http::HeaderValue::from_static("no-cache"));
    resp
}

/// Every answer's `id` and `created`.
const ID: &str = "chatcmpl-paced";
const CREATED: u64 = 1_700_000_000;

/// The SSE chunks of one answer, rendered from pieces made once per request.
#[derive(Clone)]
struct Chunks {
    /// `data: {"id":…,"model":…,"choices":[{"index":0,"delta":` (shared by every chunk).
    head: Arc<str>,
    /// The usage chunk's whole event, when the request asked for it.
    usage: Option<Arc<str>>,
}

impl Chunks {
    fn new(model: &str, usage: Option<Usage>) -> Self {
        let last = usage.map(|u| ChatCompletionChunk::usage(ID, CREATED, model, u));
        let model = Value::String(model.to_owned());
        // Written by hand, once: every chunk but the usage one starts with these bytes.
        let head = format!(
            "data: {{\"id\":\"{ID}\",\"object\":\"chat.completion.chunk\",\"created\":{CREATED},\"model\":{model},\"choices\":[{{\"index\":0,\"delta\":"
        );
        let usage = last.map(|c| {
            format!(
                "data: {}\n\n",
                serde_json::to_string(&c).unwrap_or_default()
            )
            .into()
        });
        Self {
            head: head.into(),
            usage,
        }
    }

    fn chunk(&self, out: &mut String, delta: &str, finish: Option<&str>) {
        out.push_str(&self.head);
        out.push_str(delta);
        match finish {
            Some(f) => {
                out.push_str(",\"finish_reason\":\"");
                out.push_str(f);
                out.push_str("\"}]}\n\n");
            }
            None => out.push_str(",\"finish_reason\":null}]}\n\n"),
        }
    }

    /// What is written at delta `k` of `deltas`.
    fn frame(&self, k: u32, deltas: u32) -> String {
        let mut out = String::with_capacity(self.head.len() * 2 + 64);
        if k == 0 {
            self.chunk(&mut out, "{\"role\":\"assistant\",\"content\":\"\"}", None);
        }
        self.chunk(
            &mut out,
            &format!("{{\"content\":\"{}\"}}", delta_text(k)),
            None,
        );
        if k + 1 == deltas {
            self.chunk(&mut out, "{}", Some("stop"));
            if let Some(u) = &self.usage {
                out.push_str(u);
            }
            out.push_str("data: [DONE]\n\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: Pace = Pace {
        deltas: 64,
        gap: Duration::from_millis(20),
    };

    fn body(prompt: &str) -> Value {
        json!({"model": "m", "messages": [{"role": "system", "content": "#pace {\"deltas\": 1}"}, {"role": "user", "content": prompt}]})
    }

    #[test]
    fn the_pace_line_overrides_the_default() {
        assert_eq!(pace_of(&body("hello"), DEFAULT), Ok(DEFAULT));
        let line = pace_line(3, 5);
        assert_eq!(
            pace_of(&body(&format!("bench\n{line}")), DEFAULT),
            Ok(Pace {
                deltas: 3,
                gap: Duration::from_millis(5)
            })
        );
        assert_eq!(
            pace_of(&body("#pace {\"gap_ms\": 0}"), DEFAULT),
            Ok(Pace {
                deltas: 64,
                gap: Duration::ZERO
            })
        );
        assert!(pace_of(&body("#pace {\"deltas\": 0}"), DEFAULT).is_err());
        assert!(pace_of(&body("#pace {\"gap_ms\": 60001}"), DEFAULT).is_err());
        assert!(pace_of(&body("#pace {\"speed\": 1}"), DEFAULT).is_err());
        assert!(pace_of(&body("#pace 12"), DEFAULT).is_err());
    }

    #[test]
    fn frames_carry_one_delta_each_and_close_the_stream_with_the_last() {
        let c = Chunks::new(
            "m\"x",
            Some(Usage {
                prompt_tokens: 1,
                ..Usage::default()
            }),
        );
        let first = c.frame(0, 3);
        let events: Vec<&str> = first.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 2, "{first}");
        let role: Value = serde_json::from_str(events[0].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(role["model"], "m\"x");
        let d0: Value = serde_json::from_str(events[1].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(d0["choices"][0]["delta"]["content"], "0 ");
        assert!(d0["choices"][0]["finish_reason"].is_null());

        let mid = c.frame(1, 3);
        assert_eq!(mid.matches("data: ").count(), 1, "{mid}");

        let last = c.frame(2, 3);
        let events: Vec<&str> = last.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 4, "{last}");
        let fin: Value = serde_json::from_str(events[1].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(fin["choices"][0]["finish_reason"], "stop");
        let usage: Value = serde_json::from_str(events[2].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(usage["usage"]["prompt_tokens"], 1);
        assert_eq!(events[3], "data: [DONE]");

        let only = Chunks::new("m", None).frame(0, 1);
        assert_eq!(only.matches("data: ").count(), 4, "{only}");
    }
}
