//! The built-in `HTTP` tool: one GET or POST to an allowed host, with the response handed back
//! to the model as JSON.
//!
//! Outbound HTTP is default-deny (see "Trust model" in the architecture notes):
//! - a [`HostAllowlist`], narrowed from the operator's floor by the agent and the caller, is
//!   checked before any network I/O and again on every redirect hop;
//! - non-public addresses (private, loopback, link-local, CGNAT, documentation, multicast, …) are
//!   refused on the addresses actually connected to: the client's DNS resolver refuses a name if
//!   any of its addresses is non-public, so DNS rebinding fails; IP-literal URLs, which never
//!   reach the resolver, are checked before the request and on every redirect hop. Operators may
//!   exempt trusted ranges with `executor.http_private_exempt`.
//!
//! Redirects are followed by this module, not by reqwest, because the allowlist is per call while
//! reqwest's redirect policy is per client.

use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde_json::Value;
use weft_api::tools::{HttpInput, HttpMethod, input_schema};
use weft_config::ExecutorConfig;
use weft_core::message::ToolSpec;

use super::{Field, Problem, Reading, ToolOutput, json_type};
pub use weft_egress::{
    AddressPolicy, BlockedAddress, HostAllowlist, Lookup, REFUSED_ADDRESS, SystemLookup,
    Unresolved, guarded_resolver, guarded_resolver_over, non_public_class, normalize_host,
};

/// The tool's name as the model sees it.
pub const TOOL_NAME: &str = "HTTP";

/// Redirects followed before giving up.
pub const MAX_REDIRECTS: usize = 5;

/// Response headers handed to the model; the rest (cookies, tracing ids, …) are dropped.
const RESULT_HEADERS: [HeaderName; 10] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    header::CONTENT_LANGUAGE,
    header::CONTENT_DISPOSITION,
    header::LOCATION,
    header::RETRY_AFTER,
    header::ETAG,
    header::LAST_MODIFIED,
    header::CACHE_CONTROL,
];

/// Request headers that follow a redirect to another origin; every other header the model set
/// (`Authorization`, `Cookie`, `X-Api-Key`, any custom header) is dropped there.
const CROSS_ORIGIN_HEADERS: [HeaderName; 6] = [
    header::ACCEPT,
    header::ACCEPT_LANGUAGE,
    header::CONTENT_TYPE,
    header::CONTENT_LANGUAGE,
    header::USER_AGENT,
    header::CACHE_CONTROL,
];

/// Request headers the model may not set: the client owns framing, routing and proxying.
const FORBIDDEN_REQUEST_HEADERS: [HeaderName; 10] = [
    header::HOST,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
    header::UPGRADE,
    header::TE,
    header::TRAILER,
    header::EXPECT,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

/// Why the tool could not be built from its config.
#[derive(Debug, thiserror::Error)]
pub enum HttpToolError {
    #[error(transparent)]
    InvalidExempt(#[from] weft_egress::InvalidExempt),
    #[error("building the HTTP tool's client: {0}")]
    Client(#[from] reqwest::Error),
}

// ---------------------------------------------------------------------------------------------
// The tool

/// The `HTTP` tool. Cheap to share: one pooled client for every run of the process.
#[derive(Clone, Debug)]
pub struct HttpTool {
    client: reqwest::Client,
    addresses: Arc<AddressPolicy>,
    timeout: Duration,
    max_bytes: usize,
}

/// The client of outbound calls under the egress guard (the `HTTP` tool's, the A2A tools'):
/// every name resolved through `lookup` and refused when any of its addresses is non-public under
/// `addresses`; no proxy, no redirects followed (the caller follows them, checking each hop), no
/// referer.
pub(crate) fn guarded_client(
    addresses: &Arc<AddressPolicy>,
    lookup: Arc<dyn Lookup>,
) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .tls_backend_rustls()
        .no_proxy()
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .referer(false)
        .user_agent(concat!("weft/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(guarded_resolver_over(Arc::clone(addresses), lookup))
        .build()
}

/// One validated call.
#[derive(Debug)]
struct HttpRequest {
    method: Method,
    url: Url,
    headers: HeaderMap,
    body: Option<Bytes>,
}

impl HttpTool {
    /// The tool for this executor's config (`http_private_exempt`, `http_timeout_ms`,
    /// `http_max_bytes`; the host allowlist is per call).
    pub fn new(cfg: &ExecutorConfig) -> Result<Self, HttpToolError> {
        Self::with_lookup(cfg, Arc::new(SystemLookup))
    }

    /// [`HttpTool::new`] resolving names through `lookup` (a test's scripted DNS).
    pub fn with_lookup(
        cfg: &ExecutorConfig,
        lookup: Arc<dyn Lookup>,
    ) -> Result<Self, HttpToolError> {
        let addresses = Arc::new(AddressPolicy::new(&cfg.http_private_exempt)?);
        let client = guarded_client(&addresses, lookup)?;
        Ok(Self {
            client,
            addresses,
            timeout: Duration::from_millis(cfg.http_timeout_ms),
            max_bytes: cfg.http_max_bytes,
        })
    }

    /// What the model is told about the tool.
    pub fn spec() -> ToolSpec {
        ToolSpec {
            name: TOOL_NAME.into(),
            description: "Make one HTTP request (GET or POST) to an allowed public host. Returns \
                JSON {status, headers, body, body_encoding, truncated}: body is text, or base64 \
                when body_encoding is \"base64\"; long bodies are cut and marked truncated. \
                Redirects are followed (at most 5)."
                .into(),
            parameters: input_schema::<HttpInput>(),
        }
    }

    /// Whether repeating the call is harmless: GET yes, POST (or anything unparsable) no.
    pub fn is_idempotent(input: &Value) -> bool {
        input
            .get("method")
            .and_then(Value::as_str)
            .is_some_and(|m| m.eq_ignore_ascii_case("GET"))
    }

    /// Runs one call. Every failure (bad input, refused host or address, timeout, connect
    /// error) is an error result the model can act on; HTTP error statuses are ordinary results.
    pub async fn call(&self, input: &Value, allow: &HostAllowlist) -> ToolOutput {
        let req = match HttpRequest::parse(input) {
            Ok(req) => req,
            Err(msg) => return ToolOutput::error(msg),
        };
        let host = req.url.host_str().unwrap_or_default().to_owned();
        if let Err(msg) = self.check_target(&req.url, allow) {
            tracing::debug!(%host, "http tool: request refused");
            return ToolOutput::error(format!("refused: {msg}"));
        }
        match tokio::time::timeout(self.timeout, self.execute(req, allow)).await {
            Ok(Ok(result)) => ToolOutput::json(&result),
            Ok(Err(msg)) => {
                tracing::debug!(%host, "http tool: request failed");
                ToolOutput::error(msg)
            }
            Err(_) => ToolOutput::error(format!(
                "the request to {host} timed out after {} ms (the HTTP tool's time limit for the \
                 whole request, body included)",
                self.timeout.as_millis()
            )),
        }
    }

    /// May a request go to `url` at all? Scheme, allowlist and, for IP literals (which bypass
    /// the resolver), the address policy. No I/O.
    fn check_target(&self, url: &Url, allow: &HostAllowlist) -> Result<(), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "scheme `{}` is not allowed; only http and https are",
                url.scheme()
            ));
        }
        let Some(host) = url.host_str().map(normalize_host) else {
            return Err(format!("{url} has no host"));
        };
        // The URL parser has already turned every IPv4 spelling (`0x7f.1`, `2130706433`) into
        // dotted form, so what parses here is exactly what the connector will not resolve.
        let ip = host.parse::<IpAddr>().ok();
        if allow.is_empty() {
            return Err(
                "outbound HTTP is not allowed for this run (its host allowlist is empty)".into(),
            );
        }
        if !allow.allows(&host) {
            return Err(format!(
                "host `{host}` is not on this run's allowlist ({})",
                allow.patterns().join(", ")
            ));
        }
        if let Some(ip) = ip {
            self.addresses.check(ip, None).map_err(blocked_message)?;
        }
        Ok(())
    }

    /// Sends the request, following redirects, and reads the response.
    async fn execute(&self, req: HttpRequest, allow: &HostAllowlist) -> Result<Response, String> {
        let HttpRequest {
            mut method,
            mut url,
            mut headers,
            mut body,
        } = req;
        let mut redirects = 0;
        loop {
            // Every hop carries the run's trace (the `tool` span's W3C context), whatever the
            // model set; it is not one of the model's headers, so a redirect does not drop it.
            let mut sent = headers.clone();
            weft_telemetry::inject_http_trace_context(&mut sent);
            let mut builder = self
                .client
                .request(method.clone(), url.clone())
                .headers(sent);
            if let Some(body) = &body {
                builder = builder.body(body.clone());
            }
            let resp = builder
                .send()
                .await
                .map_err(|e| describe_send_error(&e, &url))?;
            let Some(next) = redirect_target(&resp, &url)? else {
                return self.read(resp, &url).await;
            };
            redirects += 1;
            if redirects > MAX_REDIRECTS {
                return Err(format!(
                    "stopped after {MAX_REDIRECTS} redirects (the last one, from {url}, pointed to {next})"
                ));
            }
            self.check_target(&next, allow)
                .map_err(|msg| format!("redirect from {url} to {next} refused: {msg}"))?;
            // What browsers do: 303 always, and 301/302 after a POST, turn into a bodiless GET;
            // 307/308 repeat the request as it was.
            let status = resp.status();
            if status == StatusCode::SEE_OTHER
                || (method == Method::POST
                    && matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND))
            {
                method = Method::GET;
                body = None;
                headers.remove(header::CONTENT_TYPE);
            }
            // Credentials meant for one origin must not follow a redirect to another: only
            // headers known to carry no credential go on (an API key can hide in any custom
            // header, so this is an allowlist, not a denylist).
            if next.origin() != url.origin() {
                let dropped: Vec<HeaderName> = headers
                    .keys()
                    .filter(|name| !CROSS_ORIGIN_HEADERS.contains(name))
                    .cloned()
                    .collect();
                for name in dropped {
                    headers.remove(name);
                }
            }
            url = next;
        }
    }

    /// Reads the status, the kept headers and up to `max_bytes` of the body.
    async fn read(&self, mut resp: reqwest::Response, url: &Url) -> Result<Response, String> {
        let status = resp.status().as_u16();
        let headers: BTreeMap<String, String> = RESULT_HEADERS
            .iter()
            .filter_map(|name| {
                let value = resp.headers().get(name)?.to_str().ok()?;
                Some((name.as_str().to_owned(), value.to_owned()))
            })
            .collect();
        let mut body = Vec::with_capacity(self.max_bytes.min(64 * 1024));
        let mut truncated = false;
        while let Some(chunk) = resp.chunk().await.map_err(|e| {
            format!(
                "reading the response body from {} failed: {}",
                url.origin().ascii_serialization(),
                root_cause(&e)
            )
        })? {
            let room = self.max_bytes - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        let (body, encoding) = match String::from_utf8(body) {
            Ok(text) => (text, "utf-8"),
            Err(e) => {
                let utf8 = e.utf8_error();
                let bytes = e.into_bytes();
                // A cut can split a character; that alone does not make the body binary.
                if truncated && utf8.error_len().is_none() {
                    let valid = bytes.get(..utf8.valid_up_to()).unwrap_or_default();
                    (String::from_utf8_lossy(valid).into_owned(), "utf-8")
                } else {
                    (
                        base64::engine::general_purpose::STANDARD.encode(&bytes),
                        "base64",
                    )
                }
            }
        };
        Ok(Response {
            status,
            headers,
            body,
            body_encoding: encoding,
            truncated,
            note: truncated.then(|| {
                format!(
                    "the body was cut at the HTTP tool's limit of {} bytes",
                    self.max_bytes
                )
            }),
        })
    }
}

/// What the model gets back from a request that was answered.
#[derive(Debug, Serialize)]
struct Response {
    status: u16,
    /// The kept headers ([`RESULT_HEADERS`]).
    headers: BTreeMap<String, String>,
    /// Text, or base64 when `body_encoding` is `base64`.
    body: String,
    body_encoding: &'static str,
    truncated: bool,
    /// Says where a truncated body was cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

impl HttpRequest {
    /// Validates the model's input; errors name the field and say what is expected.
    fn parse(input: &Value) -> Result<Self, String> {
        if !input.is_object() {
            return Err(format!(
                "the HTTP tool takes a JSON object like {{\"method\": \"GET\", \"url\": \"https://…\"}}, got {}",
                json_type(input)
            ));
        }
        let check = |field: &str, value: &Value| match (field, value) {
            ("url", Value::String(text)) => parse_url(text).map(drop),
            // Up to the first header that is not a string, which the read then names.
            ("headers", Value::Object(map)) => map
                .iter()
                .map_while(|(name, value)| Some((name, value.as_str()?)))
                .try_for_each(|(name, value)| header(name, value).map(drop)),
            _ => Ok(()),
        };
        let input: HttpInput = Reading::new(FIELDS, words)
            .refuse_others()
            .check(&check)
            .read(input)?;
        let method = match input.method {
            HttpMethod::Get => Method::GET,
            HttpMethod::Post => Method::POST,
        };
        let url = parse_url(&input.url)?;
        let mut headers = HeaderMap::new();
        for (name, value) in input.headers.unwrap_or_default() {
            let (name, value) = header(&name, &value)?;
            headers.append(name, value);
        }
        let body = match input.body {
            None | Some(Value::Null) => None,
            Some(_) if method != Method::POST => {
                return Err("`body` is only allowed with method \"POST\"".into());
            }
            Some(Value::String(text)) => Some(Bytes::from(text.into_bytes())),
            Some(value @ Value::Object(_)) => {
                if !headers.contains_key(header::CONTENT_TYPE) {
                    headers.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                }
                Some(Bytes::from(value.to_string().into_bytes()))
            }
            Some(other) => {
                return Err(format!(
                    "`body` must be a string or a JSON object, got {}",
                    json_type(&other)
                ));
            }
        };
        Ok(Self {
            method,
            url,
            headers,
            body,
        })
    }
}

/// The fields of a request, in the order their checks fire; no others are taken.
const FIELDS: &[Field] = &[
    Field::NeedAny("method"),
    Field::NeedAny("url"),
    Field::Opt("headers"),
    Field::Opt("body"),
];

/// The HTTP tool's messages.
fn words(field: &str, problem: &Problem<'_>) -> Option<String> {
    let got = |got: &Option<&Value>| got.map_or_else(|| "nothing".to_owned(), Value::to_string);
    Some(match (field, problem) {
        (_, Problem::UnknownField) => format!(
            "unknown field `{field}`; the HTTP tool takes `method`, `url`, `headers` and `body`"
        ),
        ("method", Problem::Missing) => "`method` is required: \"GET\" or \"POST\"".into(),
        ("method", Problem::Invalid { got: g, .. } | Problem::Unknown { got: g, .. }) => {
            format!("`method` must be \"GET\" or \"POST\", got {}", got(g))
        }
        ("url", Problem::Missing) => {
            "`url` is required: an absolute http:// or https:// URL".into()
        }
        ("headers", Problem::Invalid { got: g, .. }) => format!(
            "`headers` must be an object of strings, got {}",
            g.map_or("nothing", json_type)
        ),
        _ => return None,
    })
}

/// An absolute http:// or https:// URL.
fn parse_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text.trim()).map_err(|e| {
        format!("`url` must be an absolute http:// or https:// URL ({e}), got {text:?}")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "`url` must use http or https, got `{}`",
            url.scheme()
        ));
    }
    Ok(url)
}

/// A request header the model may set.
fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let header_name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("`headers`: {name:?} is not a valid header name"))?;
    if FORBIDDEN_REQUEST_HEADERS.contains(&header_name)
        || header_name.as_str().starts_with("proxy-")
    {
        return Err(format!(
            "`headers.{name}` cannot be set; the HTTP tool manages it"
        ));
    }
    let header_value = HeaderValue::from_str(value)
        .map_err(|_| format!("`headers.{name}` must be visible ASCII text without line breaks"))?;
    Ok((header_name, header_value))
}

/// What the model is told about a refused address — only that it was refused. Which address a
/// name resolved to, its class, or that the name did not resolve at all would make the tool an
/// oracle for the operator's internal DNS; the detail goes to the debug log.
fn blocked_message(b: BlockedAddress) -> String {
    tracing::debug!(address = %b, "http tool: address refused");
    REFUSED_ADDRESS.to_owned()
}

/// The next URL if `resp` is a redirect the tool follows.
fn redirect_target(resp: &reqwest::Response, url: &Url) -> Result<Option<Url>, String> {
    if !matches!(
        resp.status(),
        StatusCode::MOVED_PERMANENTLY
            | StatusCode::FOUND
            | StatusCode::SEE_OTHER
            | StatusCode::TEMPORARY_REDIRECT
            | StatusCode::PERMANENT_REDIRECT
    ) {
        return Ok(None);
    }
    let Some(location) = resp.headers().get(header::LOCATION) else {
        return Ok(None);
    };
    let location = location
        .to_str()
        .map_err(|_| format!("{url} redirected with a Location header that is not text"))?;
    url.join(location)
        .map(Some)
        .map_err(|e| format!("{url} redirected to an invalid location {location:?} ({e})"))
}

/// A message for a failed send: a refused address if the resolver refused one, else what went
/// wrong at the bottom of the error chain.
fn describe_send_error(err: &reqwest::Error, url: &Url) -> String {
    let mut source: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(blocked) = e.downcast_ref::<BlockedAddress>() {
            return format!("refused: {}", blocked_message(blocked.clone()));
        }
        if e.downcast_ref::<Unresolved>().is_some() {
            return format!("refused: {REFUSED_ADDRESS}");
        }
        source = e.source();
    }
    let target = url.origin().ascii_serialization();
    if err.is_connect() {
        format!("could not connect to {target}: {}", root_cause(err))
    } else {
        format!("the request to {target} failed: {}", root_cause(err))
    }
}

/// The innermost error's text: the useful part ("connection refused"), without reqwest's
/// wrapping.
fn root_cause(err: &(dyn StdError + 'static)) -> String {
    let mut last = err;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

impl super::Tool for HttpTool {
    fn name(&self) -> &str {
        TOOL_NAME
    }

    fn spec(&self) -> ToolSpec {
        Self::spec()
    }

    /// GET only reads; POST (or an input that does not parse) may change something.
    fn side_effect(&self, input: &Value) -> super::SideEffect {
        if Self::is_idempotent(input) {
            super::SideEffect::ReadOnly
        } else {
            super::SideEffect::Effectful
        }
    }

    fn call<'a>(
        &'a self,
        ctx: &'a super::ToolCtx<'a>,
        input: &'a Value,
    ) -> futures::future::BoxFuture<'a, Result<super::ToolOutcome, super::Abort>> {
        Box::pin(async move {
            let spec = ctx.spec();
            let allow = HostAllowlist::narrow(
                &ctx.inner().cfg.allowed_hosts,
                spec.allowed_hosts.as_deref(),
                spec.caller_allowed_hosts.as_deref(),
            );
            Ok(super::ToolOutcome::Done(
                HttpTool::call(self, input, &allow).await,
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn list(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn allowlist_matches_exact_subdomains_and_any() {
        let allow = HostAllowlist::new(&["API.example.com", "*.corp.test", "10.1.2.3", "[::2]"]);
        assert!(allow.allows("api.example.com"));
        assert!(allow.allows("Api.Example.COM."));
        assert!(!allow.allows("example.com"));
        assert!(!allow.allows("x.api.example.com"));
        assert!(allow.allows("a.corp.test"));
        assert!(allow.allows("a.b.corp.test"));
        assert!(!allow.allows("corp.test"), "a glob does not match its apex");
        assert!(!allow.allows("evilcorp.test"));
        assert!(allow.allows("10.1.2.3"));
        assert!(allow.allows("::2"));
        assert!(allow.allows("[0:0::2]"));
        assert!(!allow.allows("10.1.2.4"));

        assert!(HostAllowlist::new(&["*"]).allows("anything.example"));
        assert!(!HostAllowlist::new::<&str>(&[]).allows("example.com"));
        assert!(
            !HostAllowlist::new(&["*.1"]).allows("10.0.0.1"),
            "IPs have no subdomains"
        );
        assert!(
            !HostAllowlist::new(&["a*.com"]).allows("ab.com"),
            "only a leading `*.` is a glob"
        );
    }

    #[test]
    fn narrowing_never_widens() {
        let floor = list(&["*.example.com", "a.com"]);
        // Inherit.
        assert_eq!(
            HostAllowlist::narrow(&floor, None, None).patterns(),
            list(&["*.example.com", "a.com"])
        );
        // Some([]) = no network, at any layer.
        assert!(HostAllowlist::narrow(&floor, Some(&[]), None).is_empty());
        assert!(HostAllowlist::narrow(&floor, None, Some(&[])).is_empty());
        // A narrower pattern inside the floor is kept; one outside it is dropped.
        let agent = list(&["api.example.com", "b.com", "example.com"]);
        let n = HostAllowlist::narrow(&floor, Some(&agent), None);
        assert_eq!(n.patterns(), list(&["api.example.com"]));
        // A wider pattern shrinks to the floor's.
        let n = HostAllowlist::narrow(&list(&["a.com"]), Some(&list(&["*"])), None);
        assert_eq!(n.patterns(), list(&["a.com"]));
        let n = HostAllowlist::narrow(&floor, Some(&list(&["*.com"])), None);
        assert_eq!(n.patterns(), list(&["*.example.com", "a.com"]));
        // Nested globs keep the narrower one.
        let n = HostAllowlist::narrow(&floor, Some(&list(&["*.eu.example.com"])), None);
        assert_eq!(n.patterns(), list(&["*.eu.example.com"]));
        // The caller narrows the agent's list, not the floor's.
        let n = HostAllowlist::narrow(
            &list(&["*"]),
            Some(&list(&["*.example.com"])),
            Some(&list(&["a.com", "x.example.com"])),
        );
        assert_eq!(n.patterns(), list(&["x.example.com"]));
        // An empty floor allows nothing whatever the agent asks.
        assert!(HostAllowlist::narrow(&[], Some(&list(&["*"])), None).is_empty());
    }

    #[test]
    fn narrowing_is_the_intersection() {
        let layers = [
            list(&["*"]),
            list(&["*.example.com", "a.com", "1.2.3.4"]),
            list(&["x.example.com", "*.y.example.com", "b.com"]),
            list(&["a.com", "*.com"]),
            list(&[]),
        ];
        let hosts = [
            "x.example.com",
            "z.y.example.com",
            "y.example.com",
            "example.com",
            "a.com",
            "b.com",
            "c.org",
            "1.2.3.4",
        ];
        for floor in &layers {
            for agent in &layers {
                for caller in &layers {
                    let n = HostAllowlist::narrow(floor, Some(agent), Some(caller));
                    for h in hosts {
                        let each = [floor, agent, caller]
                            .iter()
                            .all(|l| HostAllowlist::new(l).allows(h));
                        assert_eq!(n.allows(h), each, "{floor:?} {agent:?} {caller:?} {h}");
                    }
                }
            }
        }
    }

    #[test]
    fn non_public_addresses_are_classified() {
        let blocked = [
            "0.0.0.0",
            "10.0.0.1",
            "100.64.0.1",
            "127.0.0.2",
            "169.254.169.254",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::127.0.0.1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "64:ff9b:1::1",
            "100::1",
            "2001::1",
            "2001:db8::1",
            "2002:a00:1::1",
            "3fff::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "5f00::1",
        ];
        for ip in blocked {
            assert!(
                non_public_class(ip.parse().unwrap()).is_some(),
                "{ip} should be refused"
            );
        }
        let public = [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "192.169.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ];
        for ip in public {
            assert_eq!(
                non_public_class(ip.parse().unwrap()),
                None,
                "{ip} is public"
            );
        }
    }

    #[test]
    fn exempt_ranges_are_allowed_and_mapped_addresses_count_as_ipv4() {
        let policy = AddressPolicy::new(&["127.0.0.1/32", "fd00::/8"]).unwrap();
        assert!(policy.check("127.0.0.1".parse().unwrap(), None).is_ok());
        assert!(
            policy
                .check("::ffff:127.0.0.1".parse().unwrap(), None)
                .is_ok()
        );
        assert!(policy.check("fd00::5".parse().unwrap(), None).is_ok());
        let err = policy
            .check("127.0.0.2".parse().unwrap(), Some("x.test"))
            .unwrap_err();
        assert_eq!(err.class, "loopback");
        assert_eq!(
            err.to_string(),
            "x.test resolves to 127.0.0.2, a loopback address"
        );
        assert_eq!(blocked_message(err), "not an allowed address");
        assert!(matches!(
            AddressPolicy::new(&["127.0.0.1"]),
            Err(weft_egress::InvalidExempt(_))
        ));
    }

    #[test]
    fn input_errors_name_the_field() {
        let cases = [
            (json!("GET https://x"), "JSON object"),
            (json!({"url": "https://a.com"}), "`method` is required"),
            (
                json!({"method": "PUT", "url": "https://a.com"}),
                "`method` must be",
            ),
            (json!({"method": "GET"}), "`url` is required"),
            (json!({"method": "GET", "url": 5}), "`url` must be a string"),
            (
                json!({"method": "GET", "url": "/relative"}),
                "`url` must be an absolute",
            ),
            (
                json!({"method": "GET", "url": "ftp://a.com/"}),
                "`url` must use http or https",
            ),
            (
                json!({"method": "GET", "url": "https://a.com", "x": 1}),
                "unknown field `x`",
            ),
            (
                json!({"method": "GET", "url": "https://a.com", "headers": []}),
                "`headers` must be",
            ),
            (
                json!({"method": "GET", "url": "https://a.com", "headers": {"a": 1}}),
                "`headers.a` must be a string",
            ),
            (
                json!({"method": "GET", "url": "https://a.com", "headers": {"Host": "b"}}),
                "`headers.Host` cannot be set",
            ),
            (
                json!({"method": "GET", "url": "https://a.com", "headers": {"a": "x\ny"}}),
                "`headers.a` must be visible ASCII",
            ),
            (
                json!({"method": "GET", "url": "https://a.com", "body": "x"}),
                "only allowed with",
            ),
            (
                json!({"method": "POST", "url": "https://a.com", "body": [1]}),
                "`body` must be",
            ),
        ];
        for (input, want) in cases {
            let err = HttpRequest::parse(&input).unwrap_err();
            assert!(err.contains(want), "{input}: {err}");
        }
        let ok = HttpRequest::parse(&json!({
            "method": "post", "url": "https://a.com/x", "body": {"k": 1}
        }))
        .unwrap();
        assert_eq!(ok.method, Method::POST);
        assert_eq!(ok.headers[header::CONTENT_TYPE], "application/json");
        assert_eq!(ok.body.unwrap(), Bytes::from_static(br#"{"k":1}"#));
    }

    /// The messages the model got before the input was typed, word for word, and the order
    /// in which the checks fire (an unknown field first, the URL before the headers).
    #[test]
    fn parse_messages_are_the_old_ones() {
        let url = "https://a.com";
        let cases = [
            (
                json!({"method": "GET", "url": url, "foo": 1}),
                "unknown field `foo`; the HTTP tool takes `method`, `url`, `headers` and `body`",
            ),
            (
                json!({"foo": 1, "method": 5}),
                "unknown field `foo`; the HTTP tool takes `method`, `url`, `headers` and `body`",
            ),
            (
                json!({"url": url}),
                "`method` is required: \"GET\" or \"POST\"",
            ),
            (
                json!({"method": 5, "url": url}),
                "`method` must be \"GET\" or \"POST\", got 5",
            ),
            (
                json!({"method": "PUT", "url": url}),
                "`method` must be \"GET\" or \"POST\", got \"PUT\"",
            ),
            (
                json!({"method": null, "url": url}),
                "`method` must be \"GET\" or \"POST\", got null",
            ),
            (
                json!({"method": "GET"}),
                "`url` is required: an absolute http:// or https:// URL",
            ),
            (
                json!({"method": "GET", "url": 5}),
                "`url` must be a string, got a number",
            ),
            (
                json!({"method": "GET", "url": null}),
                "`url` must be a string, got null",
            ),
            (
                json!({"method": "GET", "url": "ftp://a.com/", "headers": []}),
                "`url` must use http or https, got `ftp`",
            ),
            (
                json!({"method": "GET", "url": url, "headers": []}),
                "`headers` must be an object of strings, got an array",
            ),
            (
                json!({"method": "GET", "url": url, "headers": {"a": 1}}),
                "`headers.a` must be a string, got a number",
            ),
            (
                json!({"method": "GET", "url": url, "headers": {"Host": "b", "x": 1}}),
                "`headers.Host` cannot be set; the HTTP tool manages it",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                HttpRequest::parse(&input).err().as_deref(),
                Some(want),
                "{input}"
            );
        }
        let ok = HttpRequest::parse(&json!({"method": "get", "url": url, "headers": null}));
        assert_eq!(ok.unwrap().method, Method::GET);
    }

    #[test]
    fn spec_and_idempotence() {
        let spec = HttpTool::spec();
        assert_eq!(spec.name, "HTTP");
        assert_eq!(spec.parameters["required"], json!(["method", "url"]));
        assert!(HttpTool::is_idempotent(
            &json!({"method": "GET", "url": "x"})
        ));
        assert!(!HttpTool::is_idempotent(
            &json!({"method": "POST", "url": "x"})
        ));
        assert!(!HttpTool::is_idempotent(&json!({})));
    }
}
