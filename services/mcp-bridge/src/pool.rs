//! The client pool: MCP sessions to external servers, one per (tenant, server version,
//! credential set), opened lazily on first use and shared by every run with the same key.
//!
//! - A session is opened with retries until `connect_timeout_ms` (a server that boots late is
//!   waited for), and re-opened when it is found closed (the server went away, or answered 404
//!   on the session id and rmcp's own recovery gave up).
//! - A session's tool list is cached until the server says `notifications/tools/list_changed`.
//! - Idle sessions are closed after `idle_timeout_ms`; beyond `max_sessions` the least recently
//!   used one is closed.
//! - Headers are substituted per key (`${run.credentials.<name>}`), never logged; the key holds
//!   only a hash of the substituted values.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, Tool};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt as _};
use sha2::{Digest as _, Sha256};
use weft_config::McpBridgeConfig;
use weft_core::mcp::{McpServerContent, McpTransport, substitute_credentials};
use weft_egress::{AddressPolicy, Lookup, SystemLookup, guarded_resolver_over};

use crate::BridgeError;

/// What one session is keyed by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    tenant: String,
    server: String,
    /// The definition's version: a new version opens new sessions.
    version: String,
    /// SHA-256 of the substituted header values (never the values themselves).
    credentials: [u8; 32],
}

/// Receives the server's notifications for one session.
#[derive(Clone)]
struct Listener {
    tools_stale: Arc<AtomicBool>,
}

impl ClientHandler for Listener {
    fn get_info(&self) -> ClientConfig {
        // The newest revision that has an `initialize` handshake: servers negotiate down from
        // it, and rmcp's default (2026-07-28) has no `initialize` at all.
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("weft-mcp-bridge", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_stale.store(true, Ordering::Release);
    }
}

/// One open session.
struct Session {
    client: RunningService<RoleClient, Listener>,
    tools_stale: Arc<AtomicBool>,
    tools: Mutex<Option<Arc<Vec<Tool>>>>,
}

/// A pool entry: the session once open. The async mutex makes concurrent first users wait for
/// one open instead of each opening their own.
struct Slot {
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    last_used: AtomicU64,
}

/// The pool. Cheap to clone.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: McpBridgeConfig,
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
    /// For `http` servers: name lookups checked against the address policy.
    http: reqwest::Client,
    policy: Arc<AddressPolicy>,
    /// The lookup behind `http`'s resolver, also used to check a name before a session opens.
    lookup: Arc<dyn Lookup>,
    started: Instant,
}

/// A server as the pool needs it: its name, version hash and content.
#[derive(Clone, Debug)]
pub struct ServerRef<'a> {
    pub tenant: &'a str,
    pub name: &'a str,
    pub version: &'a str,
    pub content: &'a McpServerContent,
}

impl Pool {
    pub fn new(cfg: McpBridgeConfig) -> Result<Self, BridgeError> {
        Self::with_lookup(cfg, Arc::new(SystemLookup))
    }

    /// [`Pool::new`] resolving names through `lookup` (a test's scripted DNS).
    pub fn with_lookup(cfg: McpBridgeConfig, lookup: Arc<dyn Lookup>) -> Result<Self, BridgeError> {
        let policy = Arc::new(
            AddressPolicy::new(&cfg.private_exempt)
                .map_err(|e| BridgeError::Config(e.to_string()))?,
        );
        let http = reqwest::Client::builder()
            .tls_backend_rustls()
            .no_proxy()
            .tcp_nodelay(true)
            // Same-origin redirects only would need rmcp's policy; none is simpler and safe.
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(guarded_resolver_over(
                Arc::clone(&policy),
                Arc::clone(&lookup),
            ))
            .build()
            .map_err(|e| BridgeError::Config(format!("the MCP HTTP client: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                cfg,
                slots: Mutex::new(HashMap::new()),
                http,
                policy,
                lookup,
                started: Instant::now(),
            }),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The server's tools (unfiltered), from the cache or the server.
    pub async fn list_tools(
        &self,
        server: &ServerRef<'_>,
        credentials: &BTreeMap<String, String>,
    ) -> Result<Arc<Vec<Tool>>, BridgeError> {
        // A stale or closed session is retried once on a fresh one.
        for attempt in 0..2 {
            let session = self.session(server, credentials).await?;
            if !session.tools_stale.swap(false, Ordering::AcqRel)
                && let Some(tools) = session.tools.lock().ok().and_then(|t| t.clone())
            {
                return Ok(tools);
            }
            let listed = tokio::time::timeout(
                Duration::from_millis(self.inner.cfg.connect_timeout_ms),
                session.client.peer().list_all_tools(),
            )
            .await
            .map_err(|_| {
                BridgeError::Server(format!(
                    "MCP server `{}` did not list its tools within {} ms",
                    server.name, self.inner.cfg.connect_timeout_ms
                ))
            })?;
            match listed {
                Ok(list) => {
                    let list = Arc::new(list);
                    if let Ok(mut t) = session.tools.lock() {
                        *t = Some(Arc::clone(&list));
                    }
                    return Ok(list);
                }
                Err(_) if attempt == 0 && session.client.is_closed() => {
                    tracing::debug!(server = server.name, "mcp session closed; reopening");
                    self.drop_session(server, credentials, &session).await;
                }
                Err(e) => {
                    return Err(BridgeError::Server(format!(
                        "MCP server `{}` failed to list its tools: {e}",
                        server.name
                    )));
                }
            }
        }
        Err(BridgeError::Server(format!(
            "MCP server `{}` could not be reached",
            server.name
        )))
    }

    /// One tool call, bounded by `timeout`. A call is sent at most once on an open session: if
    /// the session was already closed before sending, a fresh one is opened first.
    pub async fn call_tool(
        &self,
        server: &ServerRef<'_>,
        credentials: &BTreeMap<String, String>,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        timeout: Duration,
    ) -> Result<rmcp::model::CallToolResult, BridgeError> {
        let mut session = self.session(server, credentials).await?;
        if session.client.is_closed() {
            self.drop_session(server, credentials, &session).await;
            session = self.session(server, credentials).await?;
        }
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        match tokio::time::timeout(timeout, session.client.peer().call_tool(params)).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => {
                if session.client.is_closed() {
                    self.drop_session(server, credentials, &session).await;
                }
                Err(BridgeError::Call(format!(
                    "the call to `{tool}` on MCP server `{}` failed: {e}",
                    server.name
                )))
            }
            // Dropping the request future sends the server `notifications/cancelled`.
            Err(_) => Err(BridgeError::Call(format!(
                "the call to `{tool}` on MCP server `{}` took longer than {} ms and was cancelled",
                server.name,
                timeout.as_millis()
            ))),
        }
    }

    fn key(
        server: &ServerRef<'_>,
        credentials: &BTreeMap<String, String>,
    ) -> Result<(Key, BTreeMap<String, String>), BridgeError> {
        let mut headers = BTreeMap::new();
        let mut digest = Sha256::new();
        for (name, template) in &server.content.headers {
            let value =
                substitute_credentials(template, credentials).map_err(BridgeError::Credentials)?;
            digest.update(name.as_bytes());
            digest.update([0]);
            digest.update(value.as_bytes());
            digest.update([0]);
            headers.insert(name.clone(), value);
        }
        Ok((
            Key {
                tenant: server.tenant.to_owned(),
                server: server.name.to_owned(),
                version: server.version.to_owned(),
                credentials: digest.finalize().into(),
            },
            headers,
        ))
    }

    /// Forgets `dead` if its slot still holds it (a session another call already replaced
    /// stays).
    async fn drop_session(
        &self,
        server: &ServerRef<'_>,
        credentials: &BTreeMap<String, String>,
        dead: &Arc<Session>,
    ) {
        let Ok((key, _)) = Self::key(server, credentials) else {
            return;
        };
        let slot = self
            .inner
            .slots
            .lock()
            .ok()
            .and_then(|slots| slots.get(&key).cloned());
        if let Some(slot) = slot {
            let mut held = slot.session.lock().await;
            if held.as_ref().is_some_and(|s| Arc::ptr_eq(s, dead)) {
                *held = None;
            }
        }
    }

    /// The open session for `server` with these credentials, opening it if needed.
    async fn session(
        &self,
        server: &ServerRef<'_>,
        credentials: &BTreeMap<String, String>,
    ) -> Result<Arc<Session>, BridgeError> {
        let (key, headers) = Self::key(server, credentials)?;
        let now = self.now_ms();
        let slot = {
            let mut slots =
                self.inner.slots.lock().map_err(|_| {
                    BridgeError::Internal("the session pool lock is poisoned".into())
                })?;
            if !slots.contains_key(&key) && slots.len() >= self.inner.cfg.max_sessions {
                // Close the least recently used session to make room.
                if let Some(oldest) = slots
                    .iter()
                    .min_by_key(|(_, s)| s.last_used.load(Ordering::Relaxed))
                    .map(|(k, _)| k.clone())
                {
                    slots.remove(&oldest);
                }
            }
            Arc::clone(slots.entry(key).or_insert_with(|| {
                Arc::new(Slot {
                    session: tokio::sync::Mutex::new(None),
                    last_used: AtomicU64::new(now),
                })
            }))
        };
        slot.last_used.store(self.now_ms(), Ordering::Relaxed);
        let mut guard = slot.session.lock().await;
        if let Some(s) = guard.as_ref()
            && !s.client.is_closed()
        {
            return Ok(Arc::clone(s));
        }
        let session = Arc::new(self.open(server, headers).await?);
        *guard = Some(Arc::clone(&session));
        Ok(session)
    }

    /// Opens a session, retrying with backoff until `connect_timeout_ms` has passed.
    async fn open(
        &self,
        server: &ServerRef<'_>,
        headers: BTreeMap<String, String>,
    ) -> Result<Session, BridgeError> {
        let deadline = Instant::now() + Duration::from_millis(self.inner.cfg.connect_timeout_ms);
        let mut delay = Duration::from_millis(100);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // A session outlives the RPC that opened it, and rmcp's session tasks keep (spans
            // under) the span current at its start: under the RPC's span, that span would stay
            // open, and never be exported, while the pooled session lives. So a session is a
            // trace of its own.
            let once = tracing::Instrument::instrument(
                self.open_once(server, &headers),
                tracing::info_span!(parent: None, "mcp_session", server = server.name),
            );
            let opened = tokio::time::timeout(left, once).await.unwrap_or_else(|_| {
                Err(BridgeError::Server(format!(
                    "MCP server `{}` did not start a session within {} ms",
                    server.name, self.inner.cfg.connect_timeout_ms
                )))
            });
            match opened {
                Ok(s) => return Ok(s),
                Err(e) => {
                    let now = Instant::now();
                    if now + delay >= deadline || matches!(e, BridgeError::Refused(_)) {
                        return Err(e);
                    }
                    tracing::debug!(
                        server = server.name,
                        "mcp server not reachable yet; retrying"
                    );
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    async fn open_once(
        &self,
        server: &ServerRef<'_>,
        headers: &BTreeMap<String, String>,
    ) -> Result<Session, BridgeError> {
        let tools_stale = Arc::new(AtomicBool::new(false));
        let listener = Listener {
            tools_stale: Arc::clone(&tools_stale),
        };
        let name = server.name;
        let c = server.content;
        let client = match c.transport {
            McpTransport::Http => {
                let url = c.url.as_deref().unwrap_or_default();
                self.check_address(url).await?;
                let mut custom = HashMap::new();
                for (k, v) in headers {
                    let (Ok(k), Ok(v)) = (
                        http::HeaderName::from_bytes(k.as_bytes()),
                        http::HeaderValue::from_str(v),
                    ) else {
                        return Err(BridgeError::Server(format!(
                            "MCP server `{name}`: header `{k}` is not a valid header after substitution"
                        )));
                    };
                    custom.insert(k, v);
                }
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
                config.custom_headers = custom;
                let transport =
                    StreamableHttpClientTransport::with_client(self.inner.http.clone(), config);
                listener.serve(transport).await.map_err(|e| {
                    BridgeError::Server(format!(
                        "could not start an MCP session with `{name}`: {}",
                        describe(&e)
                    ))
                })?
            }
            McpTransport::Stdio => {
                let mut cmd =
                    tokio::process::Command::new(c.command.as_deref().unwrap_or_default());
                cmd.args(&c.args).env_clear();
                for var in ["PATH", "HOME", "LANG", "TMPDIR"] {
                    if let Ok(v) = std::env::var(var) {
                        cmd.env(var, v);
                    }
                }
                cmd.envs(&c.env).kill_on_drop(true);
                let (transport, _stderr) = TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .map_err(|e| {
                        BridgeError::Server(format!(
                            "could not start MCP server `{name}` ({}): {e}",
                            c.command.as_deref().unwrap_or_default()
                        ))
                    })?;
                listener.serve(transport).await.map_err(|e| {
                    BridgeError::Server(format!(
                        "could not start an MCP session with `{name}`: {}",
                        describe(&e)
                    ))
                })?
            }
        };
        tracing::debug!(server = name, "mcp session opened");
        Ok(Session {
            client,
            tools_stale,
            tools: Mutex::new(None),
        })
    }

    /// A URL is parsed as the HTTP client will parse it, and a host that is an IP address (in
    /// any spelling the URL standard accepts: `127.1`, `0x7f.1`, `2130706433`) is checked here,
    /// since the guarded resolver never sees one. A name is looked up and checked here too, so
    /// that its refusal reads as one (rmcp's transport error drops the resolver's words); the
    /// connection's own lookup is checked again by the resolver, so an answer that changes in
    /// between is refused there. User info in the URL is refused.
    async fn check_address(&self, url: &str) -> Result<(), BridgeError> {
        let refused = || BridgeError::Refused("refused: not an allowed address".into());
        let parsed = reqwest::Url::parse(url).map_err(|_| refused())?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(refused());
        }
        let Some(host) = parsed.host_str() else {
            return Err(refused());
        };
        // The parser has turned every IPv4 spelling into dotted form; IPv6 keeps its brackets.
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
            return self.inner.policy.check(ip, None).map_err(|_| refused());
        }
        let ips = self
            .inner
            .lookup
            .lookup(bare.to_owned())
            .await
            .map_err(|_| refused())?;
        if ips.is_empty() {
            return Err(refused());
        }
        for ip in ips {
            self.inner.policy.check(ip, None).map_err(|_| refused())?;
        }
        Ok(())
    }

    /// Closes sessions unused for `idle_timeout_ms`.
    pub fn close_idle(&self) {
        let cutoff = self.now_ms().saturating_sub(self.inner.cfg.idle_timeout_ms);
        if let Ok(mut slots) = self.inner.slots.lock() {
            slots.retain(|_, s| s.last_used.load(Ordering::Relaxed) >= cutoff);
        }
    }

    /// Open sessions (for metrics and tests).
    pub fn len(&self) -> usize {
        self.inner.slots.lock().map(|s| s.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An rmcp start-up error in words, with the root cause (a refused address reads as one).
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause: &(dyn std::error::Error + 'static) = e;
    let mut text = e.to_string();
    while let Some(next) = cause.source() {
        cause = next;
        let t = next.to_string();
        if !text.contains(&t) {
            text = format!("{text}: {t}");
        }
    }
    if text.contains("not an allowed address") || text.contains("non-public") {
        return "refused: not an allowed address".into();
    }
    text
}
