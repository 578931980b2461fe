//! `weft.v1.McpBridge`: what the executor calls to list and call the tools of a run's MCP
//! servers. The tenant is the internal JWT's; the server definition is read from the substrate
//! with the caller's own token (so the substrate's tenancy rules apply), cached briefly.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_auth::rpc::caller;

use rmcp::model::{CallToolResult, ContentBlock, Tool};
use tonic::{Request, Response, Status};
use weft_core::def::DefContent as _;
use weft_core::mcp::McpServerContent;
use weft_core::{Error, Principal};
use weft_proto::transport::GrpcTransport;
use weft_proto::v1;

use crate::BridgeError;
use crate::pool::{Pool, ServerRef};

/// How long a looked-up definition is reused before the substrate is asked again.
const DEF_TTL: Duration = Duration::from_secs(2);

/// A server definition as looked up.
#[derive(Clone, Debug)]
struct Def {
    version: String,
    content: Arc<McpServerContent>,
    at: Instant,
}

/// The gRPC service.
#[derive(Clone)]
pub struct BridgeService {
    pool: Pool,
    substrate: GrpcTransport,
    defs: Arc<Mutex<HashMap<(String, String), Def>>>,
    call_timeout: Duration,
    max_result_bytes: usize,
}

impl BridgeService {
    pub fn new(pool: Pool, substrate: GrpcTransport, cfg: &weft_config::McpBridgeConfig) -> Self {
        Self {
            pool,
            substrate,
            defs: Arc::new(Mutex::new(HashMap::new())),
            call_timeout: Duration::from_millis(cfg.call_timeout_ms),
            max_result_bytes: cfg.max_result_bytes,
        }
    }

    /// The definition of `server` in the caller's tenant.
    async fn def<T>(&self, req: &Request<T>, p: &Principal, server: &str) -> Result<Def, Status> {
        let key = (p.tenant.to_string(), server.to_owned());
        if let Ok(defs) = self.defs.lock()
            && let Some(d) = defs.get(&key)
            && d.at.elapsed() < DEF_TTL
        {
            return Ok(d.clone());
        }
        let mut out = Request::new(v1::GetDefRequest {
            kind: v1::DefKind::McpServer.into(),
            name: server.to_owned(),
            version: None,
        });
        if let Some(auth) = req.metadata().get("authorization") {
            out.metadata_mut().insert("authorization", auth.clone());
        }
        weft_telemetry::inject_trace_context(out.metadata_mut());
        let mut client = weft_proto::transport::substrate_client(self.substrate.clone());
        let v = client.get_def(out).await.map_err(|s| {
            if s.code() == tonic::Code::NotFound {
                Status::from(Error::not_found(format!(
                    "no MCP server `{server}` in your tenant; define it with PUT /v1/mcp-servers/{server}"
                )))
            } else {
                s
            }
        })?;
        let v = v.into_inner();
        if v.retired {
            return Err(Error::not_found(format!(
                "MCP server `{server}` is retired; activate a version to use it again"
            ))
            .into());
        }
        let content = McpServerContent::from_json_str(&v.content_json).map_err(|e| {
            tracing::error!(error = %e.message, server, "stored MCP server content does not parse");
            Status::from(Error::internal())
        })?;
        let d = Def {
            version: v.hash,
            content: Arc::new(content),
            at: Instant::now(),
        };
        if let Ok(mut defs) = self.defs.lock() {
            if defs.len() > 10_000 {
                defs.retain(|_, d| d.at.elapsed() < DEF_TTL);
            }
            defs.insert(key, d.clone());
        }
        Ok(d)
    }
}

impl BridgeService {
    /// What every RPC starts from: the caller's tenant, the server's definition in it, and the
    /// run's credentials.
    async fn resolve<T>(
        &self,
        req: &Request<T>,
        server: &str,
        credentials: &HashMap<String, String>,
    ) -> Result<(String, Def, BTreeMap<String, String>), Status> {
        let p = caller(req)?;
        let def = self.def(req, &p, server).await?;
        let credentials = credentials
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok((p.tenant.to_string(), def, credentials))
    }
}

fn to_status(e: BridgeError) -> Status {
    match e {
        BridgeError::Credentials(m) => Error::invalid(m).with_param("credentials").into(),
        BridgeError::Refused(m) => Error::forbidden(m).into(),
        BridgeError::Server(m) | BridgeError::Call(m) => Error::unavailable(m).into(),
        BridgeError::Config(m) | BridgeError::Internal(m) | BridgeError::Serve(m) => {
            tracing::error!(error = %m, "mcp bridge");
            Error::internal().into()
        }
    }
}

/// Whether a name can be offered to a model as `mcp__<server>__<tool>` (providers accept
/// `[A-Za-z0-9_-]{1,64}`).
fn offerable(server: &str, tool: &str) -> bool {
    let full = 5 + server.len() + 2 + tool.len();
    full <= 64
        && !tool.is_empty()
        && tool
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A tool as runs see it, with every credential value the server echoed in its description or
/// schema redacted (all of it reaches the model). A tool whose *name* holds one is not offered
/// at all (see `list_tools`).
fn tool_info(t: &Tool, credentials: &BTreeMap<String, String>) -> v1::McpToolInfo {
    let hints = t.annotations.as_ref();
    let mut schema = serde_json::Value::Object((*t.input_schema).clone());
    redact_value(&mut schema, credentials);
    v1::McpToolInfo {
        name: t.name.to_string(),
        description: redact(t.description.as_deref().unwrap_or_default(), credentials),
        input_schema_json: schema.to_string(),
        read_only: hints.and_then(|h| h.read_only_hint).unwrap_or(false),
        idempotent: hints.and_then(|h| h.idempotent_hint).unwrap_or(false),
    }
}

pub use weft_core::mcp::{redact, redact_value};

/// Whether `text` holds a credential value (as it is, or JSON-escaped).
fn holds_credential(text: &str, credentials: &BTreeMap<String, String>) -> bool {
    redact(text, credentials) != text
}

/// A call's result as the text the model sees: text blocks joined by newlines, other blocks as
/// JSON; structured content as JSON when there are no blocks. Cut to `max` bytes.
pub fn result_text(r: &CallToolResult, max: usize) -> String {
    let mut parts: Vec<String> = r
        .content
        .iter()
        .map(|b| match b {
            ContentBlock::Text(t) => t.text.clone(),
            other => serde_json::to_string(other).unwrap_or_default(),
        })
        .collect();
    if parts.is_empty()
        && let Some(s) = &r.structured_content
    {
        parts.push(s.to_string());
    }
    cut(parts.join("\n"), max)
}

fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    let mut at = max;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    text.truncate(at);
    text.push_str(&format!(
        "\n[cut: the result was {total} bytes; the first {at} are kept]"
    ));
    text
}

/// The span of one bridge RPC, joined to the caller's trace (the executor's `tool` span): the
/// server's and the tool's names only, never arguments, results or credentials.
fn rpc_span<T>(rpc: &'static str, req: &Request<T>, server: &str, tool: &str) -> tracing::Span {
    let span = tracing::info_span!("mcp_bridge", rpc, server, tool);
    weft_telemetry::adopt_trace_context(&span, req.metadata());
    span
}

#[tonic::async_trait]
impl v1::mcp_bridge_server::McpBridge for BridgeService {
    async fn list_tools(
        &self,
        request: Request<v1::McpListToolsRequest>,
    ) -> Result<Response<v1::McpListToolsResponse>, Status> {
        let span = rpc_span("list_tools", &request, &request.get_ref().server, "");
        tracing::Instrument::instrument(self.list_tools_in(request), span).await
    }

    async fn call_tool(
        &self,
        request: Request<v1::McpCallToolRequest>,
    ) -> Result<Response<v1::McpCallToolResponse>, Status> {
        let r = request.get_ref();
        let span = rpc_span("call_tool", &request, &r.server, &r.tool);
        tracing::Instrument::instrument(self.call_tool_in(request), span).await
    }
}

impl BridgeService {
    async fn list_tools_in(
        &self,
        request: Request<v1::McpListToolsRequest>,
    ) -> Result<Response<v1::McpListToolsResponse>, Status> {
        let r = request.get_ref();
        let (tenant, def, credentials) = self.resolve(&request, &r.server, &r.credentials).await?;
        let server = ServerRef {
            tenant: &tenant,
            name: &r.server,
            version: &def.version,
            content: &def.content,
        };
        let tools = self
            .pool
            .list_tools(&server, &credentials)
            .await
            .map_err(|e| to_status(e.redacted(&credentials)))?;
        let tools = tools
            .iter()
            .filter(|t| def.content.offers(&t.name))
            .filter(|t| {
                // A name is sent to the model as it is: one that echoes a credential is left
                // out (and not logged, as it holds a secret).
                if holds_credential(&t.name, &credentials) {
                    tracing::warn!(server = %r.server, "an mcp tool's name holds a run credential; the tool is not offered");
                    return false;
                }
                let ok = offerable(&r.server, &t.name);
                if !ok {
                    tracing::debug!(tool = %t.name, "mcp tool name cannot be offered to a model; skipped");
                }
                ok
            })
            .map(|t| tool_info(t, &credentials))
            .collect();
        Ok(Response::new(v1::McpListToolsResponse { tools }))
    }

    async fn call_tool_in(
        &self,
        request: Request<v1::McpCallToolRequest>,
    ) -> Result<Response<v1::McpCallToolResponse>, Status> {
        let r = request.get_ref();
        let (tenant, def, credentials) = self.resolve(&request, &r.server, &r.credentials).await?;
        if !def.content.offers(&r.tool) {
            return Ok(Response::new(v1::McpCallToolResponse {
                text: format!(
                    "MCP server `{}` does not offer `{}` to runs (its definition's `tools` leaves it out)",
                    r.server, r.tool
                ),
                is_error: true,
            }));
        }
        let arguments = match serde_json::from_str::<serde_json::Value>(&r.arguments_json) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => {
                return Ok(Response::new(v1::McpCallToolResponse {
                    text: "the tool's arguments must be a JSON object".into(),
                    is_error: true,
                }));
            }
        };
        let timeout = def.content.timeout_ms.map_or(self.call_timeout, |t| {
            self.call_timeout.min(Duration::from_millis(u64::from(t)))
        });
        let server = ServerRef {
            tenant: &tenant,
            name: &r.server,
            version: &def.version,
            content: &def.content,
        };
        let out = match self
            .pool
            .call_tool(&server, &credentials, &r.tool, arguments, timeout)
            .await
        {
            // Redacted before it is cut, so a secret across the cut cannot leave half of itself.
            Ok(result) => v1::McpCallToolResponse {
                text: cut(
                    redact(&result_text(&result, usize::MAX), &credentials),
                    self.max_result_bytes,
                ),
                is_error: result.is_error.unwrap_or(false),
            },
            // The call reached the server (or timed out there): the model sees the failure.
            Err(BridgeError::Call(m)) => v1::McpCallToolResponse {
                text: redact(&m, &credentials),
                is_error: true,
            },
            Err(e) => return Err(to_status(e.redacted(&credentials))),
        };
        Ok(Response::new(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_that_echoes_a_credential_in_its_description_or_schema_is_redacted() {
        let creds = BTreeMap::from([
            ("k".to_owned(), "sk-0123456789abcdef".to_owned()),
            ("pin".to_owned(), "12345678".to_owned()),
        ]);
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"q": {"type": "string", "description": "key sk-0123456789abcdef"}},
            "sk-0123456789abcdef": {"enum": ["sk-0123456789abcdef"]},
            "n": {"type": "integer", "default": 12345678},
        });
        let serde_json::Value::Object(schema) = schema else {
            unreachable!()
        };
        let tool = Tool::new(
            "search",
            "uses sk-0123456789abcdef for you",
            Arc::new(schema),
        );
        let info = tool_info(&tool, &creds);
        let all = format!(
            "{} {} {}",
            info.name, info.description, info.input_schema_json
        );
        assert!(!all.contains("sk-0123456789abcdef"), "{all}");
        assert!(!all.contains("12345678"), "{all}");
        assert_eq!(info.description, "uses [redacted: credential k] for you");
        let v: serde_json::Value = serde_json::from_str(&info.input_schema_json).unwrap();
        assert_eq!(
            v["properties"]["q"]["description"],
            "key [redacted: credential k]"
        );
        assert!(holds_credential("get_sk-0123456789abcdef", &creds));
        assert!(!holds_credential("search", &creds));
    }

    #[test]
    fn secrets_are_redacted_by_value() {
        let creds = BTreeMap::from([("gh".to_owned(), "s3cr3t-token".to_owned())]);
        assert_eq!(
            redact("Authorization: Bearer s3cr3t-token", &creds),
            "Authorization: Bearer [redacted: credential gh]"
        );
    }

    #[test]
    fn the_longer_secret_and_escaped_forms_are_redacted() {
        let creds = BTreeMap::from([
            ("a".to_owned(), "abc".to_owned()),
            ("b".to_owned(), "abcdef".to_owned()),
            ("q".to_owned(), "x\"y".to_owned()),
        ]);
        assert_eq!(redact("abcdef", &creds), "[redacted: credential b]");
        assert_eq!(
            redact(r#"{"k":"x\"y"}"#, &creds),
            r#"{"k":"[redacted: credential q]"}"#
        );
    }

    #[test]
    fn long_results_are_cut_on_a_char_boundary() {
        let t = cut("ééééé".into(), 3);
        assert!(t.starts_with("é\n[cut: the result was 10 bytes"), "{t}");
    }

    #[test]
    fn only_provider_safe_names_are_offered() {
        assert!(offerable("github", "get_issue"));
        assert!(!offerable("github", "get.issue"));
        assert!(!offerable("github", &"x".repeat(60)));
    }
}
