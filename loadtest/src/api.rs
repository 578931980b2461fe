//! weft's native API as the `runs` and `parked` scenarios use it: a pooled hyper client
//! (HTTP/1.1, `TCP_NODELAY`, keep-alive) with the bearer token, JSON calls whose whole body is
//! read (so a connection always goes back to the pool), and the run stream as SSE frames.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::report::{ErrorKind, Failure};
use crate::sse::{Frame, SseParser};

/// A JSON body larger than this is not something the runs API answers (a page of 500 runs is
/// well under a megabyte); reading stops and the call counts as `invalid`.
const MAX_BODY: usize = 16 << 20;
/// How much of an unexpected body a failure keeps, to say what the server answered.
const SNIPPET: usize = 300;

/// Why a call failed, and what was seen when there is something to show (an error body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallError {
    pub kind: ErrorKind,
    pub detail: Option<String>,
}

impl From<ErrorKind> for CallError {
    fn from(kind: ErrorKind) -> Self {
        Self { kind, detail: None }
    }
}

impl CallError {
    /// The failure of the call made in `phase` (`start`, `stream`, `cancel`, …).
    pub fn during(self, phase: &str) -> Failure {
        Failure {
            kind: format!("{phase}:{}", self.kind),
            detail: self.detail,
        }
    }
}

/// The start of `body` as text, for a failure's detail.
pub fn snippet(body: &[u8]) -> String {
    let mut end = body.len().min(SNIPPET);
    while end < body.len() && !is_char_boundary(body, end) {
        end -= 1;
    }
    String::from_utf8_lossy(&body[..end]).into_owned()
}

fn is_char_boundary(body: &[u8], at: usize) -> bool {
    // A UTF-8 continuation byte is 0b10xx_xxxx.
    body.get(at).is_none_or(|b| (b & 0xC0) != 0x80)
}

/// `http://host:port`, from what a user may type: with or without a trailing `/` or `/v1`.
pub fn base_url(url: &str) -> anyhow::Result<String> {
    let base = url.trim().trim_end_matches('/');
    let base = base
        .strip_suffix("/v1")
        .unwrap_or(base)
        .trim_end_matches('/');
    let uri: Uri = base
        .parse()
        .with_context(|| format!("`{url}` is not a URL; write e.g. http://127.0.0.1:8787"))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        bail!("`{url}` must be an http:// URL with a host (the generator speaks plain HTTP/1.1)");
    }
    Ok(base.to_owned())
}

/// Percent-encodes a query parameter value (agent names and cursors are plain, but a user may
/// pass anything).
pub fn query_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether `id` can go into a path as is (run ids are UUIDs).
pub fn is_path_safe(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The client, shared by every worker.
pub struct Api {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
    auth: Option<HeaderValue>,
}

impl Api {
    /// `connections`: how many connections the pool keeps open (one per request that can be
    /// in flight at once, streams included).
    pub fn new(url: &str, token: Option<&str>, connections: usize) -> anyhow::Result<Self> {
        let base = base_url(url)?;
        let auth = token
            .filter(|t| !t.is_empty())
            .map(|t| {
                let mut v = HeaderValue::from_str(&format!("Bearer {t}"))
                    .context("the token contains characters not allowed in a header")?;
                v.set_sensitive(true);
                anyhow::Ok(v)
            })
            .transpose()?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.enforce_http(true);
        connector.set_connect_timeout(Some(Duration::from_secs(10)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(connections.max(1))
            .build(connector);
        Ok(Self { client, base, auth })
    }

    /// The base URL, `http://host:port`.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Request<Full<Bytes>>, CallError> {
        let uri: Uri = format!("{}{path}", self.base)
            .parse()
            .map_err(|_| CallError::from(ErrorKind::Request))?;
        let has_body = body.is_some();
        let mut req = Request::new(Full::new(body.unwrap_or_default()));
        *req.method_mut() = method;
        *req.uri_mut() = uri;
        let headers = req.headers_mut();
        if has_body {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        if let Some(auth) = &self.auth {
            headers.insert(AUTHORIZATION, auth.clone());
        }
        Ok(req)
    }

    async fn send(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<hyper::Response<Incoming>, CallError> {
        self.client.request(req).await.map_err(|e| {
            CallError::from(if e.is_connect() {
                ErrorKind::Connect
            } else {
                ErrorKind::Request
            })
        })
    }

    /// Sends a request and reads the whole response body; a status outside `expect` is a
    /// `status_<code>` failure carrying the start of the body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        expect: &[u16],
    ) -> Result<Bytes, CallError> {
        let resp = self.send(self.request(method, path, body)?).await?;
        let status = resp.status().as_u16();
        let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| {
                CallError::from(if e.is::<http_body_util::LengthLimitError>() {
                    ErrorKind::Invalid
                } else {
                    ErrorKind::Body
                })
            })?
            .to_bytes();
        if !expect.contains(&status) {
            return Err(CallError {
                kind: ErrorKind::Status(status),
                detail: Some(snippet(&body)),
            });
        }
        Ok(body)
    }

    /// [`Api::call`], and the body parsed as JSON (`invalid` when it is not).
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        expect: &[u16],
    ) -> Result<Value, CallError> {
        let bytes = self.call(method, path, body, expect).await?;
        serde_json::from_slice(&bytes).map_err(|_| CallError {
            kind: ErrorKind::Invalid,
            detail: Some(snippet(&bytes)),
        })
    }

    /// Opens `GET {path}` as an event stream.
    pub async fn stream(&self, path: &str) -> Result<EventStream, CallError> {
        let mut req = self.request(Method::GET, path, None)?;
        req.headers_mut()
            .insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let resp = self.send(req).await?;
        let status = resp.status();
        if !status.is_success() {
            let body = http_body_util::Limited::new(resp.into_body(), 64 << 10)
                .collect()
                .await
                .map(http_body_util::Collected::to_bytes)
                .unwrap_or_default();
            return Err(CallError {
                kind: ErrorKind::Status(status.as_u16()),
                detail: Some(snippet(&body)),
            });
        }
        Ok(EventStream {
            body: resp.into_body(),
            parser: SseParser::default(),
            ready: VecDeque::new(),
        })
    }
}

/// An open event stream, read frame by frame.
pub struct EventStream {
    body: Incoming,
    parser: SseParser,
    ready: VecDeque<Frame>,
}

impl EventStream {
    /// The next frame; `None` when the body ended cleanly between frames (`incomplete` when it
    /// ended in the middle of one).
    pub async fn next(&mut self) -> Result<Option<Frame>, CallError> {
        loop {
            if let Some(f) = self.ready.pop_front() {
                return Ok(Some(f));
            }
            let Some(frame) = self.body.frame().await else {
                if self.parser.is_mid_frame() {
                    return Err(ErrorKind::Incomplete.into());
                }
                return Ok(None);
            };
            let frame = frame.map_err(|_| CallError::from(ErrorKind::Body))?;
            if let Ok(data) = frame.into_data() {
                self.parser.feed(&data, &mut self.ready)?;
            }
        }
    }

    /// Reads what is left (the server ends the body right after `run_finished`) so the
    /// connection goes back to the pool; gives up, closing it, after `limit`.
    pub async fn drain(mut self, limit: Duration) {
        let _ = tokio::time::timeout(limit, async {
            while let Some(Ok(_)) = self.body.frame().await {}
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_accept_v1_and_slashes() {
        for url in [
            "http://127.0.0.1:8787",
            "http://127.0.0.1:8787/",
            "http://127.0.0.1:8787/v1",
            " http://127.0.0.1:8787/v1/ ",
        ] {
            assert_eq!(base_url(url).unwrap(), "http://127.0.0.1:8787", "{url}");
        }
        assert!(base_url("https://example.com").is_err());
        assert!(base_url("127.0.0.1:8787").is_err());
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(query_value("bench-slow_2"), "bench-slow_2");
        assert_eq!(query_value("a b&c=é"), "a%20b%26c%3D%C3%A9");
    }

    #[test]
    fn snippets_are_short_and_whole_characters() {
        assert_eq!(snippet(b"{\"error\":1}"), "{\"error\":1}");
        let long = "é".repeat(400);
        let s = snippet(long.as_bytes());
        assert!(s.len() <= SNIPPET);
        assert!(s.chars().all(|c| c == 'é'), "{s}");
    }

    #[test]
    fn run_ids_are_checked_before_they_go_into_a_path() {
        assert!(is_path_safe("0193b1c2-7a8e-7c3d-9f00-0123456789ab"));
        assert!(!is_path_safe("../tokens"));
        assert!(!is_path_safe(""));
    }
}
