//! One chat request, sent and checked: a pooled hyper client with `TCP_NODELAY`, the request
//! body serialised once, and a body check that reads the whole response (through `data: [DONE]`
//! for a stream, or `response.completed` on the Responses door) so a fast error or a truncated
//! stream never passes for a fast success.

use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;
use weft_wire::openai::{self, ChatRequest, Message, StreamOptions};

use crate::report::{ErrorKind, Timing};

/// A non-stream body larger than this is not a small completion: reading stops and it counts as
/// `invalid` (the generator must not buffer without bound).
const MAX_BODY: usize = 4 << 20;

/// The door a run calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Door {
    /// `POST /chat/completions`.
    Chat,
    /// `POST /responses` (OpenAI's Responses API), `store: false`.
    Responses,
    /// `POST /responses` with `store: true` (OpenAI's default): each response is kept.
    ResponsesStored,
}

/// What the run sends, prepared once and shared by every worker.
pub struct Target {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    body: Bytes,
    auth: Option<HeaderValue>,
    /// Extra headers on every request (a peer gateway's routing headers).
    extra: Vec<(http::HeaderName, HeaderValue)>,
    stream: bool,
    door: Door,
    timeout: Duration,
}

/// The request parameters, as given on the command line.
pub struct TargetSpec<'a> {
    pub url: &'a str,
    pub token: Option<&'a str>,
    pub model: &'a str,
    pub prompt: &'a str,
    pub stream: bool,
    pub door: Door,
    pub timeout: Duration,
    /// Expected number of concurrent connections, so the pool keeps them all.
    pub connections: usize,
    /// Extra headers, each `Name: value`.
    pub headers: &'a [String],
}

/// `Name: value` as a header, or what is wrong with it.
fn parse_header(h: &str) -> anyhow::Result<(http::HeaderName, HeaderValue)> {
    let (name, value) = h
        .split_once(':')
        .with_context(|| format!("`{h}` is not a header; write `Name: value`"))?;
    let name = http::HeaderName::from_bytes(name.trim().as_bytes())
        .with_context(|| format!("`{}` is not a header name", name.trim()))?;
    let value = HeaderValue::from_str(value.trim())
        .with_context(|| format!("the value of `{name}` is not a header value"))?;
    Ok((name, value))
}

/// The `POST /chat/completions` body: one user message, and the usage chunk asked for when
/// streaming, as weft's router asks its upstreams.
pub fn chat_body<'a>(model: &'a str, prompt: &'a str, stream: bool) -> ChatRequest<'a> {
    ChatRequest {
        model,
        messages: vec![Message::text("user", prompt.into())],
        stream,
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
        ..ChatRequest::default()
    }
}

/// The `POST /responses` body: the prompt as `input`, kept or not.
pub fn responses_body(model: &str, prompt: &str, stream: bool, store: bool) -> serde_json::Value {
    serde_json::json!({"model": model, "input": prompt, "stream": stream, "store": store})
}

impl Target {
    pub fn new(spec: &TargetSpec<'_>) -> anyhow::Result<Self> {
        let url = spec.url.trim_end_matches('/');
        let path = match spec.door {
            Door::Chat => "chat/completions",
            Door::Responses | Door::ResponsesStored => "responses",
        };
        let uri: Uri = format!("{url}/{path}").parse().with_context(|| {
            format!("`{url}` is not a URL; write e.g. http://127.0.0.1:8080/v1")
        })?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            bail!(
                "`{url}` must be an http:// URL with a host (the generator speaks plain HTTP/1.1)"
            );
        }
        let auth = spec
            .token
            .filter(|t| !t.is_empty())
            .map(|t| {
                let mut v = HeaderValue::from_str(&format!("Bearer {t}"))
                    .context("the token contains characters not allowed in a header")?;
                v.set_sensitive(true);
                anyhow::Ok(v)
            })
            .transpose()?;
        let extra = spec
            .headers
            .iter()
            .map(|h| parse_header(h))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let body = Bytes::from(match spec.door {
            Door::Chat => serde_json::to_vec(&chat_body(spec.model, spec.prompt, spec.stream))?,
            Door::Responses | Door::ResponsesStored => serde_json::to_vec(&responses_body(
                spec.model,
                spec.prompt,
                spec.stream,
                spec.door == Door::ResponsesStored,
            ))?,
        });

        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.enforce_http(true);
        connector.set_connect_timeout(Some(spec.timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(spec.connections.max(1))
            .build(connector);
        Ok(Self {
            client,
            uri,
            body,
            auth,
            extra,
            stream: spec.stream,
            door: spec.door,
            timeout: spec.timeout,
        })
    }

    fn request(&self) -> Request<Full<Bytes>> {
        // Cloning `Bytes`, `Uri` and `HeaderValue` is reference counting, not copying.
        let mut req = Request::new(Full::new(self.body.clone()));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = self.uri.clone();
        let headers = req.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if self.stream {
            headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        if let Some(auth) = &self.auth {
            headers.insert(AUTHORIZATION, auth.clone());
        }
        for (name, value) in &self.extra {
            headers.insert(name.clone(), value.clone());
        }
        req
    }

    /// Sends one request and returns the response once its head arrived, for a scenario that
    /// reads and times the body itself (`streams`).
    pub async fn open(&self) -> Result<hyper::Response<hyper::body::Incoming>, ErrorKind> {
        self.client.request(self.request()).await.map_err(|e| {
            if e.is_connect() {
                ErrorKind::Connect
            } else {
                ErrorKind::Request
            }
        })
    }

    /// Sends one request and reads the whole response; timings are measured from `origin`
    /// (the actual start in a closed loop, the scheduled start in an open loop).
    pub async fn send(&self, origin: Instant) -> Result<Timing, ErrorKind> {
        match tokio::time::timeout(self.timeout, self.exchange(origin)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(ErrorKind::Timeout),
        }
    }

    async fn exchange(&self, origin: Instant) -> Result<Timing, ErrorKind> {
        let resp = self.client.request(self.request()).await.map_err(|e| {
            if e.is_connect() {
                ErrorKind::Connect
            } else {
                ErrorKind::Request
            }
        })?;
        let status = resp.status();
        let mut body = resp.into_body();
        let mut check = BodyCheck::new(self.stream, self.door);
        let mut ttfb = None;
        // Read even an error body to the end, so the connection goes back to the pool.
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| ErrorKind::Body)?;
            if let Ok(data) = frame.into_data()
                && !data.is_empty()
            {
                if ttfb.is_none() {
                    ttfb = Some(origin.elapsed());
                }
                check.feed(&data)?;
            }
        }
        let latency = origin.elapsed();
        if !status.is_success() {
            return Err(ErrorKind::Status(status.as_u16()));
        }
        check.finish()?;
        Ok(Timing {
            latency,
            ttfb: ttfb.unwrap_or(latency),
        })
    }

    /// One request before the run, with an explanation when it fails: a wrong URL, model or
    /// token should stop the run at once rather than produce a report full of errors.
    pub async fn preflight(&self) -> anyhow::Result<()> {
        let fut = async {
            let resp = self
                .client
                .request(self.request())
                .await
                .with_context(|| format!("POST {} failed", self.uri))?;
            let status = resp.status();
            let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| anyhow::anyhow!("reading the response of POST {}: {e}", self.uri))?
                .to_bytes();
            let snippet = || {
                let end = body.len().min(300);
                String::from_utf8_lossy(&body[..end]).into_owned()
            };
            if !status.is_success() {
                bail!("POST {} answered {status}: {}", self.uri, snippet());
            }
            let mut check = BodyCheck::new(self.stream, self.door);
            let verdict = check.feed(&body).and_then(|()| check.finish());
            if let Err(kind) = verdict {
                bail!(
                    "POST {} answered {status} but the body is not a finished completion ({kind}): {}",
                    self.uri,
                    snippet()
                );
            }
            Ok(())
        };
        tokio::time::timeout(self.timeout, fut).await.map_err(|_| {
            anyhow::anyhow!("POST {} did not answer within {:?}", self.uri, self.timeout)
        })?
    }
}

/// Decides whether a 2xx body is a finished completion, fed chunk by chunk.
enum BodyCheck {
    Json(Vec<u8>, Door),
    Sse(SseCheck),
}

impl BodyCheck {
    fn new(stream: bool, door: Door) -> Self {
        if stream {
            Self::Sse(SseCheck {
                door,
                ..SseCheck::default()
            })
        } else {
            Self::Json(Vec::with_capacity(1024), door)
        }
    }

    fn feed(&mut self, data: &[u8]) -> Result<(), ErrorKind> {
        match self {
            Self::Json(buf, _) => {
                if buf.len() + data.len() > MAX_BODY {
                    return Err(ErrorKind::Invalid);
                }
                buf.extend_from_slice(data);
                Ok(())
            }
            Self::Sse(sse) => sse.feed(data),
        }
    }

    fn finish(&self) -> Result<(), ErrorKind> {
        match self {
            Self::Json(buf, Door::Chat) => check_completion(buf),
            Self::Json(buf, Door::Responses | Door::ResponsesStored) => check_response(buf),
            Self::Sse(sse) => sse.finish(),
        }
    }
}

/// A non-stream body is a success when it parses as a chat completion whose choices all have a
/// `finish_reason` (an error object or a truncated body does not). Read as the router reads an
/// upstream's answer ([`openai::read`]).
fn check_completion(body: &[u8]) -> Result<(), ErrorKind> {
    let c: openai::read::Completion<'_> =
        serde_json::from_slice(body).map_err(|_| ErrorKind::Invalid)?;
    let choices = c.choices.unwrap_or_default();
    let finished = |ch: &weft_wire::lenient::Obj<openai::read::Choice<'_>>| {
        ch.0.as_ref().is_some_and(|c| c.finish_reason.is_some())
    };
    if choices.is_empty() || !choices.iter().all(finished) {
        return Err(ErrorKind::Invalid);
    }
    Ok(())
}

/// A Responses API body is a success when it is a response whose `status` is `completed` and
/// that has output.
fn check_response(body: &[u8]) -> Result<(), ErrorKind> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|_| ErrorKind::Invalid)?;
    let has_output = v["output"].as_array().is_some_and(|o| !o.is_empty());
    if v["status"] != "completed" || !has_output {
        return Err(ErrorKind::Invalid);
    }
    Ok(())
}

/// Line-oriented SSE check: the stream must carry a chunk with a non-null `finish_reason`, no
/// error event, and end with `data: [DONE]`; on the Responses door, no `error` or
/// `response.failed` event and a last `response.completed` (weft writes each event's `type`
/// first, so the check reads the start of the data, without a parse).
struct SseCheck {
    door: Door,
    /// The current, unfinished line (events may be split across body frames anywhere).
    line: Vec<u8>,
    finished: bool,
    done: bool,
}

impl Default for SseCheck {
    fn default() -> Self {
        Self {
            door: Door::Chat,
            line: Vec::new(),
            finished: false,
            done: false,
        }
    }
}

/// An SSE line longer than this is not a chat chunk.
const MAX_SSE_LINE: usize = 1 << 20;

impl SseCheck {
    fn feed(&mut self, mut data: &[u8]) -> Result<(), ErrorKind> {
        while let Some(nl) = data.iter().position(|&b| b == b'\n') {
            let (head, rest) = data.split_at(nl);
            if self.line.is_empty() {
                self.line_done(head)?;
            } else {
                self.line.extend_from_slice(head);
                let line = std::mem::take(&mut self.line);
                self.line_done(&line)?;
                self.line = line;
                self.line.clear();
            }
            data = &rest[1..];
        }
        if self.line.len() + data.len() > MAX_SSE_LINE {
            return Err(ErrorKind::Invalid);
        }
        self.line.extend_from_slice(data);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8]) -> Result<(), ErrorKind> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(payload) = line.strip_prefix(b"data:") else {
            // Blank separators, comments, `event:`/`id:` lines.
            return Ok(());
        };
        let payload = payload.trim_ascii();
        if self.door != Door::Chat {
            return self.response_event(payload);
        }
        if payload == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        if self.done {
            // Data after [DONE] is a broken stream.
            return Err(ErrorKind::Invalid);
        }
        // Every chunk is a JSON object; checking its ends is enough to catch a garbled event
        // without paying for a parse.
        if payload.starts_with(b"{\"error\"")
            || !(payload.starts_with(b"{") && payload.ends_with(b"}"))
        {
            return Err(ErrorKind::Invalid);
        }
        if !self.finished && has_finish_reason(payload) {
            self.finished = true;
        }
        Ok(())
    }

    /// One data line of a Responses stream: `done` once `response.completed` came; anything
    /// after it, an error or a failed response is a broken stream.
    fn response_event(&mut self, payload: &[u8]) -> Result<(), ErrorKind> {
        if self.done
            || !(payload.starts_with(b"{") && payload.ends_with(b"}"))
            || payload.starts_with(br#"{"type":"error""#)
            || payload.starts_with(br#"{"type":"response.failed""#)
        {
            return Err(ErrorKind::Invalid);
        }
        if payload.starts_with(br#"{"type":"response.completed""#) {
            self.done = true;
            self.finished = true;
        }
        Ok(())
    }

    fn finish(&self) -> Result<(), ErrorKind> {
        if !self.done || !self.line.trim_ascii().is_empty() {
            return Err(ErrorKind::Incomplete);
        }
        if !self.finished {
            return Err(ErrorKind::Invalid);
        }
        Ok(())
    }
}

/// Whether a JSON chunk has `"finish_reason"` set to something other than `null`, without
/// parsing it (the generator should stay cheap).
fn has_finish_reason(chunk: &[u8]) -> bool {
    const KEY: &[u8] = b"\"finish_reason\"";
    let mut rest = chunk;
    while let Some(at) = rest.windows(KEY.len()).position(|w| w == KEY) {
        rest = &rest[at + KEY.len()..];
        let after = rest.trim_ascii_start();
        if let Some(value) = after.strip_prefix(b":") {
            let value = value.trim_ascii_start();
            if !value.is_empty() && !value.starts_with(b"null") {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(parts: &[&str]) -> Result<(), ErrorKind> {
        let mut c = SseCheck::default();
        for p in parts {
            c.feed(p.as_bytes())?;
        }
        c.finish()
    }

    const CHUNK: &str =
        r#"data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#;
    const LAST: &str = r#"data: {"choices":[{"index":0,"delta":{},"finish_reason": "stop"}]}"#;

    #[test]
    fn a_finished_stream_passes_however_it_is_split() {
        let whole = format!("{CHUNK}\n\n{LAST}\n\ndata: [DONE]\n\n");
        assert_eq!(sse(&[&whole]), Ok(()));
        for cut in 1..whole.len() {
            let (a, b) = whole.split_at(cut);
            assert_eq!(sse(&[a, b]), Ok(()), "split at {cut}");
        }
        let crlf = whole.replace('\n', "\r\n");
        assert_eq!(sse(&[&crlf]), Ok(()));
    }

    #[test]
    fn broken_streams_fail() {
        assert_eq!(
            sse(&[&format!("{CHUNK}\n\n{LAST}\n\n")]),
            Err(ErrorKind::Incomplete)
        );
        assert_eq!(
            sse(&[&format!("{CHUNK}\n\ndata: [DONE]\n\n")]),
            Err(ErrorKind::Invalid)
        );
        assert_eq!(
            sse(&[&format!(
                "{CHUNK}\n\ndata: {{\"error\":{{\"message\":\"x\"}}}}\n\n{LAST}\n\ndata: [DONE]\n\n"
            )]),
            Err(ErrorKind::Invalid)
        );
        assert_eq!(
            sse(&[&format!("{LAST}\n\ndata: [DONE]\n\n{CHUNK}\n\n")]),
            Err(ErrorKind::Invalid)
        );
        assert_eq!(
            sse(&[&format!("data: {{not json\n\n{LAST}\n\ndata: [DONE]\n\n")]),
            Err(ErrorKind::Invalid)
        );
        assert_eq!(
            sse(&[&format!("{LAST}\n\ndata: [DO")]),
            Err(ErrorKind::Incomplete)
        );
    }

    #[test]
    fn a_responses_stream_must_complete() {
        let check = |text: &str| {
            let mut c = SseCheck {
                door: Door::Responses,
                ..SseCheck::default()
            };
            c.feed(text.as_bytes())?;
            c.finish()
        };
        let created = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0}\n\n";
        let done = "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":1}\n\n";
        let failed = "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":1}\n\n";
        assert_eq!(check(&format!("{created}{done}")), Ok(()));
        assert_eq!(check(created), Err(ErrorKind::Incomplete));
        assert_eq!(
            check(&format!("{created}{failed}")),
            Err(ErrorKind::Invalid)
        );
        assert_eq!(
            check(&format!("{created}{done}{created}")),
            Err(ErrorKind::Invalid)
        );
        assert_eq!(
            check_response(br#"{"status":"completed","output":[{}]}"#),
            Ok(())
        );
        assert_eq!(
            check_response(br#"{"status":"incomplete","output":[{}]}"#),
            Err(ErrorKind::Invalid)
        );
        assert_eq!(
            check_response(br#"{"error":{"message":"x"}}"#),
            Err(ErrorKind::Invalid)
        );
    }

    #[test]
    fn completions_need_a_finish_reason() {
        assert_eq!(
            check_completion(
                br#"{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#
            ),
            Ok(())
        );
        assert_eq!(
            check_completion(br#"{"choices":[{"finish_reason":null}]}"#),
            Err(ErrorKind::Invalid)
        );
        assert_eq!(
            check_completion(br#"{"choices":[]}"#),
            Err(ErrorKind::Invalid)
        );
        assert_eq!(
            check_completion(br#"{"error":{"message":"no"}}"#),
            Err(ErrorKind::Invalid)
        );
        assert_eq!(
            check_completion(br#"{"choices":[{"finish_reason":"st"#),
            Err(ErrorKind::Invalid)
        );
    }

    #[test]
    fn request_body_asks_for_usage_only_when_streaming() {
        let b = serde_json::to_value(chat_body("bench", "hi", true)).unwrap();
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["messages"][0]["content"], "hi");
        assert_eq!(b["messages"][0]["role"], "user");
        let b = serde_json::to_value(chat_body("bench", "hi", false)).unwrap();
        assert_eq!(b["stream"], false);
        assert!(b.get("stream_options").is_none());
        assert_eq!(
            b.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["messages", "model", "stream"]
        );
    }
}
