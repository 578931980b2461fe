//! What every HTTP driver shares: the client and its retry loop before the first byte, the
//! mapping of upstream statuses to weft errors, and the two streaming framings (SSE and NDJSON)
//! folded into [`ChatEvent`]s by a per-provider [`Fold`].

use std::collections::VecDeque;
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures::{Stream, StreamExt as _};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use weft_config::HttpProviderConfig;
use weft_core::{Error, ErrorCode};
use weft_wire::error::ErrorAnswer;

#[cfg(test)]
use serde_json::Value;

use super::{EventStream, ProviderError};
use crate::types::ChatEvent;

/// How the API key is presented.
#[derive(Clone, Copy, Debug)]
pub enum KeyStyle {
    /// `Authorization: Bearer <key>` (OpenAI, DeepSeek, Ollama behind a proxy).
    Bearer,
    /// A named header carrying the bare key (`x-api-key`, `x-goog-api-key`).
    Header(&'static str),
}

/// One provider's HTTP client: connection pool, key, retry policy.
pub struct Upstream {
    pub name: String,
    pub cfg: HttpProviderConfig,
    client: reqwest::Client,
    headers: HeaderMap,
}

impl Upstream {
    /// Builds the client. Fails when `api_key_env` names an unset variable, so a
    /// misconfiguration shows at start, not on the first request.
    pub fn new(
        name: &str,
        cfg: &HttpProviderConfig,
        key_style: KeyStyle,
        extra_headers: &[(&'static str, String)],
    ) -> Result<Self, String> {
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(var) = &cfg.api_key_env {
            let key = std::env::var(var).map_err(|_| {
                format!("router.providers.{name}.api_key_env names `{var}`, which is not set in the environment")
            })?;
            let (header, value) = match key_style {
                KeyStyle::Bearer => (
                    reqwest::header::AUTHORIZATION,
                    format!("Bearer {}", key.trim()),
                ),
                KeyStyle::Header(h) => (HeaderName::from_static(h), key.trim().to_owned()),
            };
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                format!("router.providers.{name}: the key in `{var}` is not a valid header value")
            })?;
            value.set_sensitive(true);
            headers.insert(header, value);
        }
        for (k, v) in extra_headers {
            headers.insert(
                HeaderName::from_static(k),
                HeaderValue::from_str(v)
                    .map_err(|_| format!("router.providers.{name}: bad value for header {k}"))?,
            );
        }
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            // A provider API that redirects a POST is misconfigured: following it (as a GET,
            // for 301 and 302) would not be the call weft was asked to make. Off, too, is
            // reqwest's own retry of refused HTTP/2 streams: `post` below retries failed
            // connections itself (up to `max_retries`, with backoff).
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(256)
            .build()
            .map_err(|e| {
                format!("router.providers.{name}: building the HTTP client failed: {e}")
            })?;
        Ok(Self {
            name: name.to_owned(),
            cfg: cfg.clone(),
            client,
            headers,
        })
    }

    /// `base_url` without a trailing slash.
    pub fn base(&self) -> &str {
        self.cfg.base_url.trim_end_matches('/')
    }

    /// `base_url` followed by `path` (which starts with `/`), parsed once: drivers keep their
    /// endpoints parsed, so a call does not parse its URL again.
    pub fn endpoint(&self, path: &str) -> Result<reqwest::Url, String> {
        let url = format!("{}{path}", self.base());
        reqwest::Url::parse(&url).map_err(|e| {
            format!(
                "router.providers.{}: `{url}` is not a valid URL ({e}); check base_url",
                self.name
            )
        })
    }

    /// Time allowed for the first byte, and between bytes of a stream.
    pub fn idle(&self) -> Duration {
        Duration::from_secs(self.cfg.first_byte_timeout_secs)
    }

    /// POSTs `body` as JSON, retrying 429/5xx and connection failures with backoff (honouring
    /// `Retry-After` up to `max_retry_after_secs`) until a 2xx arrives.
    pub async fn post<B: serde::Serialize + ?Sized>(
        &self,
        url: &reqwest::Url,
        body: &B,
    ) -> Result<reqwest::Response, ProviderError> {
        let body = encode(body)?;
        // Until the response's head (or the last failure); the provider's name, the attempts and
        // the status only: never the URL's query, a header or a body.
        let span = tracing::info_span!(
            target: weft_telemetry::REQUEST_SPANS,
            "provider_call",
            provider = %self.name,
            attempts = tracing::field::Empty,
            status = tracing::field::Empty
        );
        let resp =
            tracing::Instrument::instrument(self.post_attempts(url, body), span.clone()).await;
        match &resp {
            Ok((r, attempts)) => {
                span.record("attempts", attempts);
                span.record("status", r.status().as_u16());
            }
            Err((e, attempts)) => {
                span.record("attempts", attempts);
                span.record("status", tracing::field::display(&e.error.code));
            }
        }
        resp.map(|(r, _)| r).map_err(|(e, _)| e)
    }

    /// [`Upstream::post`]'s attempts, each carrying the W3C trace context; with how many were
    /// made.
    async fn post_attempts(
        &self,
        url: &reqwest::Url,
        body: bytes::Bytes,
    ) -> Result<(reqwest::Response, u32), (ProviderError, u32)> {
        let max_wait = Duration::from_secs(self.cfg.max_retry_after_secs);
        let mut attempt: u32 = 0;
        // A copy with the trace context only when there is one to send (spans exported).
        let mut traced: Option<HeaderMap> = None;
        weft_telemetry::inject_trace_context_with(|k, v| {
            if let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(&v),
            ) {
                traced
                    .get_or_insert_with(|| self.headers.clone())
                    .insert(k, v);
            }
        });
        let headers = traced.as_ref().unwrap_or(&self.headers);
        loop {
            let rb = self
                .client
                .post(url.clone())
                .headers(headers.clone())
                .body(body.clone());
            let (err, may_retry_here) = match tokio::time::timeout(self.idle(), rb.send()).await {
                Err(_) => (ProviderError::retryable(self.timeout_error()), false),
                Ok(Err(e)) => {
                    tracing::warn!(provider = %self.name, error = %e, "upstream request failed");
                    (
                        ProviderError::retryable(Error::new(
                            ErrorCode::UpstreamError,
                            format!("provider `{}` is unreachable", self.name),
                        )),
                        true,
                    )
                }
                Ok(Ok(resp)) if resp.status().is_success() => return Ok((resp, attempt + 1)),
                Ok(Ok(resp)) => {
                    let status = resp.status().as_u16();
                    let e = self.status_error(resp).await;
                    // Bad credentials stay bad, and so does a redirect: let the next
                    // candidate try instead. So does the model's unreadable output: the same
                    // request, asked again, would mostly write the same.
                    let retry = e.retryable
                        && !matches!(status, 300..=399 | 401 | 403)
                        && e.error.code != ErrorCode::ModelOutputInvalid;
                    (e, retry)
                }
            };
            if !may_retry_here || attempt >= self.cfg.max_retries {
                return Err((err, attempt + 1));
            }
            let delay = match err.error.retry_after {
                Some(d) if d > max_wait => return Err((err, attempt + 1)),
                Some(d) => d,
                None => {
                    Duration::from_millis(self.cfg.backoff_ms.saturating_mul(1 << attempt.min(10)))
                }
            };
            metrics::counter!("weft_router_upstream_retries_total", "provider" => self.name.clone())
                .increment(1);
            tracing::info!(provider = %self.name, attempt, delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), code = %err.error.code, "retrying upstream");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    /// The whole body of an accepted non-streamed answer.
    pub async fn body(&self, resp: reqwest::Response) -> Result<bytes::Bytes, ProviderError> {
        tokio::time::timeout(self.idle(), resp.bytes())
            .await
            .map_err(|_| ProviderError::retryable(self.timeout_error()))?
            .map_err(|_| ProviderError::retryable(self.broken_error()))
    }

    /// The whole body of an accepted non-streamed answer, read as the JSON object `T`
    /// ([leniently](weft_wire::lenient)); a body that is not a JSON object is malformed.
    pub async fn read<T: serde::de::DeserializeOwned>(
        &self,
        resp: reqwest::Response,
    ) -> Result<T, ProviderError> {
        let bytes = self.body(resp).await?;
        weft_wire::lenient::from_slice(&bytes)
            .ok()
            .flatten()
            .ok_or_else(|| ProviderError::retryable(self.malformed_error()))
    }

    /// The weft error for a non-2xx upstream answer.
    pub async fn status_error(&self, resp: reqwest::Response) -> ProviderError {
        let status = resp.status().as_u16();
        let header_retry = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
        // Where a redirect pointed, shortened, for the log.
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(|l| l.chars().take(200).collect::<String>());
        let bytes = resp.bytes().await.ok();
        let body = bytes
            .as_deref()
            .and_then(|b| serde_json::from_slice::<ErrorAnswer<'_>>(b).ok());
        // Gemini says when to retry in the body (`RetryInfo.retryDelay`), not in a header.
        let retry_after = header_retry.or_else(|| body.as_ref().and_then(retry_delay));
        // The upstream's own message is meant for API callers; keep it short and never echo
        // anything but its error message.
        let detail = body
            .as_ref()
            .and_then(ErrorAnswer::message)
            .map(|s| s.chars().take(300).collect::<String>());
        let name = &self.name;
        let with_detail = |s: String| match &detail {
            Some(d) => format!("{s}: {d}"),
            None => s,
        };
        match status {
            429 => ProviderError::rate_limited(name, retry_after),
            // Redirects are not followed (see `Upstream::new`): say where it pointed.
            // Where it pointed goes to the log, not to the caller (it may name hosts or carry
            // a signed query).
            300..=399 => {
                tracing::warn!(provider = %name, status, location = location.as_deref().unwrap_or("-"), "provider answered with a redirect, not followed");
                ProviderError::retryable(Error::new(
                    ErrorCode::UpstreamError,
                    format!(
                        "provider `{name}` answered with a redirect (status {status}); weft does not follow redirects: set its base_url to the final address (the log has the Location)"
                    ),
                ))
            }
            // 529 is Anthropic's "overloaded": retryable like any 5xx.
            500..=599 => {
                let mut e = match detail.as_deref() {
                    Some(d) if model_output_invalid(d) => Error::new(
                        ErrorCode::ModelOutputInvalid,
                        format!("provider `{name}` could not read the model's output: {d}"),
                    ),
                    _ => Error::new(
                        ErrorCode::UpstreamError,
                        format!("provider `{name}` failed with status {status}"),
                    ),
                };
                e.retry_after = retry_after;
                ProviderError::retryable(e)
            }
            401 | 403 => ProviderError::retryable(Error::new(
                ErrorCode::UpstreamError,
                format!(
                    "provider `{name}` refused weft's credentials (status {status}); check its api_key_env"
                ),
            )),
            404 => ProviderError::fatal(
                Error::new(
                    ErrorCode::ModelNotFound,
                    with_detail(format!("provider `{name}` does not know this model")),
                )
                .with_param("model"),
            ),
            _ => ProviderError::fatal(Error::invalid(with_detail(format!(
                "provider `{name}` rejected the request (status {status})"
            )))),
        }
    }

    pub fn timeout_error(&self) -> Error {
        Error::new(
            ErrorCode::UpstreamTimeout,
            format!(
                "provider `{}` did not answer within {} s",
                self.name, self.cfg.first_byte_timeout_secs
            ),
        )
    }

    pub fn malformed_error(&self) -> Error {
        Error::new(
            ErrorCode::UpstreamError,
            format!("provider `{}` returned a malformed response", self.name),
        )
    }

    pub fn broken_error(&self) -> Error {
        Error::new(
            ErrorCode::UpstreamError,
            format!("provider `{}` broke the connection mid-response", self.name),
        )
    }

    /// The events of an SSE answer, folded by `fold`.
    pub fn sse<F: Fold>(&self, resp: reqwest::Response, fold: F) -> EventStream {
        fold_stream(
            self.name.clone(),
            self.idle(),
            sse_frames(resp.bytes_stream()),
            fold,
        )
    }

    /// The events of a newline-delimited JSON answer (Ollama), folded by `fold` with an empty
    /// event name per line.
    pub fn ndjson<F: Fold>(&self, resp: reqwest::Response, fold: F) -> EventStream {
        fold_stream(
            self.name.clone(),
            self.idle(),
            ndjson_frames(resp.bytes_stream()),
            fold,
        )
    }
}

/// A request body as the bytes a call sends. Bytes: a retry re-sends the same buffer (a
/// reference count, not a copy).
pub(crate) fn encode<B: serde::Serialize + ?Sized>(
    body: &B,
) -> Result<bytes::Bytes, ProviderError> {
    serde_json::to_vec(body)
        .map(bytes::Bytes::from)
        .map_err(|_| ProviderError::fatal(Error::internal()))
}

/// An SSE body as `(event name, data)` pairs.
pub(crate) fn sse_frames(
    body: impl Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Send + 'static,
) -> impl Stream<Item = Result<(String, String), String>> + Send + 'static {
    body.eventsource()
        .map(|r| r.map(|ev| (ev.event, ev.data)).map_err(|e| e.to_string()))
}

/// An NDJSON body as `("", line)` pairs.
pub(crate) fn ndjson_frames(
    body: impl Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Send + 'static,
) -> impl Stream<Item = Result<(String, String), String>> + Send + 'static {
    ndjson_lines(body).map(|r| r.map(|line| (String::new(), line)))
}

/// The human-readable message of a provider error body, read from bytes as
/// [`Upstream::status_error`] reads it.
#[cfg(test)]
pub(crate) fn error_message(v: &Value) -> Option<String> {
    use serde::Deserialize as _;
    ErrorAnswer::deserialize(v)
        .ok()?
        .message()
        .map(str::to_owned)
}

/// [`retry_delay`] of a parsed body.
#[cfg(test)]
pub(crate) fn body_retry_delay(v: &Value) -> Option<Duration> {
    use serde::Deserialize as _;
    retry_delay(&ErrorAnswer::deserialize(v).ok()?)
}

/// Google's `RetryInfo` detail: `{"error": {"details": [{"@type": "…RetryInfo", "retryDelay":
/// "7s"}]}}`.
pub(crate) fn retry_delay(answer: &ErrorAnswer<'_>) -> Option<Duration> {
    answer.details()?.iter().find_map(|d| {
        let s = d.0.as_ref()?.retry_delay.as_deref()?.strip_suffix('s')?;
        let secs: f64 = s.parse().ok()?;
        // `from_secs_f64` panics past u64::MAX seconds: cap there, as `Retry-After` is.
        (secs.is_finite() && secs >= 0.0)
            .then(|| Duration::try_from_secs_f64(secs).unwrap_or(Duration::from_secs(u64::MAX)))
    })
}

/// `Retry-After` as delay-seconds or an HTTP date (RFC 9110 §10.2.3); a date in the past is 0.
pub fn parse_retry_after(v: &str, now: std::time::SystemTime) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Whether an upstream's error message says the model's own output was unreadable rather than
/// the upstream failing: llama.cpp's server when a tool call does not parse ("the model produced
/// output that does not match the expected … format", "failed to parse tool call") and OpenAI's
/// "the model produced invalid content". Asking again, with a note, may succeed.
pub fn model_output_invalid(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("model produced invalid content")
        || m.contains("model produced output that does not match")
        || m.contains("failed to parse tool call")
}

/// Why a stream could not be folded.
#[derive(Debug)]
pub enum Fault {
    /// The upstream sent something that is not its wire format.
    Malformed,
    /// The upstream reported an error inside the stream (e.g. Anthropic's `overloaded_error`).
    Upstream(String),
    /// The stream ended before the upstream said it was complete.
    EndedEarly,
}

/// A provider's stream grammar: turns each framed event into weft events.
pub trait Fold: Send + 'static {
    /// Applies one event (`event` is the SSE event name, empty for data-only SSE and NDJSON).
    fn on_event(
        &mut self,
        event: &str,
        data: &str,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), Fault>;
    /// Whether the upstream has said the answer is complete; the stream then ends after
    /// [`Fold::at_end`] without reading further.
    fn is_done(&self) -> bool;
    /// Called once at the end (completion or end of body): push the usage and finish, or say
    /// why the answer is incomplete.
    fn at_end(&mut self, out: &mut VecDeque<ChatEvent>) -> Result<(), Fault>;
}

type Framed = std::pin::Pin<Box<dyn Stream<Item = Result<(String, String), String>> + Send>>;

pub(crate) fn fold_stream<F: Fold>(
    provider: String,
    idle: Duration,
    source: impl Stream<Item = Result<(String, String), String>> + Send + 'static,
    fold: F,
) -> EventStream {
    let source: Framed = Box::pin(source);
    let fail = |provider: &str, fault: Fault| {
        let (code, what) = match fault {
            Fault::Malformed => (
                ErrorCode::UpstreamError,
                "sent a malformed stream chunk".to_owned(),
            ),
            Fault::EndedEarly => (
                ErrorCode::UpstreamError,
                "ended the stream early".to_owned(),
            ),
            Fault::Upstream(m) if model_output_invalid(&m) => (
                ErrorCode::ModelOutputInvalid,
                format!("could not read the model's output mid-stream: {m}"),
            ),
            Fault::Upstream(m) => (
                ErrorCode::UpstreamError,
                format!("reported an error mid-stream: {m}"),
            ),
        };
        Error::new(code, format!("provider `{provider}` {what}"))
    };
    struct St<F> {
        src: Framed,
        fold: F,
        pending: VecDeque<ChatEvent>,
        ended: bool,
        provider: String,
    }
    Box::pin(futures::stream::unfold(
        Some(St {
            src: source,
            fold,
            pending: VecDeque::new(),
            ended: false,
            provider,
        }),
        move |st| async move {
            let mut st = st?;
            loop {
                if let Some(ev) = st.pending.pop_front() {
                    return Some((Ok(ev), Some(st)));
                }
                if st.ended {
                    return None;
                }
                if st.fold.is_done() {
                    st.ended = true;
                    if let Err(f) = st.fold.at_end(&mut st.pending) {
                        return Some((Err(fail(&st.provider, f)), None));
                    }
                    continue;
                }
                match tokio::time::timeout(idle, st.src.next()).await {
                    Err(_) => {
                        let e = Error::new(
                            ErrorCode::UpstreamError,
                            format!("provider `{}` stalled mid-stream", st.provider),
                        );
                        return Some((Err(e), None));
                    }
                    Ok(None) => {
                        st.ended = true;
                        if let Err(f) = st.fold.at_end(&mut st.pending) {
                            return Some((Err(fail(&st.provider, f)), None));
                        }
                    }
                    Ok(Some(Err(_))) => {
                        let e = Error::new(
                            ErrorCode::UpstreamError,
                            format!("provider `{}` broke the stream mid-way", st.provider),
                        );
                        return Some((Err(e), None));
                    }
                    Ok(Some(Ok((event, data)))) => {
                        if let Err(f) = st.fold.on_event(&event, &data, &mut st.pending) {
                            return Some((Err(fail(&st.provider, f)), None));
                        }
                    }
                }
            }
        },
    ))
}

/// Splits a byte stream into non-empty lines (without the newline).
fn ndjson_lines(
    body: impl Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Send + 'static,
) -> impl Stream<Item = Result<String, String>> + Send + 'static {
    futures::stream::unfold(
        (Box::pin(body), Vec::<u8>::new(), false),
        |(mut body, mut buf, mut eof)| async move {
            loop {
                if let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    let line = String::from_utf8_lossy(&line).trim().to_owned();
                    if line.is_empty() {
                        continue;
                    }
                    return Some((Ok(line), (body, buf, eof)));
                }
                if eof {
                    let rest = String::from_utf8_lossy(&buf).trim().to_owned();
                    buf.clear();
                    return (!rest.is_empty()).then_some((Ok(rest), (body, buf, eof)));
                }
                match body.next().await {
                    Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                    Some(Err(e)) => return Some((Err(e.to_string()), (body, buf, true))),
                    None => eof = true,
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_upstreams_words_for_unreadable_model_output_are_model_output_invalid() {
        for m in [
            "The model produced output that does not match the expected peg-native format",
            "The model produced invalid content. Consider modifying your prompt",
            "Failed to parse tool call arguments as JSON",
        ] {
            assert!(model_output_invalid(m), "{m}");
        }
        for m in [
            "Overloaded",
            "internal server error",
            "the model is loading",
        ] {
            assert!(!model_output_invalid(m), "{m}");
        }
    }

    #[test]
    fn retry_after_takes_seconds_or_an_http_date() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn error_messages_come_from_every_shape() {
        let m = |v: Value| error_message(&v);
        assert_eq!(
            m(serde_json::json!({"error": {"message": "a"}})),
            Some("a".into())
        );
        assert_eq!(m(serde_json::json!({"error": "b"})), Some("b".into()));
        assert_eq!(
            m(serde_json::json!([{"error": {"message": "c"}}])),
            Some("c".into())
        );
        assert_eq!(m(serde_json::json!({})), None);
    }

    #[test]
    fn googles_retry_info_gives_the_delay() {
        let v = serde_json::json!({"error": {"code": 429, "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure"},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}
        ]}});
        assert_eq!(body_retry_delay(&v), Some(Duration::from_secs(7)));
        assert_eq!(
            body_retry_delay(&serde_json::json!({"error": {"details": [{"retryDelay": "1.5s"}]}})),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(body_retry_delay(&serde_json::json!({"error": {}})), None);
    }

    #[tokio::test]
    async fn a_provider_call_carries_the_callers_trace_context_when_spans_are_exported() {
        use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        use weft_testkit::{FixtureServer, Kind};
        let dir = FixtureServer::fixture_dir(env!("CARGO_MANIFEST_DIR"), Kind::Openai);
        let server = FixtureServer::start(Kind::Openai, dir).await;
        let cfg = HttpProviderConfig::new(server.base_url());
        let up = Upstream::new("p", &cfg, KeyStyle::Bearer, &[]).unwrap();
        let url = up.endpoint("/chat/completions").unwrap();
        let body =
            serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});

        // No exporter (no OpenTelemetry layer): no header.
        let _ = up.post(&url, &body).await;
        let first = server.requests();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].header("traceparent"), None);

        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let _default = tracing::subscriber::set_default(
            tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test"))),
        );
        let caller = tracing::info_span!("caller");
        let _ = tracing::Instrument::instrument(up.post(&url, &body), caller.clone()).await;
        let trace = caller
            .context()
            .span()
            .span_context()
            .trace_id()
            .to_string();
        let sent = server.requests();
        let header = sent[1].header("traceparent").expect("a traceparent header");
        assert_eq!(header.split('-').nth(1), Some(trace.as_str()), "{header}");
    }

    #[tokio::test]
    async fn ndjson_lines_split_across_chunks() {
        let chunks: Vec<Result<bytes::Bytes, reqwest::Error>> = vec![
            Ok(bytes::Bytes::from_static(b"{\"a\":1}\n{\"b\"")),
            Ok(bytes::Bytes::from_static(b":2}\n\n{\"c\":3}")),
        ];
        let lines: Vec<_> = ndjson_lines(futures::stream::iter(chunks))
            .map(Result::unwrap)
            .collect()
            .await;
        assert_eq!(lines, vec!["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]);
    }

    /// A delay past u64::MAX seconds panicked in `Duration::from_secs_f64` (found while writing
    /// the `provider_body` fuzz target; fuzz/seeds/provider_body/retry-delay-1e300).
    #[test]
    fn a_retry_delay_too_long_for_a_duration_is_capped() {
        let v = serde_json::json!({"error": {"details": [{"retryDelay": "1e300s"}]}});
        assert_eq!(body_retry_delay(&v), Some(Duration::from_secs(u64::MAX)));
    }
}
