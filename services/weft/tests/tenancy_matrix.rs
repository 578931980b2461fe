//! The tenant-isolation matrix: every route the gateway serves × six identities (no token, an
//! unknown token, a revoked token, a token missing the route's scope, another tenant, another
//! subject of the same tenant) → the expected status, the error shape of the route, and no byte
//! of tenant A's data in any answer it should not see.
//!
//! # Where the route list comes from, and why a new route cannot slip past
//!
//! axum has no API that lists routes, so the list is read from the router itself: the test
//! builds the very `Router` that `weft_gateway::serve` serves (`weft_gateway::router`, same
//! function, same state type) and reads its path table from axum's `Debug` output (each route's
//! path template and which of its method slots hold a handler). There is no hand-kept route
//! list to drift:
//!
//! - a route registered anywhere (`router()` in `lib.rs`, or a `routes()` merged from `runs.rs`,
//!   `agents.rs`, `llm.rs`, `usage.rs`, or a new file) ends up in that router, so it is in the
//!   table; a new method on an existing path is a new (method, path) pair;
//! - the test then requires the keys of [`expectations`] to equal that table *exactly*: a served
//!   (method, path) without an entry fails with "… has no tenancy-matrix entry; add one", and an
//!   entry for a route no longer served fails too;
//! - the parse is not trusted blindly: if axum's format changes, the parser fails loudly (it
//!   never returns a partial table), and the table is checked against the live server — each
//!   (method, path) is answered by a handler, not by the `not_found` / `method_not_allowed`
//!   fallbacks, and an unknown method on each path gets a 405 whose `Allow` header lists exactly
//!   the parsed methods — and against the served OpenAPI document in both directions;
//!
//! # Identities
//!
//! Tenant A (`acme`) owns the resources every path parameter points at: a parked run of subject
//! `alice-…` (also A's A2A task), an agent definition (also the skill of A's A2A card), a
//! token, and its usage. The identities act on those:
//! no token, a well-formed `wft_…` never minted, a revoked `tenant:admin` token of A, a token of
//! A's own run owner that lacks only the scopes that open the route (so its 403 can only come
//! from the scope check), a `tenant:admin` of tenant B (`beta`; the strongest non-operator, so
//! its refusals come from tenancy, not from scopes), and `bob`, a non-admin of A holding every
//! other scope. Every answer of tenant B, and every 404, is also compared with the answer to the
//! same request naming resources that never existed: the two must be the same (no existence
//! oracle).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::TestFleet;
use reqwest::Method;
use serde_json::{Value, json};

// --- identities -----------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Identity {
    NoToken,
    UnknownToken,
    RevokedToken,
    MissingScope,
    OtherTenant,
    OtherSubject,
}

const IDENTITIES: [Identity; 6] = [
    Identity::NoToken,
    Identity::UnknownToken,
    Identity::RevokedToken,
    Identity::MissingScope,
    Identity::OtherTenant,
    Identity::OtherSubject,
];

/// Every scope a tenant's token can hold (`admin` is the operator's, not a tenant's).
const TENANT_SCOPES: [&str; 10] = [
    "tenant:admin",
    "runs:create",
    "runs:read",
    "memory:read",
    "memory:write",
    "channels:publish",
    "channels:read",
    "llm:call",
    "volumes:read",
    "volumes:write",
];

/// What opens a route.
#[derive(Clone, Copy, Debug)]
enum Access {
    /// No token needed (health, metrics, the OpenAPI document).
    Public,
    /// Any valid token.
    AnyToken,
    /// One of these scopes (`tenant:admin` and `admin` imply every scope).
    AnyOf(&'static [&'static str]),
    /// `tenant:admin` (or `admin`).
    TenantAdmin,
    /// The web UI's session cookie; a bearer token does not open it.
    Session,
}

impl Access {
    /// The scopes of the "missing scope" token: never `tenant:admin` (it implies every scope);
    /// for a scoped route every other scope a tenant may hold except those that open it; for a
    /// route no scope opens, one unrelated scope (nothing is missing, so it must get through).
    fn missing_scope_token_scopes(self) -> Vec<&'static str> {
        let opens: &[&str] = match self {
            Access::Public | Access::AnyToken | Access::Session => return vec!["memory:read"],
            Access::AnyOf(s) => s,
            Access::TenantAdmin => &[],
        };
        TENANT_SCOPES
            .into_iter()
            .filter(|s| *s != "tenant:admin" && !opens.contains(s))
            .collect()
    }
}

/// The error body a route speaks.
#[derive(Clone, Copy, Debug)]
enum Shape {
    OpenAi,
    Anthropic,
    Native,
    /// The A2A REST binding's (`application/a2a+json`, `{"error": {"code": <status>, "status",
    /// "message", "details": [ErrorInfo]}}`), except the bearer check's 401, which is weft's
    /// native one (the check runs before any A2A code).
    A2a,
}

// --- the expectations -------------------------------------------------------------------------

/// The values path parameters, queries and bodies are filled with: tenant A's resources, or
/// ghosts that never existed (to show that A's answer is the same as a stranger's).
#[derive(Clone, Debug)]
struct Params {
    tenant: String,
    run: String,
    token: String,
    agent: String,
    agent_hash: String,
    /// A's skill is named like A's agent (names are per kind).
    skill_hash: String,
    /// A's MCP server definition is named like A's agent too.
    mcp_hash: String,
    /// A's process is named like A's agent too.
    process_hash: String,
    /// A's schedule and webhook definitions are named like A's agent too.
    schedule_hash: String,
    webhook_hash: String,
    /// A tenant channel, and the cursor of a message in it.
    channel: String,
    cursor: String,
    /// A named volume of A, a change in it and a snapshot of it.
    volume: String,
    change: String,
    snapshot: String,
    /// A change in, and a snapshot of, alice's run's own volume.
    run_change: String,
    run_snapshot: String,
    /// alice's stored Responses API response.
    response: String,
    /// A's A2A peer definition is named like A's agent too.
    a2a_peer_hash: String,
    /// A's hook definition is named like A's agent too.
    hook_hash: String,
}

impl Params {
    /// (value, placeholder) pairs, to compare an answer about A with one about a ghost.
    fn named(&self) -> [(&str, &'static str); 20] {
        [
            (&self.response, "<response>"),
            (&self.hook_hash, "<hook_hash>"),
            (&self.a2a_peer_hash, "<a2a_peer_hash>"),
            (&self.process_hash, "<process_hash>"),
            (&self.volume, "<volume>"),
            (&self.change, "<change>"),
            (&self.snapshot, "<snapshot>"),
            (&self.run_change, "<run_change>"),
            (&self.run_snapshot, "<run_snapshot>"),
            (&self.mcp_hash, "<mcp_hash>"),
            (&self.schedule_hash, "<schedule_hash>"),
            (&self.webhook_hash, "<webhook_hash>"),
            (&self.cursor, "<cursor>"),
            (&self.channel, "<channel>"),
            (&self.agent_hash, "<agent_hash>"),
            (&self.skill_hash, "<skill_hash>"),
            (&self.run, "<run>"),
            (&self.token, "<token>"),
            (&self.agent, "<agent>"),
            (&self.tenant, "<tenant>"),
        ]
    }

    fn normalise(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (value, name) in self.named() {
            out = out.replace(value, name);
        }
        out
    }
}

/// An interruption id nobody asked.
const INTERRUPT: &str = "int_made_up";

/// The key of alice's run memory that holds a canary.
const MEMORY_KEY: &str = "note";

/// The file of A's volumes (named and alice's run's) that holds a canary.
const VOLUME_FILE: &str = "docs/readme.md";

type Query = fn(&Params) -> String;
type Body = fn(&Params) -> Option<Value>;
type Check = fn(Identity, &Value) -> Result<(), String>;

/// One row of the matrix: a route, how to call it, and the status each identity must get (in
/// the order of [`IDENTITIES`]).
struct Entry {
    method: Method,
    path: &'static str,
    access: Access,
    shape: Shape,
    expect: [u16; 6],
    query: Query,
    body: Body,
    /// A success creates something, so its body is not compared with the ghost request's.
    creates: bool,
    /// The route tells anyone, by design, whether A's resource exists: a ghost gets this status
    /// (an opaque error) instead of A's answer. Only the webhook receiver, which answers an
    /// unsigned delivery to a webhook that exists 401 and one to a webhook that does not 404.
    existence_visible: Option<u16>,
    /// The route answers its refusals in a 200 body (JSON-RPC errors), so every 200 is also
    /// compared with the answer about a ghost, as every 404 is.
    refuses_in_body: bool,
    check: Check,
}

fn entry(
    method: Method,
    path: &'static str,
    access: Access,
    shape: Shape,
    expect: [u16; 6],
) -> Entry {
    Entry {
        method,
        path,
        access,
        shape,
        expect,
        query: |_| String::new(),
        body: |_| None,
        creates: false,
        existence_visible: None,
        refuses_in_body: false,
        check: |_, _| Ok(()),
    }
}

impl Entry {
    fn query(mut self, q: Query) -> Self {
        self.query = q;
        self
    }
    fn body(mut self, b: Body) -> Self {
        self.body = b;
        self
    }
    fn creates(mut self) -> Self {
        self.creates = true;
        self
    }
    fn existence_visible(mut self, ghost_status: u16) -> Self {
        self.existence_visible = Some(ghost_status);
        self
    }
    fn refuses_in_body(mut self) -> Self {
        self.refuses_in_body = true;
        self
    }
    fn check(mut self, c: Check) -> Self {
        self.check = c;
        self
    }
}

// Statuses per identity:   none unknown revoked scope other-tenant other-subject
const PUBLIC: [u16; 6] = [200, 200, 200, 200, 200, 200];
/// The web UI's app: public, and 503 `ui_not_built` alike for everyone from a binary built
/// without it.
fn ui_app() -> [u16; 6] {
    if weft_gateway::ui::built() {
        PUBLIC
    } else {
        [503; 6]
    }
}
/// A's own resource: another tenant gets 404 (never 403), another non-admin subject too.
const OWN_RESOURCE: [u16; 6] = [401, 401, 401, 403, 404, 404];
/// Tenant-scoped definitions: readable by every reader of the tenant, invisible to others.
const TENANT_READ: [u16; 6] = [401, 401, 401, 403, 404, 200];
/// Tenant-scoped definitions, writes: tenant admins only; another tenant finds nothing.
const TENANT_WRITE: [u16; 6] = [401, 401, 401, 403, 404, 403];
/// A call or a listing with no resource of A in it: every holder of the scope gets its own.
const OWN_DATA: [u16; 6] = [401, 401, 401, 403, 200, 200];
/// The webhook receiver takes no bearer token (each delivery is signed): an unsigned delivery to
/// A's webhook is refused alike whoever sends it, whatever token it carries.
const UNSIGNED: [u16; 6] = [401, 401, 401, 401, 401, 401];

fn chat_body(_: &Params) -> Option<Value> {
    Some(json!({"model": "mock-1", "messages": [{"role": "user", "content": "hi"}]}))
}

fn messages_body(_: &Params) -> Option<Value> {
    let messages = json!([{"role": "user", "content": "hi"}]);
    Some(json!({"model": "mock-1", "max_tokens": 16, "messages": messages}))
}

/// A token in tenant `p.tenant`.
fn mint_body(p: &Params) -> Option<Value> {
    let scopes = ["llm:call"];
    Some(json!({"name": "intruder", "tenant": p.tenant, "subject": "intruder", "scopes": scopes}))
}

/// A2A: the card is the caller's tenant's. B's lists none of A's agents (B exposes none); bob's
/// lists A's one exposed agent.
fn card_check(who: Identity, body: &Value) -> Result<(), String> {
    let want = match who {
        Identity::OtherTenant => ("weft: beta", 0),
        Identity::OtherSubject => ("weft: acme", 1),
        _ => return Ok(()),
    };
    let skills = body["skills"].as_array().map_or(usize::MAX, Vec::len);
    (body["name"] == want.0 && skills == want.1)
        .then_some(())
        .ok_or(format!("the card should be {want:?} (name, skills)"))
}

/// The A2A message bodies: `text` to A's task (its run id), or a new task of the skill
/// `skill` (A's exposed agent).
fn a2a_message(id: &str, text: &str, task: Option<&str>, skill: Option<&str>) -> Value {
    let mut m = json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(t) = task {
        m["taskId"] = json!(t);
    }
    if let Some(s) = skill {
        m["metadata"] = json!({"skill": s});
    }
    m
}

/// The matrix, keyed by (method, path template). It must cover exactly the routes the gateway
/// serves; the order is the order of execution (writes that create something come last, so
/// they cannot change what an earlier read finds).
fn expectations() -> Vec<Entry> {
    use Access::{AnyOf, AnyToken, Public, Session, TenantAdmin};
    use Shape::{A2a, Anthropic, Native, OpenAi};
    let get = Method::GET;
    let post = Method::POST;
    vec![
        // Public by design: no tenant data in them.
        entry(get.clone(), "/healthz", Public, Native, PUBLIC),
        entry(get.clone(), "/readyz", Public, Native, PUBLIC),
        entry(get.clone(), "/metrics", Public, Native, PUBLIC),
        entry(get.clone(), "/v1/openapi.json", Public, Native, PUBLIC),
        // The web UI: the app (no tenant data in it; 503 `ui_not_built` from a binary built
        // without web/dist), and its session, which only the session cookie opens: a bearer
        // token gets 401 from GET, and logging out without a session only clears the cookie.
        // Logging in with a token never minted is refused alike whoever asks. What a session
        // sees is tests/ui_session.rs's (the same principal as its token, so this matrix).
        // A redirect to /ui/, which the test client follows.
        entry(get.clone(), "/", Public, Native, ui_app()),
        entry(get.clone(), "/ui", Public, Native, ui_app()),
        entry(get.clone(), "/ui/", Public, Native, ui_app()),
        entry(get.clone(), "/ui/{*path}", Public, Native, ui_app()),
        entry(
            get.clone(),
            "/ui/api/session",
            Session,
            Native,
            [401, 401, 401, 401, 401, 401],
        ),
        entry(
            post.clone(),
            "/ui/api/session",
            Public,
            Native,
            [401, 401, 401, 401, 401, 401],
        )
        .body(|_| Some(json!({"token": format!("wft_{}", "x".repeat(43))}))),
        entry(
            Method::DELETE,
            "/ui/api/session",
            Session,
            Native,
            [204, 204, 204, 204, 204, 204],
        ),
        // weft's MCP server face: any valid token gets through to the MCP layer, which answers
        // these bare requests (no body, no session) with its own protocol errors, in weft's
        // shape. What each tool shows whom is tests/compat/test_mcp.py's (tenancy and scopes
        // over real MCP sessions); the protocol is the MCP conformance suite's.
        entry(
            post.clone(),
            "/mcp",
            AnyToken,
            Native,
            [401, 401, 401, 400, 400, 400],
        ),
        entry(
            get.clone(),
            "/mcp",
            AnyToken,
            Native,
            [401, 401, 401, 400, 400, 400],
        ),
        entry(
            Method::DELETE,
            "/mcp",
            AnyToken,
            Native,
            [401, 401, 401, 400, 400, 400],
        ),
        // The A2A server (docs/a2a.md): the bearer check (weft's native 401) and then the A2A
        // code, which calls the run and agent routes in-process as the caller, so their scopes
        // and tenancy hold. A's task is alice's parked run (started with an A2A context);
        // another tenant and bob find no such task (-32001, REST 404), like a task that never
        // was. The card lists the agents the caller can read, so it needs runs:create or
        // runs:read (the OpenAPI text says "any valid token").
        entry(
            get.clone(),
            "/.well-known/agent-card.json",
            AnyOf(&["runs:create", "runs:read"]),
            A2a,
            OWN_DATA,
        )
        .check(card_check),
        entry(
            get.clone(),
            "/a2a/.well-known/agent-card.json",
            AnyOf(&["runs:create", "runs:read"]),
            A2a,
            OWN_DATA,
        )
        .check(card_check),
        // JSON-RPC: after the bearer check every refusal is a 200 with an error body, checked
        // per identity: the scope refusal is -32603 carrying weft's `permission_denied`; B and
        // bob get -32001 (no such task), the same as about a ghost.
        entry(
            post.clone(),
            "/a2a/rpc",
            AnyOf(&["runs:read"]),
            A2a,
            [401, 401, 401, 200, 200, 200],
        )
        .body(|p| {
            Some(json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": p.run}}))
        })
        .refuses_in_body()
        .check(|who, body| {
            let (code, weft_code) = match who {
                Identity::MissingScope => (-32603, Some("permission_denied")),
                Identity::OtherTenant | Identity::OtherSubject => (-32001, None),
                _ => return Ok(()),
            };
            let err = &body["error"];
            let ok = body["jsonrpc"] == "2.0"
                && body["id"] == 1
                && body.get("result").is_none()
                && err["code"] == code
                && err["message"].is_string()
                && weft_code.is_none_or(|c| err["data"][0]["metadata"]["weft_code"] == c);
            ok.then_some(())
                .ok_or(format!("not a JSON-RPC error {code} ({weft_code:?})"))
        }),
        entry(
            get.clone(),
            "/a2a/tasks/{id}",
            AnyOf(&["runs:read"]),
            A2a,
            OWN_RESOURCE,
        ),
        // A message to A's task (its input): the scope-less token is alice's, so it finds her
        // task (runs:read) and is refused the input (runs:create).
        entry(
            post.clone(),
            "/a2a/message:send",
            AnyOf(&["runs:create"]),
            A2a,
            OWN_RESOURCE,
        )
        .body(|p| {
            let message = a2a_message("intruder-answer", "an intruder's answer", Some(&p.run), None);
            Some(json!({"message": message, "configuration": {"returnImmediately": true}}))
        }),
        // `POST /a2a/tasks/{id}:cancel` (one axum route with GET's path; the action follows
        // the id). Cancelling reads the task first: the scope-less token finds alice's task
        // and is refused the cancel (runs:create).
        entry(
            post.clone(),
            "/a2a/tasks/{id}",
            AnyOf(&["runs:create"]),
            A2a,
            OWN_RESOURCE,
        )
        .query(|_| ":cancel".into()),
        // The caller's own principal: any valid token.
        entry(
            get.clone(),
            "/v1/me",
            AnyToken,
            Native,
            [401, 401, 401, 200, 200, 200],
        )
        .check(|who, body| {
            let want = match who {
                Identity::OtherTenant => ("beta", "beta-admin"),
                Identity::OtherSubject => ("acme", "bob"),
                _ => return Ok(()),
            };
            (body["tenant"] == want.0 && body["subject"] == want.1)
                .then_some(())
                .ok_or(format!("`/v1/me` should name {want:?}"))
        }),
        // Model calls: no resource of A; anyone holding `llm:call` gets an answer.
        entry(
            post.clone(),
            "/v1/chat/completions",
            AnyOf(&["llm:call"]),
            OpenAi,
            OWN_DATA,
        )
        .body(chat_body),
        entry(
            post.clone(),
            "/v1/embeddings",
            AnyOf(&["llm:call"]),
            OpenAi,
            OWN_DATA,
        )
        .body(|_| Some(json!({"model": "mock-1", "input": "hi"}))),
        entry(
            get.clone(),
            "/v1/models",
            AnyOf(&["llm:call"]),
            OpenAi,
            OWN_DATA,
        ),
        entry(
            post.clone(),
            "/v1/responses",
            AnyOf(&["llm:call"]),
            OpenAi,
            OWN_DATA,
        )
        .body(|_| Some(json!({"model": "mock-1", "input": "hi"}))),
        // alice's stored response: hers alone, not even her tenant admin's (it is not listed
        // anywhere; another subject and another tenant find nothing).
        entry(
            get.clone(),
            "/v1/responses/{id}",
            AnyOf(&["llm:call"]),
            OpenAi,
            OWN_RESOURCE,
        ),
        entry(
            Method::DELETE,
            "/v1/responses/{id}",
            AnyOf(&["llm:call"]),
            OpenAi,
            OWN_RESOURCE,
        ),
        entry(
            post.clone(),
            "/v1/messages",
            AnyOf(&["llm:call"]),
            Anthropic,
            OWN_DATA,
        )
        .body(messages_body),
        entry(
            post.clone(),
            "/v1/messages/count_tokens",
            AnyOf(&["llm:call"]),
            Anthropic,
            OWN_DATA,
        )
        .body(chat_body),
        entry(
            post.clone(),
            "/v1/llm/chat",
            AnyOf(&["llm:call"]),
            Native,
            OWN_DATA,
        )
        .body(chat_body),
        // Tokens: tenant admins of their own tenant. Listing names A's tenant; B still sees
        // only its own tokens (the filter is ignored for tenant admins).
        entry(
            get.clone(),
            "/v1/tokens",
            TenantAdmin,
            Native,
            [401, 401, 401, 403, 200, 403],
        )
        .query(|p| format!("?tenant={}", p.tenant))
        .check(|who, body| {
            if who != Identity::OtherTenant {
                return Ok(());
            }
            let tenants: BTreeSet<&str> = body["data"]
                .as_array()
                .ok_or("no `data` array")?
                .iter()
                .filter_map(|t| t["tenant"].as_str())
                .collect();
            (tenants == BTreeSet::from(["beta"]))
                .then_some(())
                .ok_or(format!("tenant B listed tokens of {tenants:?}"))
        }),
        // A's token: B finds nothing (404); bob and the scope-less token lack `tenant:admin`.
        entry(
            Method::DELETE,
            "/v1/tokens/{id}",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        // Minting into A: refused to B with a 403 that does not depend on whether the tenant
        // has any data (tenants are names, not rows; the ghost comparison checks it).
        entry(
            post.clone(),
            "/v1/tokens",
            TenantAdmin,
            Native,
            [401, 401, 401, 403, 403, 403],
        )
        .body(mint_body),
        // Tenant export and import: operators only; no identity here is one (the scope is
        // checked before a body is read).
        entry(
            get.clone(),
            "/v1/tenants/{tenant}/export",
            AnyOf(&["admin"]),
            Native,
            [401, 401, 401, 403, 403, 403],
        ),
        entry(
            post.clone(),
            "/v1/tenants/{tenant}/import",
            AnyOf(&["admin"]),
            Native,
            [401, 401, 401, 403, 403, 403],
        ),
        // Usage of tenant A, named in the query.
        entry(
            get.clone(),
            "/v1/usage",
            TenantAdmin,
            Native,
            [401, 401, 401, 403, 404, 403],
        )
        .query(|p| format!("?tenant={}", p.tenant)),
        // Runs: A's run is alice's; bob (same tenant, not an admin) must not find it either.
        entry(
            get.clone(),
            "/v1/runs",
            AnyOf(&["runs:read"]),
            Native,
            OWN_DATA,
        ),
        entry(
            get.clone(),
            "/v1/runs/{id}",
            AnyOf(&["runs:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            get.clone(),
            "/v1/runs/{id}/events",
            AnyOf(&["runs:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            get.clone(),
            "/v1/runs/{id}/stream",
            AnyOf(&["runs:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            post.clone(),
            "/v1/runs/{id}/cancel",
            AnyOf(&["runs:create"]),
            Native,
            OWN_RESOURCE,
        )
        .body(|_| Some(json!({"reason": "intruder"}))),
        entry(
            post.clone(),
            "/v1/runs/{id}/pause",
            AnyOf(&["runs:create"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            post.clone(),
            "/v1/runs/{id}/resume",
            AnyOf(&["runs:create"]),
            Native,
            OWN_RESOURCE,
        ),
        // A tenant's drain: its tenant admins (and operators); tenant B finds no tenant A, bob
        // and the scope-less token lack `tenant:admin`. Nobody here drains A.
        entry(
            post.clone(),
            "/v1/tenants/{tenant}/drain",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            get.clone(),
            "/v1/tenants/{tenant}/drain",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            post.clone(),
            "/v1/tenants/{tenant}/resume",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        // The fleet's maintenance: operators only; no identity here is one.
        entry(
            post.clone(),
            "/v1/fleet/drain",
            AnyOf(&["admin"]),
            Native,
            [401, 401, 401, 403, 403, 403],
        ),
        entry(
            get.clone(),
            "/v1/fleet/drain",
            AnyOf(&["admin"]),
            Native,
            [401, 401, 401, 403, 403, 403],
        ),
        entry(
            post.clone(),
            "/v1/fleet/resume",
            AnyOf(&["admin"]),
            Native,
            [401, 401, 401, 403, 403, 403],
        ),
        entry(
            post.clone(),
            "/v1/runs/{id}/input",
            AnyOf(&["runs:create"]),
            Native,
            OWN_RESOURCE,
        )
        .body(|_| Some(json!({"text": "intruder"}))),
        entry(
            post.clone(),
            "/v1/runs/{id}/interrupts/{interrupt_id}",
            AnyOf(&["runs:create"]),
            Native,
            OWN_RESOURCE,
        )
        .body(|_| Some(json!({"answer": "intruder"}))),
        entry(
            post.clone(),
            "/v1/runs/{id}/compact",
            AnyOf(&["runs:create"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            get.clone(),
            "/v1/runs/{id}/search",
            AnyOf(&["runs:read"]),
            Native,
            OWN_RESOURCE,
        )
        .query(|_| "?q=intruder".to_owned()),
        // A plan run's plan is its run's: the same 404 for another tenant and another user.
        entry(
            get.clone(),
            "/v1/runs/{id}/plan",
            AnyOf(&["runs:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            get.clone(),
            "/v1/runs/{id}/plan/versions/{version}",
            AnyOf(&["runs:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            Method::PUT,
            "/v1/runs/{id}/plan",
            AnyOf(&["runs:create"]),
            Native,
            OWN_RESOURCE,
        )
        .body(|_| Some(json!({}))),
        entry(
            post.clone(),
            "/v1/runs/{id}/plan/tasks/{task}/retry",
            AnyOf(&["runs:create"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            post.clone(),
            "/v1/runs/{id}/plan/tasks/{task}/skip",
            AnyOf(&["runs:create"]),
            Native,
            OWN_RESOURCE,
        ),
        // Evaluations are the tenant's: another tenant's readers get their own (none of A's).
        entry(
            get.clone(),
            "/v1/evaluations",
            AnyOf(&["runs:read"]),
            Native,
            OWN_DATA,
        )
        .query(|p| format!("?agent={}", p.agent)),
        // Agent definitions are the tenant's: readable by its readers, writable by its admins.
        entry(
            get.clone(),
            "/v1/agents",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        ),
        entry(
            get.clone(),
            "/v1/agents/{name}",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            get.clone(),
            "/v1/agents/{name}/versions",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        // Whether a hash is a version of one of *your* agents: A's hash is unknown to B.
        entry(
            post.clone(),
            "/v1/agents/verify",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        )
        .body(|p| Some(json!({"sha256": p.agent_hash})))
        .check(|who, body| match who {
            Identity::OtherTenant if body["known"] != false => {
                Err("tenant B was told that A's agent hash is known".into())
            }
            Identity::OtherSubject if body["known"] != true => {
                Err("a reader of tenant A was told A's own agent hash is unknown".into())
            }
            _ => Ok(()),
        }),
        entry(
            post.clone(),
            "/v1/agents/{name}/fork",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|_| Some(json!({"changes": {"system_prompt": "forked by an intruder"}}))),
        entry(
            post.clone(),
            "/v1/agents/{name}/retire",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            post.clone(),
            "/v1/agents/{name}/activate",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|p| Some(json!({"version": p.agent_hash}))),
        // Memory in alice's run scope: bob (same tenant, not an admin) and tenant B find no such
        // scope; the scope-less token is refused before anything is parsed.
        entry(
            get.clone(),
            "/v1/memory/{scope}/{scope_id}",
            AnyOf(&["memory:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            get.clone(),
            "/v1/memory/{scope}/{scope_id}/{key}",
            AnyOf(&["memory:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            post.clone(),
            "/v1/memory/search",
            AnyOf(&["memory:read"]),
            Native,
            OWN_RESOURCE,
        )
        .body(|p| Some(json!({"scope": "run", "scope_id": p.run, "query": "note"}))),
        entry(
            Method::PUT,
            "/v1/memory/{scope}/{scope_id}/{key}",
            AnyOf(&["memory:write"]),
            Native,
            OWN_RESOURCE,
        )
        .body(|_| Some(json!({"value": "an intruder's note"}))),
        entry(
            post.clone(),
            "/v1/memory/{scope}/{scope_id}/{key}/incr",
            AnyOf(&["memory:write"]),
            Native,
            OWN_RESOURCE,
        )
        .body(|_| Some(json!({"by": 1}))),
        entry(
            Method::DELETE,
            "/v1/memory/{scope}/{scope_id}/{key}",
            AnyOf(&["memory:write"]),
            Native,
            OWN_RESOURCE,
        ),
        // Volumes. A named volume is the tenant's: its readers (volumes:read) read it; another
        // tenant finds none of it. A run's own volume is seen by whoever sees the run: alice and
        // A's admins; bob and tenant B find nothing, for reads and writes alike.
        entry(
            get.clone(),
            "/v1/volumes",
            AnyOf(&["volumes:read"]),
            Native,
            OWN_DATA,
        ),
        entry(
            get.clone(),
            "/v1/volumes/{name}",
            AnyOf(&["volumes:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            get.clone(),
            "/v1/volumes/{name}/tree",
            AnyOf(&["volumes:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            get.clone(),
            "/v1/volumes/{name}/files/{*path}",
            AnyOf(&["volumes:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            get.clone(),
            "/v1/volumes/{name}/export",
            AnyOf(&["volumes:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            get.clone(),
            "/v1/volumes/{name}/changes",
            AnyOf(&["volumes:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            get.clone(),
            "/v1/volumes/{name}/snapshots",
            AnyOf(&["volumes:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            get.clone(),
            "/v1/volumes/{name}/diff",
            AnyOf(&["volumes:read"]),
            Native,
            TENANT_READ,
        )
        .query(|_| "?from=current&to=current".into()),
        entry(
            get.clone(),
            "/v1/runs/{id}/volume",
            AnyOf(&["volumes:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            get.clone(),
            "/v1/runs/{id}/volume/tree",
            AnyOf(&["volumes:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            get.clone(),
            "/v1/runs/{id}/volume/files/{*path}",
            AnyOf(&["volumes:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            get.clone(),
            "/v1/runs/{id}/volume/export",
            AnyOf(&["volumes:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            get.clone(),
            "/v1/runs/{id}/volume/changes",
            AnyOf(&["volumes:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            get.clone(),
            "/v1/runs/{id}/volume/snapshots",
            AnyOf(&["volumes:read"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            get.clone(),
            "/v1/runs/{id}/volume/diff",
            AnyOf(&["volumes:read"]),
            Native,
            OWN_RESOURCE,
        )
        .query(|_| "?from=current&to=current".into()),
        entry(
            Method::PUT,
            "/v1/runs/{id}/volume/files/{*path}",
            AnyOf(&["volumes:write"]),
            Native,
            OWN_RESOURCE,
        )
        .body(|_| Some(json!("an intruder's file"))),
        entry(
            Method::DELETE,
            "/v1/runs/{id}/volume/files/{*path}",
            AnyOf(&["volumes:write"]),
            Native,
            OWN_RESOURCE,
        ),
        // An empty body is an empty archive.
        entry(
            post.clone(),
            "/v1/runs/{id}/volume/import",
            AnyOf(&["volumes:write"]),
            Native,
            OWN_RESOURCE,
        ),
        entry(
            post.clone(),
            "/v1/runs/{id}/volume/undo",
            AnyOf(&["volumes:write"]),
            Native,
            OWN_RESOURCE,
        )
        .body(|p| Some(json!({"change_id": p.run_change}))),
        entry(
            post.clone(),
            "/v1/runs/{id}/volume/snapshots",
            AnyOf(&["volumes:write"]),
            Native,
            OWN_RESOURCE,
        )
        .body(|_| Some(json!({"label": "an intruder's snapshot"}))),
        entry(
            post.clone(),
            "/v1/runs/{id}/volume/snapshots/{snapshot_id}/restore",
            AnyOf(&["volumes:write"]),
            Native,
            OWN_RESOURCE,
        ),
        // Channels are the tenant's: its readers read, its publishers publish, its admins
        // create and delete; another tenant finds none of them.
        entry(
            get.clone(),
            "/v1/channels",
            AnyOf(&["channels:read", "channels:publish"]),
            Native,
            OWN_DATA,
        ),
        entry(
            post.clone(),
            "/v1/channels/{name}/read",
            AnyOf(&["channels:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            get.clone(),
            "/v1/channels/{name}/peek",
            AnyOf(&["channels:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            post.clone(),
            "/v1/channels/{name}/ack",
            AnyOf(&["channels:read"]),
            Native,
            TENANT_READ,
        )
        .body(|p| Some(json!({"cursor": p.cursor}))),
        entry(
            post.clone(),
            "/v1/channels/await",
            AnyOf(&["channels:read"]),
            Native,
            [401, 401, 401, 403, 404, 200],
        )
        .body(|p| Some(json!({"channels": [p.channel], "mode": "any"}))),
        entry(
            Method::DELETE,
            "/v1/channels/{name}",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            post.clone(),
            "/v1/channels/{name}/publish",
            AnyOf(&["channels:publish"]),
            Native,
            [401, 401, 401, 403, 404, 201],
        )
        .body(|_| Some(json!({"payload": "an intruder's message"})))
        .creates(),
        // B may create a channel of A's channel's name in its own tenant.
        entry(
            Method::PUT,
            "/v1/channels/{name}",
            TenantAdmin,
            Native,
            [401, 401, 401, 403, 201, 403],
        )
        .body(|_| Some(json!({"scope": "tenant"})))
        .creates(),
        // Writes that create, last, runs before agents: B may define an agent of A's agent's
        // name in its own tenant (names are per tenant), after which B's runs of that name are
        // B's own. bob starts a run of his own from the tenant's agent; B has no such agent.
        entry(
            post,
            "/v1/runs",
            AnyOf(&["runs:create"]),
            Native,
            [401, 401, 401, 403, 404, 201],
        )
        .body(|p| Some(json!({"agent": p.agent, "interactive": true})))
        .creates(),
        // A new A2A task of A's exposed agent (streamed): bob starts his own; B finds no such
        // skill on its card (-32602, REST 400: an agent it has not is not on its card), the same
        // as a ghost skill; the scope-less token finds the skill (runs:read) and is refused the
        // run (runs:create).
        entry(
            Method::POST,
            "/a2a/message:stream",
            AnyOf(&["runs:create"]),
            A2a,
            [401, 401, 401, 403, 400, 200],
        )
        .body(|p| {
            let message = a2a_message("intruder-task", "an intruder's task", None, Some(&p.agent));
            Some(json!({"message": message}))
        })
        .creates()
        .check(|who, body| {
            if who != Identity::OtherTenant {
                return Ok(());
            }
            (body["error"]["details"][0]["reason"] == "INVALID_PARAMS")
                .then_some(())
                .ok_or("not an INVALID_PARAMS error".into())
        }),
        // A's agent is checked unchanged afterwards.
        entry(
            Method::PUT,
            "/v1/agents/{name}",
            TenantAdmin,
            Native,
            [401, 401, 401, 403, 201, 403],
        )
        .body(|_| Some(json!({"model": "mock-1", "system_prompt": "an intruder's own agent"})))
        .creates(),
        // Skills: the same routes and rules as agents (one implementation serves both).
        entry(
            Method::GET,
            "/v1/skills",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        ),
        entry(
            Method::GET,
            "/v1/skills/{name}",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::GET,
            "/v1/skills/{name}/versions",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::POST,
            "/v1/skills/verify",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        )
        .body(|p| Some(json!({"sha256": p.skill_hash})))
        .check(|who, body| match who {
            Identity::OtherTenant if body["known"] != false => {
                Err("tenant B was told that A's skill hash is known".into())
            }
            Identity::OtherSubject if body["known"] != true => {
                Err("a reader of tenant A was told A's own skill hash is unknown".into())
            }
            _ => Ok(()),
        }),
        entry(
            Method::POST,
            "/v1/skills/{name}/fork",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|_| Some(json!({"changes": {"body": "forked by an intruder"}}))),
        entry(
            Method::POST,
            "/v1/skills/{name}/retire",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            Method::POST,
            "/v1/skills/{name}/activate",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|p| Some(json!({"version": p.skill_hash}))),
        // B may define a skill of A's skill's name in its own tenant; A's is checked unchanged.
        entry(
            Method::PUT,
            "/v1/skills/{name}",
            TenantAdmin,
            Native,
            [401, 401, 401, 403, 201, 403],
        )
        .body(|_| {
            Some(json!({"description": "an intruder's skill", "body": "an intruder's own skill"}))
        })
        .creates(),
        // Processes: the same routes and rules again.
        entry(
            Method::GET,
            "/v1/processes",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        ),
        entry(
            Method::GET,
            "/v1/processes/{name}",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::GET,
            "/v1/processes/{name}/versions",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::POST,
            "/v1/processes/verify",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        )
        .body(|p| Some(json!({"sha256": p.process_hash})))
        .check(|who, body| match who {
            Identity::OtherTenant if body["known"] != false => {
                Err("tenant B was told that A's process hash is known".into())
            }
            Identity::OtherSubject if body["known"] != true => {
                Err("a reader of tenant A was told A's own process hash is unknown".into())
            }
            _ => Ok(()),
        }),
        entry(
            Method::POST,
            "/v1/processes/{name}/fork",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|_| Some(json!({"changes": {"persona": "forked by an intruder"}}))),
        entry(
            Method::POST,
            "/v1/processes/{name}/retire",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            Method::POST,
            "/v1/processes/{name}/activate",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|p| Some(json!({"version": p.process_hash}))),
        // B may define a process of A's process's name in its own tenant; A's is checked
        // unchanged.
        entry(
            Method::PUT,
            "/v1/processes/{name}",
            TenantAdmin,
            Native,
            [401, 401, 401, 403, 201, 403],
        )
        .body(|_| {
            Some(json!({"description": "an intruder's process", "phases": [{"id": "a", "description": "an intruder's own phase"}]}))
        })
        .creates(),
        // MCP server definitions: the same routes and rules again.
        entry(
            Method::GET,
            "/v1/mcp-servers",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        ),
        entry(
            Method::GET,
            "/v1/mcp-servers/{name}",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::GET,
            "/v1/mcp-servers/{name}/versions",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::POST,
            "/v1/mcp-servers/verify",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        )
        .body(|p| Some(json!({"sha256": p.mcp_hash})))
        .check(|who, body| match who {
            Identity::OtherTenant if body["known"] != false => {
                Err("tenant B was told that A's MCP server hash is known".into())
            }
            Identity::OtherSubject if body["known"] != true => {
                Err("a reader of tenant A was told A's own MCP server hash is unknown".into())
            }
            _ => Ok(()),
        }),
        entry(
            Method::POST,
            "/v1/mcp-servers/{name}/fork",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|_| Some(json!({"changes": {"description": "forked by an intruder"}}))),
        entry(
            Method::POST,
            "/v1/mcp-servers/{name}/retire",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            Method::POST,
            "/v1/mcp-servers/{name}/activate",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|p| Some(json!({"version": p.mcp_hash}))),
        // B may define a server of A's server's name in its own tenant; A's is checked unchanged.
        entry(
            Method::PUT,
            "/v1/mcp-servers/{name}",
            TenantAdmin,
            Native,
            [401, 401, 401, 403, 201, 403],
        )
        .body(|_| {
            Some(json!({"description": "an intruder's server", "url": "https://intruder.example/mcp"}))
        })
        .creates(),
        // A2A peer definitions: the same routes and rules again.
        entry(
            Method::GET,
            "/v1/a2a-peers",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        ),
        entry(
            Method::GET,
            "/v1/a2a-peers/{name}",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::GET,
            "/v1/a2a-peers/{name}/versions",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::POST,
            "/v1/a2a-peers/verify",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        )
        .body(|p| Some(json!({"sha256": p.a2a_peer_hash})))
        .check(|who, body| match who {
            Identity::OtherTenant if body["known"] != false => {
                Err("tenant B was told that A's A2A peer hash is known".into())
            }
            Identity::OtherSubject if body["known"] != true => {
                Err("a reader of tenant A was told A's own A2A peer hash is unknown".into())
            }
            _ => Ok(()),
        }),
        entry(
            Method::POST,
            "/v1/a2a-peers/{name}/fork",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|_| Some(json!({"changes": {"description": "forked by an intruder"}}))),
        entry(
            Method::POST,
            "/v1/a2a-peers/{name}/retire",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            Method::POST,
            "/v1/a2a-peers/{name}/activate",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|p| Some(json!({"version": p.a2a_peer_hash}))),
        // B may define a peer of A's peer's name in its own tenant; A's is checked unchanged.
        entry(
            Method::PUT,
            "/v1/a2a-peers/{name}",
            TenantAdmin,
            Native,
            [401, 401, 401, 403, 201, 403],
        )
        .body(|_| {
            Some(json!({"description": "an intruder's peer", "card_url": "https://intruder.example/.well-known/agent-card.json"}))
        })
        .creates(),
        // Hook definitions: the same routes and rules again.
        entry(
            Method::GET,
            "/v1/hooks",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        ),
        entry(
            Method::GET,
            "/v1/hooks/{name}",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::GET,
            "/v1/hooks/{name}/versions",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::POST,
            "/v1/hooks/verify",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        )
        .body(|p| Some(json!({"sha256": p.hook_hash})))
        .check(|who, body| match who {
            Identity::OtherTenant if body["known"] != false => {
                Err("tenant B was told that A's hook hash is known".into())
            }
            Identity::OtherSubject if body["known"] != true => {
                Err("a reader of tenant A was told A's own hook hash is unknown".into())
            }
            _ => Ok(()),
        }),
        entry(
            Method::POST,
            "/v1/hooks/{name}/fork",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|_| Some(json!({"changes": {"description": "forked by an intruder"}}))),
        entry(
            Method::POST,
            "/v1/hooks/{name}/retire",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            Method::POST,
            "/v1/hooks/{name}/activate",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|p| Some(json!({"version": p.hook_hash}))),
        // B may define a hook of A's hook's name in its own tenant (it applies to B's runs
        // only); A's is checked unchanged.
        entry(
            Method::PUT,
            "/v1/hooks/{name}",
            TenantAdmin,
            Native,
            [401, 401, 401, 403, 201, 403],
        )
        .body(|_| {
            Some(json!({"description": "an intruder's hook", "phase": "pre", "agents": ["*"],
                        "tools": ["*"], "url": "https://intruder.example/hook"}))
        })
        .creates(),
        // Schedule definitions: the same routes and rules again.
        entry(
            Method::GET,
            "/v1/schedules",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        ),
        entry(
            Method::GET,
            "/v1/schedules/{name}",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::GET,
            "/v1/schedules/{name}/versions",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::POST,
            "/v1/schedules/verify",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        )
        .body(|p| Some(json!({"sha256": p.schedule_hash})))
        .check(|who, body| match who {
            Identity::OtherTenant if body["known"] != false => {
                Err("tenant B was told that A's schedule hash is known".into())
            }
            Identity::OtherSubject if body["known"] != true => {
                Err("a reader of tenant A was told A's own schedule hash is unknown".into())
            }
            _ => Ok(()),
        }),
        entry(
            Method::POST,
            "/v1/schedules/{name}/fork",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|_| Some(json!({"changes": {"input": "forked by an intruder"}}))),
        entry(
            Method::POST,
            "/v1/schedules/{name}/retire",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            Method::POST,
            "/v1/schedules/{name}/activate",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|p| Some(json!({"version": p.schedule_hash}))),
        // A schedule's live state: its definition's readers; the operations: its admins. No
        // identity here is A's admin, so none of them fires, pauses or retires A's schedule
        // (checked afterwards); B finds no schedule of that name until it puts its own, last.
        entry(
            Method::GET,
            "/v1/schedules/{name}/state",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            Method::POST,
            "/v1/schedules/{name}/pause",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            Method::POST,
            "/v1/schedules/{name}/resume",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            Method::POST,
            "/v1/schedules/{name}/run-now",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            Method::DELETE,
            "/v1/schedules/{name}",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        // Webhook definitions: the same routes and rules again.
        entry(
            Method::GET,
            "/v1/webhooks",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        ),
        entry(
            Method::GET,
            "/v1/webhooks/{name}",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::GET,
            "/v1/webhooks/{name}/versions",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            TENANT_READ,
        ),
        entry(
            Method::POST,
            "/v1/webhooks/verify",
            AnyOf(&["runs:create", "runs:read"]),
            Native,
            OWN_DATA,
        )
        .body(|p| Some(json!({"sha256": p.webhook_hash})))
        .check(|who, body| match who {
            Identity::OtherTenant if body["known"] != false => {
                Err("tenant B was told that A's webhook hash is known".into())
            }
            Identity::OtherSubject if body["known"] != true => {
                Err("a reader of tenant A was told A's own webhook hash is unknown".into())
            }
            _ => Ok(()),
        }),
        entry(
            Method::POST,
            "/v1/webhooks/{name}/fork",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|_| Some(json!({"changes": {"description": "forked by an intruder"}}))),
        entry(
            Method::POST,
            "/v1/webhooks/{name}/retire",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            Method::POST,
            "/v1/webhooks/{name}/activate",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|p| Some(json!({"version": p.webhook_hash}))),
        // Triage and dry runs: A's admins only (they show what senders sent and whether it
        // verified against A's secret).
        entry(
            Method::GET,
            "/v1/webhooks/{name}/deliveries",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        ),
        entry(
            Method::POST,
            "/v1/webhooks/{name}/test",
            TenantAdmin,
            Native,
            TENANT_WRITE,
        )
        .body(|_| {
            let signature = format!("sha256={}", "0".repeat(64));
            Some(json!({"headers": {"x-hub-signature-256": signature}, "body": "{}"}))
        }),
        // The receiver: no bearer token, so every identity is a stranger with an unsigned
        // delivery to A's webhook. That a webhook exists is visible by design (404 otherwise).
        entry(
            Method::POST,
            "/v1/_webhooks/{tenant}/{name}",
            Public,
            Native,
            UNSIGNED,
        )
        .body(|_| Some(json!({"issue": {"title": "an intruder's delivery"}})))
        .existence_visible(404),
        // B may define a schedule and a webhook of A's names in its own tenant; A's are checked
        // unchanged. B's schedule fires far in the future, like A's.
        entry(
            Method::PUT,
            "/v1/schedules/{name}",
            TenantAdmin,
            Native,
            [401, 401, 401, 403, 201, 403],
        )
        .body(|p| {
            Some(json!({"cron": "0 0 1 1 *", "agent": p.agent, "input": "an intruder's schedule"}))
        })
        .creates(),
        entry(
            Method::PUT,
            "/v1/webhooks/{name}",
            TenantAdmin,
            Native,
            [401, 401, 401, 403, 201, 403],
        )
        .body(|p| {
            Some(json!({
                "description": "an intruder's webhook",
                "agent": p.agent,
                "signature": "github",
                "secret_env": "WEFT_WEBHOOK_BETA__MATRIX",
            }))
        })
        .creates(),
        // Writes to A's named volume, last: a writer of the tenant (bob) may write it, by
        // design, so these change it; tenant B finds nothing until it makes its own volume of
        // that name (the last entry). In order: a snapshot, an undo of A's change (the file it
        // made goes), a restore of A's snapshot (it comes back), a write and a delete of the
        // file, an empty import, and the volume's deletion; then bob makes it again.
        entry(
            Method::POST,
            "/v1/volumes/{name}/snapshots",
            AnyOf(&["volumes:write"]),
            Native,
            [401, 401, 401, 403, 404, 201],
        )
        .body(|_| Some(json!({"label": "an intruder's snapshot"})))
        .creates(),
        entry(
            Method::POST,
            "/v1/volumes/{name}/undo",
            AnyOf(&["volumes:write"]),
            Native,
            [401, 401, 401, 403, 404, 200],
        )
        .body(|p| Some(json!({"change_id": p.change}))),
        entry(
            Method::POST,
            "/v1/volumes/{name}/snapshots/{snapshot_id}/restore",
            AnyOf(&["volumes:write"]),
            Native,
            [401, 401, 401, 403, 404, 200],
        ),
        entry(
            Method::PUT,
            "/v1/volumes/{name}/files/{*path}",
            AnyOf(&["volumes:write"]),
            Native,
            [401, 401, 401, 403, 404, 200],
        )
        .body(|_| Some(json!("an intruder's file"))),
        entry(
            Method::DELETE,
            "/v1/volumes/{name}/files/{*path}",
            AnyOf(&["volumes:write"]),
            Native,
            [401, 401, 401, 403, 404, 200],
        ),
        entry(
            Method::POST,
            "/v1/volumes/{name}/import",
            AnyOf(&["volumes:write"]),
            Native,
            [401, 401, 401, 403, 404, 200],
        ),
        entry(
            Method::DELETE,
            "/v1/volumes/{name}",
            AnyOf(&["volumes:write"]),
            Native,
            [401, 401, 401, 403, 404, 200],
        ),
        entry(
            Method::POST,
            "/v1/volumes",
            AnyOf(&["volumes:write"]),
            Native,
            [401, 401, 401, 403, 201, 201],
        )
        .body(|p| Some(json!({"name": p.volume, "description": "an intruder's volume"})))
        .creates(),
    ]
}

/// `template` with its parameters filled from `p`.
fn fill(template: &str, p: &Params) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').expect("a closed parameter") + start;
        let value = match (&rest[start + 1..end], template) {
            ("id", t) if t.starts_with("/v1/runs/") => p.run.as_str(),
            ("id", t) if t.starts_with("/v1/tokens/") => p.token.as_str(),
            ("id", t) if t.starts_with("/v1/responses/") => p.response.as_str(),
            // A2A tasks are runs: A's task is alice's run (started with an A2A context).
            ("id", t) if t.starts_with("/a2a/tasks/") => p.run.as_str(),
            ("name", t) if t.starts_with("/v1/agents/") => p.agent.as_str(),
            ("name", t) if t.starts_with("/v1/skills/") => p.agent.as_str(),
            ("name", t) if t.starts_with("/v1/processes/") => p.agent.as_str(),
            ("name", t) if t.starts_with("/v1/mcp-servers/") => p.agent.as_str(),
            ("name", t) if t.starts_with("/v1/a2a-peers/") => p.agent.as_str(),
            ("name", t) if t.starts_with("/v1/hooks/") => p.agent.as_str(),
            ("name", t) if t.starts_with("/v1/schedules/") => p.agent.as_str(),
            ("name", t) if t.starts_with("/v1/webhooks/") => p.agent.as_str(),
            ("tenant", t) if t.starts_with("/v1/tenants/") => p.tenant.as_str(),
            // The receiver: A's webhook.
            ("tenant", t) if t.starts_with("/v1/_webhooks/") => p.tenant.as_str(),
            ("name", t) if t.starts_with("/v1/_webhooks/") => p.agent.as_str(),
            ("name", t) if t.starts_with("/v1/channels/") => p.channel.as_str(),
            ("name", t) if t.starts_with("/v1/volumes/") => p.volume.as_str(),
            ("*path", t) if t.starts_with("/v1/") => VOLUME_FILE,
            ("snapshot_id", t) if t.starts_with("/v1/volumes/") => p.snapshot.as_str(),
            ("snapshot_id", _) => p.run_snapshot.as_str(),
            ("interrupt_id", _) => INTERRUPT,
            // Plan routes: a version and a task any plan would have.
            ("version", t) if t.starts_with("/v1/runs/") => "1",
            ("task", _) => "a",
            // The web UI: one of the app's own routes.
            ("*path", _) => "runs",
            // Memory routes name alice's run scope.
            ("scope", _) => "run",
            ("scope_id", _) => p.run.as_str(),
            ("key", _) => MEMORY_KEY,
            (other, _) => panic!(
                "{template}: the matrix does not know what to put in `{{{other}}}`; teach `fill` which resource of tenant A it names"
            ),
        };
        out.push_str(value);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

// --- the route table --------------------------------------------------------------------------

/// The methods axum's `MethodRouter` has a slot for, in its `Debug` order.
const METHOD_SLOTS: [&str; 9] = [
    "get", "head", "delete", "options", "patch", "post", "put", "trace", "connect",
];

/// Every (METHOD, path template) of a router, read from its `Debug` output:
/// `Router { path_router: PathRouter { routes: {RouteId(n): MethodRouter(MethodRouter { get: …,
/// … }), …}, node: Node { paths: {RouteId(n): "/path", …} } }, fallback_router: … }`.
/// Any surprise is an error, never a shorter table.
fn parse_route_table(debug: &str) -> Result<BTreeSet<(String, String)>, String> {
    let fail = |what: &str| {
        format!(
            "cannot read the route table from axum's `Debug` of the router ({what}); its format changed (an axum upgrade?): update `parse_route_table`. The text was: {debug}"
        )
    };
    let (_, rest) = debug
        .split_once("path_router: PathRouter { routes: {")
        .ok_or_else(|| fail("no `path_router` routes"))?;
    let (routes, rest) = rest
        .split_once("}, node: Node { paths: {")
        .ok_or_else(|| fail("no `node` paths after the routes"))?;

    let mut methods: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for chunk in routes.split("RouteId(").skip(1) {
        let (id, endpoint) = chunk.split_once("): ").ok_or_else(|| fail("a route id"))?;
        let id: u64 = id.parse().map_err(|_| fail("a route id number"))?;
        let fields = endpoint
            .strip_prefix("MethodRouter(MethodRouter { ")
            .ok_or_else(|| {
                fail(&format!(
                    "route {id} is not a MethodRouter (a `route_service`?); the matrix needs to know its methods"
                ))
            })?;
        let mut served = Vec::new();
        for slot in METHOD_SLOTS {
            let at = format!("{slot}: ");
            let value = fields
                .split(", ")
                .find_map(|f| f.strip_prefix(&at))
                .ok_or_else(|| fail(&format!("route {id} has no `{slot}` slot")))?;
            match value {
                "None" => {}
                "Route" | "BoxedHandler" => served.push(slot.to_ascii_uppercase()),
                other => return Err(fail(&format!("route {id}: `{slot}: {other}`"))),
            }
        }
        if served.is_empty() {
            return Err(fail(&format!("route {id} serves no method")));
        }
        methods.insert(id, served);
    }

    let mut paths: BTreeMap<u64, String> = BTreeMap::new();
    let mut rest = rest;
    loop {
        let after = rest
            .strip_prefix("RouteId(")
            .ok_or_else(|| fail("a path entry"))?;
        let (id, after) = after.split_once("): \"").ok_or_else(|| fail("a path id"))?;
        let id: u64 = id.parse().map_err(|_| fail("a path id number"))?;
        let (path, after) = after.split_once('"').ok_or_else(|| fail("a closed path"))?;
        if path.contains('\\') || !path.starts_with('/') {
            return Err(fail(&format!("path {path:?}")));
        }
        paths.insert(id, path.to_owned());
        if let Some(more) = after.strip_prefix(", ") {
            rest = more;
        } else if after.starts_with('}') {
            break;
        } else {
            return Err(fail("the end of the paths"));
        }
    }

    if methods.is_empty() || methods.keys().ne(paths.keys()) {
        return Err(fail(&format!(
            "route ids {:?} do not match path ids {:?}",
            methods.keys().collect::<Vec<_>>(),
            paths.keys().collect::<Vec<_>>()
        )));
    }
    Ok(methods
        .into_iter()
        .flat_map(|(id, ms)| {
            let path = paths[&id].clone();
            ms.into_iter().map(move |m| (m, path.clone()))
        })
        .collect())
}

/// The gateway's router exactly as `weft_gateway::serve` builds it, on the fleet's config.
async fn gateway_router(f: &TestFleet) -> String {
    let jwt = weft::fleet::internal_jwt(&f.config);
    // Never called: building the router only needs channels, which connect lazily.
    let channel = weft_gateway::router_channel("http://127.0.0.1:9").unwrap();
    let state = weft_gateway::connect(&f.config, jwt, channel.clone(), channel)
        .await
        .unwrap();
    format!(
        "{:?}",
        weft_gateway::router(state, f.config.gateway.max_body_bytes)
    )
}

/// How the OpenAPI document names a served (method, path template): it has no catch-all
/// parameter (axum's `{*path}` is `{path}` there), and A2A's `POST /a2a/tasks/{id}:cancel`
/// is one axum route `/a2a/tasks/{id}` (a parameter is a whole segment in axum) whose handler
/// splits the action off the id.
fn as_documented(method: &str, path: &str) -> String {
    match (method, path) {
        ("POST", "/a2a/tasks/{id}") => "/a2a/tasks/{id}:cancel".to_owned(),
        _ => path.replace("{*", "{"),
    }
}

/// (method, path) pairs served but without an entry, and entries for nothing served.
fn compare(served: &BTreeSet<(String, String)>, keys: &BTreeSet<(String, String)>) -> Vec<String> {
    let mut out: Vec<String> = served
        .difference(keys)
        .map(|(m, p)| {
            format!(
                "{m} {p} is served but has no tenancy-matrix entry; add one to `expectations()` in services/weft/tests/tenancy_matrix.rs (and the route to the OpenAPI document)"
            )
        })
        .collect();
    out.extend(keys.difference(served).map(|(m, p)| {
        format!("{m} {p} has a tenancy-matrix entry but is not served; remove the entry")
    }));
    out
}

fn entry_keys(entries: &[Entry]) -> BTreeSet<(String, String)> {
    let mut keys = BTreeSet::new();
    for e in entries {
        assert!(
            keys.insert((e.method.to_string(), e.path.to_owned())),
            "two matrix entries for {} {}",
            e.method,
            e.path
        );
    }
    keys
}

// --- HTTP -----------------------------------------------------------------------------------

struct Answer {
    status: u16,
    content_type: String,
    allow: Option<String>,
    text: String,
    json: Value,
}

async fn send(
    f: &TestFleet,
    method: Method,
    target: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Answer {
    let mut req = f.http.request(method, format!("{}{target}", f.url));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(b);
    }
    let r = tokio::time::timeout(Duration::from_secs(20), req.send())
        .await
        .expect("an answer within 20 s")
        .unwrap();
    let status = r.status().as_u16();
    let header = |name: &str| {
        r.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = header("content-type").unwrap_or_default();
    let allow = header("allow");
    // A stream that should never have opened must not hang the matrix.
    let text = match tokio::time::timeout(Duration::from_secs(3), r.text()).await {
        Ok(t) => t.unwrap_or_default(),
        Err(_) => "<a body still streaming after 3 s>".to_owned(),
    };
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer {
        status,
        content_type,
        allow,
        text,
        json,
    }
}

/// Whether `body` is an error in `shape`, with the code `status` implies.
fn check_shape(shape: Shape, status: u16, a: &Answer) -> Result<(), String> {
    if matches!(shape, Shape::A2a) && status != 401 {
        return check_a2a_shape(status, a);
    }
    if !a.content_type.starts_with("application/json") {
        return Err(format!("content-type {:?}, not JSON", a.content_type));
    }
    let code = match status {
        401 => "unauthenticated",
        403 => "permission_denied",
        404 => "not_found",
        _ => return Ok(()),
    };
    let body = &a.json;
    let keys = |v: &Value| -> BTreeSet<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let err = &body["error"];
    let ok = match shape {
        Shape::Native | Shape::A2a => {
            keys(body) == BTreeSet::from(["error".to_owned()])
                && err["code"] == code
                && err["message"].is_string()
                && keys(err)
                    .iter()
                    .all(|k| ["code", "message", "param"].contains(&k.as_str()))
        }
        Shape::OpenAi => {
            keys(body) == BTreeSet::from(["error".to_owned()])
                && err["code"] == code
                && err["message"].is_string()
                && err["type"].is_string()
                && err.get("param").is_some()
        }
        Shape::Anthropic => {
            let kind = match status {
                401 => "authentication_error",
                403 => "permission_error",
                _ => "not_found_error",
            };
            body["type"] == "error" && err["type"] == kind && err["message"].is_string()
        }
    };
    ok.then_some(())
        .ok_or_else(|| format!("not a {shape:?} `{code}` error body"))
}

/// Whether `a` is an error of the A2A REST binding with the status `status`: a 403 says it is
/// weft's scope refusal (`weft_code` in its ErrorInfo), a 404 that no such task is visible.
fn check_a2a_shape(status: u16, a: &Answer) -> Result<(), String> {
    if !a.content_type.starts_with("application/a2a+json") {
        return Err(format!(
            "content-type {:?}, not application/a2a+json",
            a.content_type
        ));
    }
    let (name, reason, weft_code) = match status {
        400 => ("INVALID_ARGUMENT", None, None),
        403 => ("PERMISSION_DENIED", None, Some("permission_denied")),
        404 => ("NOT_FOUND", Some("TASK_NOT_FOUND"), None),
        _ => return Ok(()),
    };
    let body = &a.json;
    let err = &body["error"];
    let info = &err["details"][0];
    let keys: BTreeSet<&str> = err
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let ok = body.as_object().is_some_and(|o| o.len() == 1)
        && keys == BTreeSet::from(["code", "status", "message", "details"])
        && err["code"] == status
        && err["status"] == name
        && err["message"].is_string()
        && err["details"].as_array().is_some_and(|d| d.len() == 1)
        && info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
        && info["domain"] == "a2a-protocol.org"
        && reason.is_none_or(|r| info["reason"] == r)
        && info["reason"].is_string()
        && weft_code.is_none_or(|c| info["metadata"]["weft_code"] == c);
    ok.then_some(())
        .ok_or_else(|| format!("not an A2A REST `{name}` error body"))
}

// --- tenant A and the intruders ---------------------------------------------------------------

fn secret(what: &'static str, value: impl Into<String>, seen_by: &'static [Identity]) -> Secret {
    Secret {
        what,
        value: value.into(),
        seen_by,
    }
}

/// A string of tenant A that some identities may see.
struct Secret {
    what: &'static str,
    value: String,
    /// Who may see it (besides A's owners, who are not in the matrix).
    seen_by: &'static [Identity],
}

struct World {
    a: Params,
    ghost: Params,
    secrets: Vec<Secret>,
    /// alice, the owner of A's run (`runs:create`, `runs:read`, `llm:call`).
    alice: String,
    a_admin: String,
    victim_token: String,
    unknown: String,
    revoked: String,
    beta_admin: String,
    bob: String,
    run_events: usize,
    /// The tree hash of alice's run's volume, which nobody in the matrix may change.
    run_volume_tree: String,
}

async fn mint(f: &TestFleet, tenant: &str, subject: &str, name: &str, scopes: &[&str]) -> Value {
    let (s, t) = f
        .post(
            "/v1/tokens",
            &f.admin,
            json!({"name": name, "tenant": tenant, "subject": subject, "scopes": scopes}),
        )
        .await;
    assert_eq!(s, 201, "mint {tenant}/{subject} {scopes:?}: {t}");
    t
}

/// The secret of a token `mint` returned.
fn bearer(t: &Value) -> String {
    t["token"].as_str().unwrap().to_owned()
}

fn random_hex() -> String {
    weft_core::RunId::new().0.simple().to_string()
}

/// The world of the matrix, made through `f`; `via` is where the matrix sends its requests
/// (`f` itself, or another replica).
async fn set_up(f: &TestFleet, via: &TestFleet) -> World {
    let canary = &random_hex()[20..];
    let a_admin_subject = format!("acme-admin-{canary}");
    let alice_subject = format!("alice-{canary}");
    let a_admin = bearer(&mint(f, "acme", &a_admin_subject, "acme admin", &["tenant:admin"]).await);
    let alice = bearer(
        &mint(
            f,
            "acme",
            &alice_subject,
            "alice",
            &["runs:create", "runs:read", "llm:call"],
        )
        .await,
    );
    let victim = mint(
        f,
        "acme",
        &format!("victim-{canary}"),
        &format!("victim-token-{canary}"),
        &["llm:call"],
    )
    .await;

    let agent = format!("agent-{canary}");
    let r = f
        .http
        .put(format!("{}/v1/agents/{agent}", f.url))
        .bearer_auth(&a_admin)
        .json(&json!({
            "model": "mock-1",
            "system_prompt": format!("prompt-{canary}"),
            "description": format!("description-{canary}"),
            // The one skill of A's A2A agent card.
            "a2a": {"expose": true, "tags": [format!("a2a-tag-{canary}")]},
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    let agent_hash = v["version"].as_str().unwrap().to_owned();
    let r = f
        .http
        .put(format!("{}/v1/skills/{agent}", f.url))
        .bearer_auth(&a_admin)
        .json(&json!({
            "description": format!("skill-description-{canary}"),
            "body": format!("skill-body-{canary}"),
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    let skill_hash = v["version"].as_str().unwrap().to_owned();
    let r = f
        .http
        .put(format!("{}/v1/mcp-servers/{agent}", f.url))
        .bearer_auth(&a_admin)
        .json(&json!({
            "description": format!("mcp-description-{canary}"),
            "url": format!("https://mcp-{canary}.example/mcp"),
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    let mcp_hash = v["version"].as_str().unwrap().to_owned();
    let r = f
        .http
        .put(format!("{}/v1/processes/{agent}", f.url))
        .bearer_auth(&a_admin)
        .json(&json!({
            "description": format!("process-description-{canary}"),
            "persona": format!("process-persona-{canary}"),
            "phases": [{"id": "a", "description": format!("process-phase-{canary}")}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    let process_hash = v["version"].as_str().unwrap().to_owned();
    let r = f
        .http
        .put(format!("{}/v1/a2a-peers/{agent}", f.url))
        .bearer_auth(&a_admin)
        .json(&json!({
            "description": format!("peer-description-{canary}"),
            "card_url": format!("https://peer-{canary}.example/.well-known/agent-card.json"),
        }))
        .send()
        .await
        .unwrap();
    let s = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(s, 201, "PUT /v1/a2a-peers/{agent}: {v}");
    let a2a_peer_hash = v["version"].as_str().unwrap().to_owned();
    // A hook of A's, for an agent A never runs: never called.
    let r = f
        .http
        .put(format!("{}/v1/hooks/{agent}", f.url))
        .bearer_auth(&a_admin)
        .json(&json!({
            "description": format!("hook-description-{canary}"),
            "phase": "pre",
            "agents": ["nobody"],
            "tools": ["*"],
            "url": format!("https://hook-{canary}.example/pre"),
        }))
        .send()
        .await
        .unwrap();
    let s = r.status();
    let v: Value = r.json().await.unwrap();
    assert_eq!(s, 201, "PUT /v1/hooks/{agent}: {v}");
    let hook_hash = v["version"].as_str().unwrap().to_owned();
    // A schedule of A's agent that fires only on 1 January, so never during the matrix, and a
    // webhook starting A's agent. The webhook's secret is never set: no delivery can verify.
    let r = f
        .http
        .put(format!("{}/v1/schedules/{agent}", f.url))
        .bearer_auth(&a_admin)
        .json(&json!({
            "description": format!("schedule-description-{canary}"),
            "cron": "0 0 1 1 *",
            "agent": agent,
            "input": format!("schedule-input-{canary}"),
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    let schedule_hash = v["version"].as_str().unwrap().to_owned();
    let r = f
        .http
        .put(format!("{}/v1/webhooks/{agent}", f.url))
        .bearer_auth(&a_admin)
        .json(&json!({
            "description": format!("webhook-description-{canary}"),
            "signature": "github",
            "secret_env": "WEFT_WEBHOOK_ACME__MATRIX",
            "agent": agent,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    let webhook_hash = v["version"].as_str().unwrap().to_owned();

    // alice's run waits for input: no executor touches it, so any change is an intruder's. Its
    // A2A context makes it an A2A task too (the task id is the run id), A's task.
    let context = format!("context-{canary}");
    let (s, run) = f
        .post(
            "/v1/runs",
            &alice,
            json!({
                "agent": agent,
                "interactive": true,
                "metadata": {"note": format!("metadata-{canary}"), "a2a_context_id": context},
            }),
        )
        .await;
    assert_eq!(s, 201, "{run}");
    assert_eq!(run["status"], "awaiting_input", "{run}");
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    // alice gets her task, over both bindings, so the matrix's refusals are about a task that
    // exists.
    let (s, task) = via.get(&format!("/a2a/tasks/{run_id}"), &alice).await;
    assert_eq!(s, 200, "{task}");
    assert_eq!(task["id"], run_id.as_str(), "{task}");
    assert_eq!(task["contextId"], context.as_str(), "{task}");
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{task}"
    );
    let (s, rpc) = via
        .post(
            "/a2a/rpc",
            &alice,
            json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": run_id}}),
        )
        .await;
    assert_eq!(s, 200, "{rpc}");
    assert_eq!(rpc["result"]["id"], run_id.as_str(), "{rpc}");
    let (s, events) = f.get(&format!("/v1/runs/{run_id}/events"), &alice).await;
    assert_eq!(s, 200);
    let run_events = events["events"].as_array().unwrap().len();
    // Usage of tenant A.
    let messages = json!([{"role": "user", "content": format!("usage-{canary}")}]);
    let (s, _) = f
        .post(
            "/v1/chat/completions",
            &alice,
            json!({"model": "mock-1", "messages": messages}),
        )
        .await;
    assert_eq!(s, 200);
    // alice's stored response.
    let (s, resp) = f
        .post(
            "/v1/responses",
            &alice,
            json!({"model": "mock-1", "input": format!("response-{canary}")}),
        )
        .await;
    assert_eq!(s, 200, "{resp}");
    let response = resp["id"].as_str().unwrap().to_owned();

    // A note in alice's run memory, written by A's admin (alice's token has no memory scope).
    let r = f
        .http
        .put(format!("{}/v1/memory/run/{run_id}/{MEMORY_KEY}", f.url))
        .bearer_auth(&a_admin)
        .json(&json!({"value": format!("memory-{canary}")}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let revoked_token = mint(f, "acme", "revoked", "revoked", &["tenant:admin"]).await;
    let revoked = bearer(&revoked_token);
    // The replica the matrix goes through knows the token as valid before it is revoked.
    let (s, _) = via.get("/v1/me", &revoked).await;
    assert_eq!(s, 200, "a fresh token works on the replica the matrix uses");
    let r = f
        .http
        .delete(format!(
            "{}/v1/tokens/{}",
            f.url,
            revoked_token["id"].as_str().unwrap()
        ))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (s, _) = f.get("/v1/me", &revoked).await;
    assert_eq!(
        s, 401,
        "revocation takes effect on the replica that revoked"
    );
    // On another replica, within the documented bound (the revocation is broadcast on NATS).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (s, _) = via.get("/v1/me", &revoked).await;
        if s == 401 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a token revoked on one replica still works on another after 5 s ({s})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A tenant channel of A with one message (from a subject that is no secret).
    let channel = format!("chan-{canary}");
    let (s, c) = f
        .put(
            &format!("/v1/channels/{channel}"),
            &a_admin,
            json!({"scope": "tenant"}),
        )
        .await;
    assert_eq!(s, 201, "{c}");
    let publisher = bearer(&mint(f, "acme", "publisher", "publisher", &["channels:publish"]).await);
    let (s, published) = f
        .post(
            &format!("/v1/channels/{channel}/publish"),
            &publisher,
            json!({"payload": format!("message-{canary}")}),
        )
        .await;
    assert_eq!(s, 201, "{published}");
    let cursor = published["cursor"].as_str().unwrap().to_owned();

    // A named volume of A with one file, written by a subject that is no secret, and a
    // snapshot of it; and alice's run's own volume, written by A's admin, with a snapshot.
    let volume = format!("vol-{canary}");
    let writer = bearer(
        &mint(
            f,
            "acme",
            "volume-writer",
            "volume writer",
            &["volumes:read", "volumes:write"],
        )
        .await,
    );
    let (s, v) = f
        .post("/v1/volumes", &writer, json!({"name": volume}))
        .await;
    assert_eq!(s, 201, "{v}");
    let put_file = |path: String, token: String, content: String| {
        let req = f
            .http
            .put(format!("{}{path}", f.url))
            .bearer_auth(token)
            .body(content);
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap();
            v["id"].as_str().unwrap().to_owned()
        }
    };
    let change = put_file(
        format!("/v1/volumes/{volume}/files/{VOLUME_FILE}"),
        writer.clone(),
        format!("volume-file-{canary}"),
    )
    .await;
    let (s, snap) = f
        .post(
            &format!("/v1/volumes/{volume}/snapshots"),
            &writer,
            json!({}),
        )
        .await;
    assert_eq!(s, 201, "{snap}");
    let snapshot = snap["id"].as_str().unwrap().to_owned();
    let run_change = put_file(
        format!("/v1/runs/{run_id}/volume/files/{VOLUME_FILE}"),
        a_admin.clone(),
        format!("run-file-{canary}"),
    )
    .await;
    let (s, snap) = f
        .post(
            &format!("/v1/runs/{run_id}/volume/snapshots"),
            &a_admin,
            json!({}),
        )
        .await;
    assert_eq!(s, 201, "{snap}");
    let run_snapshot = snap["id"].as_str().unwrap().to_owned();
    let (s, v) = f.get(&format!("/v1/runs/{run_id}/volume"), &a_admin).await;
    assert_eq!(s, 200, "{v}");
    let run_volume_tree = v["tree_hash"].as_str().unwrap().to_owned();

    let beta_admin = bearer(&mint(f, "beta", "beta-admin", "beta admin", &["tenant:admin"]).await);
    let bob_scopes: Vec<&str> = TENANT_SCOPES
        .into_iter()
        .filter(|s| *s != "tenant:admin")
        .collect();
    let bob = bearer(&mint(f, "acme", "bob", "bob", &bob_scopes).await);

    let a = Params {
        tenant: "acme".into(),
        run: run_id.clone(),
        token: victim["id"].as_str().unwrap().to_owned(),
        agent: agent.clone(),
        agent_hash: agent_hash.clone(),
        skill_hash: skill_hash.clone(),
        mcp_hash: mcp_hash.clone(),
        process_hash: process_hash.clone(),
        schedule_hash: schedule_hash.clone(),
        webhook_hash: webhook_hash.clone(),
        channel: channel.clone(),
        cursor: cursor.clone(),
        volume: volume.clone(),
        change,
        snapshot: snapshot.clone(),
        run_change,
        run_snapshot: run_snapshot.clone(),
        response: response.clone(),
        a2a_peer_hash: a2a_peer_hash.clone(),
        hook_hash: hook_hash.clone(),
    };
    let ghost_hex = format!("{}{}", random_hex(), random_hex());
    let ghost = Params {
        tenant: format!("ghost-{}", &ghost_hex[..8]),
        run: weft_core::RunId::new().to_string(),
        token: weft_core::TokenId::new().to_string(),
        agent: format!("ghost-{}", &ghost_hex[8..16]),
        agent_hash: format!("sha256:{ghost_hex}"),
        skill_hash: format!("sha256:{}", ghost_hex.chars().rev().collect::<String>()),
        mcp_hash: format!("sha256:{}{}", &ghost_hex[32..], &ghost_hex[..32]),
        process_hash: format!("sha256:{}{}", &ghost_hex[40..], &ghost_hex[..40]),
        schedule_hash: format!("sha256:{}{}", &ghost_hex[16..], &ghost_hex[..16]),
        webhook_hash: format!("sha256:{}{}", &ghost_hex[48..], &ghost_hex[..48]),
        channel: format!("ghost-{}", &ghost_hex[16..24]),
        cursor: weft_substrate::channels::rules::Cursor {
            channel: 1 << 40,
            partition: 7,
            seq: 1,
        }
        .encode(),
        volume: format!("ghost-{}", &ghost_hex[24..32]),
        change: uuid::Uuid::now_v7().to_string(),
        snapshot: uuid::Uuid::now_v7().to_string(),
        run_change: uuid::Uuid::now_v7().to_string(),
        run_snapshot: uuid::Uuid::now_v7().to_string(),
        response: format!("resp_{}", &ghost_hex[..32]),
        a2a_peer_hash: format!("sha256:{}{}", &ghost_hex[56..], &ghost_hex[..56]),
        hook_hash: format!("sha256:{}{}", &ghost_hex[8..], &ghost_hex[..8]),
    };
    let victim_secret = bearer(&victim);
    use Identity::{MissingScope, OtherSubject};
    let secrets = vec![
        secret("A's agent name", agent, &[OtherSubject]),
        secret("A's agent hash", agent_hash, &[OtherSubject]),
        secret("A's skill hash", skill_hash, &[OtherSubject]),
        secret("A's MCP server hash", mcp_hash, &[OtherSubject]),
        secret("A's process hash", process_hash, &[OtherSubject]),
        secret(
            "A's process persona",
            format!("process-persona-{canary}"),
            &[OtherSubject],
        ),
        secret(
            "A's process phase",
            format!("process-phase-{canary}"),
            &[OtherSubject],
        ),
        secret("A's A2A peer hash", a2a_peer_hash, &[OtherSubject]),
        secret("A's hook hash", hook_hash, &[OtherSubject]),
        secret(
            "A's hook description",
            format!("hook-description-{canary}"),
            &[OtherSubject],
        ),
        secret(
            "A's hook URL",
            format!("https://hook-{canary}.example/pre"),
            &[OtherSubject],
        ),
        secret(
            "A's A2A peer description",
            format!("peer-description-{canary}"),
            &[OtherSubject],
        ),
        secret(
            "A's A2A peer card URL",
            format!("https://peer-{canary}.example/.well-known/agent-card.json"),
            &[OtherSubject],
        ),
        secret(
            "A's agent's A2A tag",
            format!("a2a-tag-{canary}"),
            &[OtherSubject],
        ),
        secret("A's schedule hash", schedule_hash, &[OtherSubject]),
        secret("A's webhook hash", webhook_hash, &[OtherSubject]),
        secret(
            "A's schedule input",
            format!("schedule-input-{canary}"),
            &[OtherSubject],
        ),
        secret(
            "A's webhook description",
            format!("webhook-description-{canary}"),
            &[OtherSubject],
        ),
        secret(
            "A's MCP server URL",
            format!("https://mcp-{canary}.example/mcp"),
            &[OtherSubject],
        ),
        secret(
            "A's skill body",
            format!("skill-body-{canary}"),
            &[OtherSubject],
        ),
        secret(
            "A's skill description",
            format!("skill-description-{canary}"),
            &[OtherSubject],
        ),
        secret(
            "A's system prompt",
            format!("prompt-{canary}"),
            &[OtherSubject],
        ),
        secret(
            "A's agent description",
            format!("description-{canary}"),
            &[OtherSubject],
        ),
        secret("A's volume name", volume, &[OtherSubject]),
        secret(
            "A's volume file",
            format!("volume-file-{canary}"),
            &[OtherSubject],
        ),
        secret("A's volume snapshot", snapshot, &[OtherSubject]),
        secret("alice's run volume file", format!("run-file-{canary}"), &[]),
        secret("alice's run volume snapshot", run_snapshot, &[]),
        secret("alice's run id", run_id, &[]),
        secret("alice's run metadata", format!("metadata-{canary}"), &[]),
        secret("alice's A2A task's context id", context, &[]),
        secret("alice's run memory", format!("memory-{canary}"), &[]),
        secret("alice's prompt", format!("usage-{canary}"), &[]),
        secret("alice's response", format!("response-{canary}"), &[]),
        secret("alice's response id", response, &[]),
        // The scope-less tokens are alice's own, so `/v1/me` may name her to them.
        secret("alice's subject", alice_subject, &[MissingScope]),
        secret("A's admin subject", a_admin_subject, &[]),
        secret("A's token id", a.token.clone(), &[]),
        secret("A's token name", format!("victim-token-{canary}"), &[]),
        secret(
            "A's token prefix",
            victim_secret.chars().take(12).collect::<String>(),
            &[],
        ),
        secret("A's channel name", channel, &[OtherSubject]),
        secret(
            "A's channel message",
            format!("message-{canary}"),
            &[OtherSubject],
        ),
        secret("A's channel cursor", cursor, &[OtherSubject]),
        secret("the canary", canary.to_owned(), &[]),
    ];
    World {
        a,
        ghost,
        secrets,
        alice,
        a_admin,
        victim_token: victim_secret,
        unknown: weft_auth::mint_token().secret,
        revoked,
        beta_admin,
        bob,
        run_events,
        run_volume_tree,
    }
}

/// A's secrets in `text` that `who` may not see and did not send itself. What it may see and
/// what it sent are removed first, so the canary (part of every secret) then catches any other
/// string of A's that the list above does not name.
fn leaks(w: &World, who: Identity, sent: &str, text: &str) -> Vec<&'static str> {
    let mut scrubbed = text.to_owned();
    for s in &w.secrets {
        if s.seen_by.contains(&who) || sent.contains(&s.value) {
            scrubbed = scrubbed.replace(&s.value, "");
        }
    }
    w.secrets
        .iter()
        .filter(|s| !s.seen_by.contains(&who) && !sent.contains(&s.value))
        .filter(|s| scrubbed.contains(&s.value))
        .map(|s| s.what)
        .collect()
}

// --- the tests --------------------------------------------------------------------------------

#[tokio::test]
async fn every_route_answers_every_identity_as_the_trust_model_says() {
    let f = TestFleet::start().await;
    matrix(&f, &f).await;
}

/// The same matrix across replicas: the world (tokens, the revocation, A's run and
/// definitions) is made through one fleet, and every request of the matrix goes to another set
/// of replicas of the same deployment (same database, NATS, Redis and internal key). The
/// revoked token was first seen as valid by the other replica, so its 401 there is the
/// revocation reaching it, not a cold cache.
#[tokio::test]
async fn every_route_answers_every_identity_across_replicas() {
    let f = TestFleet::start().await;
    let other = f.join(|_| {}).await;
    matrix(&f, &other).await;
    other.stop().await;
}

/// Sets the world up through `f` and sends every request of the matrix to `via`.
async fn matrix(f: &TestFleet, via: &TestFleet) {
    let entries = expectations();
    let keys = entry_keys(&entries);

    // 1. The route table, from the router itself, must be exactly the matrix's keys.
    let served = parse_route_table(&gateway_router(f).await).unwrap();
    let missing = compare(&served, &keys);
    assert!(missing.is_empty(), "{}", missing.join("\n"));

    let w = set_up(f, via).await;
    let mut failures: Vec<String> = Vec::new();

    // 2. The parse agrees with the live server: an unknown method on each path is a 405 whose
    // `Allow` lists the parsed methods (GET implies HEAD), so the table is what is served.
    let mut by_path: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (m, p) in &served {
        by_path.entry(p).or_default().insert(m.clone());
    }
    let probe = Method::from_bytes(b"WEFTPROBE").unwrap();
    for (path, methods) in &by_path {
        let a = send(via, probe.clone(), &fill(path, &w.ghost), None, None).await;
        let mut want = methods.clone();
        if want.contains("GET") {
            want.insert("HEAD".into());
        }
        let allow: BTreeSet<String> = a
            .allow
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(|m| m.trim().to_owned())
            .filter(|m| !m.is_empty())
            .collect();
        if a.status != 405 || allow != want {
            failures.push(format!(
                "route table: WEFTPROBE {path} → {} Allow {allow:?}, the parsed table says {want:?}",
                a.status
            ));
        }
    }

    // 3. The served OpenAPI document lists exactly the same operations, and marks exactly the
    // public entries as needing no token.
    let doc = send(via, Method::GET, "/v1/openapi.json", None, None)
        .await
        .json;
    let mut documented = BTreeSet::new();
    let mut public_in_doc = BTreeSet::new();
    for (path, ops) in doc["paths"]
        .as_object()
        .expect("paths in the OpenAPI document")
    {
        for (m, op) in ops.as_object().into_iter().flatten() {
            if METHOD_SLOTS.contains(&m.as_str()) {
                let key = (m.to_ascii_uppercase(), path.clone());
                if op["security"].as_array().is_some_and(Vec::is_empty) {
                    public_in_doc.insert(key.clone());
                }
                documented.insert(key);
            }
        }
    }
    let served_doc: BTreeSet<(String, String)> = served
        .iter()
        .map(|(m, p)| (m.clone(), as_documented(m, p)))
        .collect();
    for (m, p) in served_doc.difference(&documented) {
        failures.push(format!("OpenAPI: {m} {p} is served but not documented"));
    }
    for (m, p) in documented.difference(&served_doc) {
        failures.push(format!("OpenAPI: {m} {p} is documented but not served"));
    }
    let public_in_matrix: BTreeSet<_> = entries
        .iter()
        .filter(|e| matches!(e.access, Access::Public))
        .map(|e| {
            (
                e.method.to_string(),
                as_documented(e.method.as_str(), e.path),
            )
        })
        .collect();
    if public_in_doc != public_in_matrix {
        failures.push(format!(
            "OpenAPI: routes documented without security {public_in_doc:?}, public in the matrix {public_in_matrix:?}"
        ));
    }

    // 4. The matrix.
    let mut scope_tokens: BTreeMap<Vec<&str>, String> = BTreeMap::new();
    let mut cases = 0;
    let mut oracle_checks = 0;
    for e in &entries {
        let scopes = e.access.missing_scope_token_scopes();
        if !scope_tokens.contains_key(&scopes) {
            let alice_subject = w
                .secrets
                .iter()
                .find(|s| s.what == "alice's subject")
                .unwrap();
            let t = mint(f, "acme", &alice_subject.value, "scope-less", &scopes).await;
            scope_tokens.insert(scopes.clone(), bearer(&t));
        }
        let target = |p: &Params| format!("{}{}", fill(e.path, p), (e.query)(p));
        for (who, expect) in IDENTITIES.into_iter().zip(e.expect) {
            cases += 1;
            let token = match who {
                Identity::NoToken => None,
                Identity::UnknownToken => Some(w.unknown.as_str()),
                Identity::RevokedToken => Some(w.revoked.as_str()),
                Identity::MissingScope => Some(scope_tokens[&scopes].as_str()),
                Identity::OtherTenant => Some(w.beta_admin.as_str()),
                Identity::OtherSubject => Some(w.bob.as_str()),
            };
            let (url, body) = (target(&w.a), (e.body)(&w.a));
            let a = send(via, e.method.clone(), &url, token, body.as_ref()).await;
            let case = format!("{} {} as {who:?} ({url})", e.method, e.path);
            if a.status == 405
                || a.json["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("no route for"))
            {
                failures.push(format!(
                    "{case}: answered by the router's fallback, not by a handler: {}",
                    a.text
                ));
            }
            if a.status != expect {
                failures.push(format!(
                    "{case}: got {}, expected {expect}: {}",
                    a.status, a.text
                ));
            }
            if a.status >= 400
                && let Err(why) = check_shape(e.shape, a.status, &a)
            {
                failures.push(format!("{case}: {why}: {}", a.text));
            }
            let sent = format!(
                "{url} {}",
                body.as_ref().map(Value::to_string).unwrap_or_default()
            );
            let leaked = leaks(&w, who, &sent, &a.text);
            if !leaked.is_empty() {
                failures.push(format!("{case}: the answer leaks {leaked:?}: {}", a.text));
            }
            if a.status == expect
                && let Err(why) = (e.check)(who, &a.json)
            {
                failures.push(format!("{case}: {why}: {}", a.text));
            }
            // No existence oracle: to tenant B, and wherever the answer is "not found" (or, on
            // a route that refuses in a 200 body, any 200), A's resources answer like ones that
            // never were.
            let (ghost_url, ghost_body) = (target(&w.ghost), (e.body)(&w.ghost));
            if (who == Identity::OtherTenant
                || expect == 404
                || (e.refuses_in_body && expect == 200))
                && (ghost_url != url || ghost_body != body)
            {
                oracle_checks += 1;
                let g = send(
                    via,
                    e.method.clone(),
                    &ghost_url,
                    token,
                    ghost_body.as_ref(),
                )
                .await;
                if let Some(status) = e.existence_visible {
                    // Visible by design: the ghost gets its own status, with an opaque error
                    // that names nothing of the request.
                    let opaque = check_shape(e.shape, g.status, &g).is_ok()
                        && w.ghost.normalise(&g.text) == g.text;
                    if g.status != status || !opaque {
                        failures.push(format!(
                            "{case}: about a ghost {} {}, expected an opaque {status}",
                            g.status, g.text
                        ));
                    }
                } else {
                    let same_body = (e.creates && (200..300).contains(&a.status))
                        || w.a.normalise(&a.text) == w.ghost.normalise(&g.text);
                    if g.status != a.status || !same_body {
                        failures.push(format!(
                            "{case}: an existence oracle: about A's resource {} {}, about a ghost {} {}",
                            a.status, a.text, g.status, g.text
                        ));
                    }
                }
            }
        }
    }

    // 5. Nothing of A changed.
    let (s, me) = f.get("/v1/me", &w.victim_token).await;
    if s != 200 {
        failures.push(format!(
            "A's token no longer works after the matrix: {s} {me}"
        ));
    }
    let (s, run) = f.get(&format!("/v1/runs/{}", w.a.run), &w.alice).await;
    let (_, events) = f
        .get(&format!("/v1/runs/{}/events", w.a.run), &w.alice)
        .await;
    let n = events["events"].as_array().map_or(0, Vec::len);
    if s != 200 || run["status"] != "awaiting_input" || n != w.run_events {
        failures.push(format!(
            "alice's run changed during the matrix: {s} {run}, {n} events (was {})",
            w.run_events
        ));
    }
    let (s, agent) = f
        .get(&format!("/v1/agents/{}", w.a.agent), &w.a_admin)
        .await;
    let (_, versions) = f
        .get(&format!("/v1/agents/{}/versions", w.a.agent), &w.a_admin)
        .await;
    if s != 200
        || agent["version"] != w.a.agent_hash.as_str()
        || agent["retired"] != false
        || versions["data"].as_array().map_or(0, Vec::len) != 1
    {
        failures.push(format!(
            "A's agent changed during the matrix: {s} {agent} {versions}"
        ));
    }
    let (s, skill) = f
        .get(&format!("/v1/skills/{}", w.a.agent), &w.a_admin)
        .await;
    let (_, versions) = f
        .get(&format!("/v1/skills/{}/versions", w.a.agent), &w.a_admin)
        .await;
    if s != 200
        || skill["version"] != w.a.skill_hash.as_str()
        || skill["retired"] != false
        || versions["data"].as_array().map_or(0, Vec::len) != 1
    {
        failures.push(format!(
            "A's skill changed during the matrix: {s} {skill} {versions}"
        ));
    }
    let (s, server) = f
        .get(&format!("/v1/mcp-servers/{}", w.a.agent), &w.a_admin)
        .await;
    let (_, versions) = f
        .get(
            &format!("/v1/mcp-servers/{}/versions", w.a.agent),
            &w.a_admin,
        )
        .await;
    if s != 200
        || server["version"] != w.a.mcp_hash.as_str()
        || server["retired"] != false
        || versions["data"].as_array().map_or(0, Vec::len) != 1
    {
        failures.push(format!(
            "A's MCP server changed during the matrix: {s} {server} {versions}"
        ));
    }
    let (s, process) = f
        .get(&format!("/v1/processes/{}", w.a.agent), &w.a_admin)
        .await;
    let (_, versions) = f
        .get(&format!("/v1/processes/{}/versions", w.a.agent), &w.a_admin)
        .await;
    if s != 200
        || process["version"] != w.a.process_hash.as_str()
        || process["retired"] != false
        || versions["data"].as_array().map_or(0, Vec::len) != 1
    {
        failures.push(format!(
            "A's process changed during the matrix: {s} {process} {versions}"
        ));
    }
    for (kind, hash) in [
        ("schedules", &w.a.schedule_hash),
        ("webhooks", &w.a.webhook_hash),
        ("a2a-peers", &w.a.a2a_peer_hash),
        ("hooks", &w.a.hook_hash),
    ] {
        let (s, def) = f
            .get(&format!("/v1/{kind}/{}", w.a.agent), &w.a_admin)
            .await;
        let (_, versions) = f
            .get(&format!("/v1/{kind}/{}/versions", w.a.agent), &w.a_admin)
            .await;
        if s != 200
            || def["version"] != hash.as_str()
            || def["retired"] != false
            || versions["data"].as_array().map_or(0, Vec::len) != 1
        {
            failures.push(format!(
                "A's {kind} definition changed during the matrix: {s} {def} {versions}"
            ));
        }
    }
    // Nobody wrote alice's run's volume.
    let (s, v) = f
        .get(&format!("/v1/runs/{}/volume", w.a.run), &w.a_admin)
        .await;
    if s != 200 || v["tree_hash"] != w.run_volume_tree.as_str() || v["seq"] != 1 {
        failures.push(format!(
            "alice's run volume changed during the matrix: {s} {v} (was {})",
            w.run_volume_tree
        ));
    }
    // Nobody paused, retired or fired A's schedule.
    let (s, state) = f
        .get(&format!("/v1/schedules/{}/state", w.a.agent), &w.a_admin)
        .await;
    if s != 200
        || state["paused"] != false
        || state["retired"] != false
        || state["fire_count"] != 0
        || state["next_fire_at"].is_null()
    {
        failures.push(format!(
            "A's schedule changed state during the matrix: {s} {state}"
        ));
    }
    // Every delivery to A's webhook was refused as unsigned; none started anything.
    let (s, deliveries) = f
        .get(
            &format!("/v1/webhooks/{}/deliveries", w.a.agent),
            &w.a_admin,
        )
        .await;
    // Unsigned deliveries are counted apart from the verdicts of verified ones.
    let verified = deliveries["data"].as_array().map_or(usize::MAX, Vec::len);
    let refused = deliveries["rejected"]["unauthorized"].as_u64().unwrap_or(0);
    if s != 200 || verified != 0 || refused == 0 {
        failures.push(format!(
            "A's webhook took a delivery during the matrix: {s} {deliveries}"
        ));
    }

    let summary = format!(
        "tenancy matrix: {} routes × {} identities = {cases} cases (+{oracle_checks} ghost comparisons, {} route-table probes)",
        entries.len(),
        IDENTITIES.len(),
        by_path.len()
    );
    eprintln!("{summary}");
    assert!(
        failures.is_empty(),
        "{summary}: {} failures\n{}",
        failures.len(),
        failures.join("\n")
    );
}
