//! The driver conformance suite: the same cases stamped out for every provider kind by one macro,
//! each run against a local fake upstream that replays that provider's recorded wire format
//! (`weft_testkit::FixtureServer`), or, for the `mock` provider, against the mock itself.
//!
//! Cases (model is always `m`; `max_retries` 0):
//! - `text` / `stream_text`: system "Be brief." + user "Say hello." → `text.json` / `text.stream`;
//!   text "Hello from <kind>!", `Finish(Stop)`, exactly one `Usage` equal to the manifest's.
//! - `tool_call`: tools `get_weather {city}` and `get_time {tz}`, user "Weather in Paris?", once
//!   non-streamed (`tool_call.json`) and once streamed (`tool_call.stream`); one `get_weather` call
//!   whose assembled arguments parse to `{"city":"Paris"}`, `Finish(ToolCalls)`.
//! - `tool_round_trip`: the call and its result (id `call.1/x`, which every driver must normalise
//!   with `tool_call_id`) sent back → `after_tool.json`; text "It is 18°C and sunny in Paris.".
//! - `parallel_tool_calls`: streamed → `parallel_tools.stream`; `get_weather` then `get_time`.
//! - `usage`: `text.json`, `text.stream`, `tool_call.stream`: exactly one `Usage` each.
//! - `rate_limited`: 429 with `Retry-After: 7` and `error_429.json`; `RateLimited`, 7 s, retryable,
//!   before any event.
//! - `server_error`: 5xx with `error_500.json` (the status is the body's numeric `error.code` when
//!   it has a 5xx one, else 500); retryable `UpstreamError` before any event.
//! - `broken_stream`: `text.stream` cut after half its bytes, then the connection aborted; the
//!   stream ends in an `UpstreamError` and never finishes.
//! - `malformed`: 200 with `malformed.stream`; an `UpstreamError` before or inside the stream, and
//!   never a `Finish`.
//!
//! Every well-formed answer must be: deltas and tool calls, then exactly one `Usage`, then exactly
//! one `Finish`, the last event. Every tool-call id a driver emits matches
//! `^[a-zA-Z0-9_-]{1,40}$`.
//!
//! Fixtures live in `tests/fixtures/<kind>/`: `README.md` (where each file came from), the bodies
//! above, and `manifest.json`:
//! `{"usage": {"<file>": {"prompt_tokens", "completion_tokens", "cache_read_tokens",
//! ["cache_write_tokens" (absent = 0), "total_tokens" (absent = prompt + completion)]}},
//! "request_expect": {"<case>": {"<JSON pointer>": value}},
//! "path_expect": {"<case>": "<substring of path+query>"}, "tool_ids_sent": bool}`.
//! `request_expect` and `path_expect` are checked against every upstream request the case makes
//! (`tool_call` makes a non-streamed and a streamed one).
//!
//! A driver may declare a case it cannot pass in its `UNSUPPORTED` list, with a reason; the case
//! then prints the reason and passes. A kind without fixtures fails loudly.
//!
//! Adding a provider kind: add it to `weft_testkit::Kind` and to [`provider_config`], put its
//! fixtures in `tests/fixtures/<kind>/`, and add one line `conformance!(<kind>);` at the bottom.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Value, json};
use weft_config::{HttpProviderConfig, ProviderConfig};
use weft_core::message::{ContentBlock, FinishReason, Message, Role, ToolSpec, Usage};
use weft_core::{Error, ErrorCode};
use weft_router::providers::{Case, Driver, ProviderError, tool_call_id};
use weft_router::{ChatEvent, ChatRequest};
use weft_testkit::{FixtureServer, Kind, RecordedRequest, Serve};

const MODEL: &str = "m";
/// The id of the tool call in `tool_round_trip`: invalid for most providers on purpose.
const RAW_TOOL_ID: &str = "call.1/x";
/// Longest a single call (answer included) may take before the case fails as hung.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

fn weather() -> (&'static str, Value) {
    ("get_weather", json!({"city": "Paris"}))
}

fn time() -> (&'static str, Value) {
    ("get_time", json!({"tz": "Europe/Paris"}))
}

// ---------------------------------------------------------------------------------------------
// Targets: what a case runs against.

/// A driver under test and, for HTTP kinds, the fixture server it talks to.
struct Target {
    name: &'static str,
    driver: Driver,
    /// `None` for the mock, which has no upstream.
    http: Option<Http>,
}

struct Http {
    kind: Kind,
    server: FixtureServer,
    manifest: Value,
}

/// The provider config of `kind` pointing at `h`.
fn provider_config(kind: Kind, h: HttpProviderConfig) -> ProviderConfig {
    match kind {
        Kind::Openai => ProviderConfig::Openai(h),
        Kind::Anthropic => ProviderConfig::Anthropic(h),
        Kind::Gemini => ProviderConfig::Gemini(h),
        Kind::Deepseek => ProviderConfig::Deepseek(h),
        Kind::Ollama => ProviderConfig::Ollama(h),
    }
}

impl Target {
    async fn new(name: &'static str, case: Case) -> Self {
        if name == "mock" {
            return Self {
                name,
                driver: mock_setup::driver(case),
                http: None,
            };
        }
        let kind = Kind::parse(name).unwrap_or_else(|| {
            panic!("`{name}` is not a provider kind weft_testkit::Kind knows; add it there")
        });
        let dir = FixtureServer::fixture_dir(env!("CARGO_MANIFEST_DIR"), kind);
        let manifest_path = dir.join("manifest.json");
        let manifest_text = std::fs::read_to_string(&manifest_path).unwrap_or_else(|e| {
            panic!(
                "{name}: fixture manifest {} is missing ({e}); every provider kind needs \
                 tests/fixtures/{name}/ with manifest.json, README.md and the response bodies \
                 listed at the top of tests/conformance.rs",
                manifest_path.display()
            )
        });
        let manifest: Value = serde_json::from_str(&manifest_text)
            .unwrap_or_else(|e| panic!("{name}: {} is not JSON: {e}", manifest_path.display()));
        assert!(
            manifest["usage"].is_object(),
            "{name}: {} has no `usage` object",
            manifest_path.display()
        );
        assert!(
            dir.join("README.md").is_file(),
            "{name}: {} has no README.md saying where each fixture came from",
            dir.display()
        );
        let server = FixtureServer::start(kind, dir).await;
        let cfg = HttpProviderConfig {
            models: vec![MODEL.to_owned()],
            max_retries: 0,
            backoff_ms: 1,
            first_byte_timeout_secs: 5,
            ..HttpProviderConfig::new(server.base_url())
        };
        let driver = Driver::new("up", &provider_config(kind, cfg))
            .unwrap_or_else(|e| panic!("{name}: building the driver failed: {e}"));
        Self {
            name,
            driver,
            http: Some(Http {
                kind,
                server,
                manifest,
            }),
        }
    }

    /// The driver's reason for not supporting `case`, if it declares one.
    fn unsupported(&self, case: Case) -> Option<&'static str> {
        self.driver
            .unsupported()
            .iter()
            .find(|u| u.case == case)
            .map(|u| u.reason)
    }

    /// Queues the upstream's next answer, after checking its fixture exists.
    fn serve(&self, serve: Serve) {
        let Some(h) = &self.http else { return };
        let path = h.server.dir().join(&serve.file);
        assert!(
            path.is_file(),
            "{}: fixture {} is missing; add it (the provider's real wire format) and say where it \
             came from in README.md",
            self.name,
            path.display()
        );
        h.server.push(serve);
    }

    /// The text the driver must produce for an answer served from `file`.
    fn expected_text(&self, file: &str) -> String {
        match (&self.http, file) {
            (None, _) => mock_setup::expected_text(file).to_owned(),
            (Some(_), "after_tool.json") => "It is 18°C and sunny in Paris.".to_owned(),
            (Some(h), _) => format!("Hello from {}!", h.kind.name()),
        }
    }

    /// Checks the one `Usage` of an answer served from `file`.
    fn check_usage(&self, file: &str, usage: &Usage) {
        let Some(h) = &self.http else {
            return mock_setup::check_usage(usage);
        };
        let m = &h.manifest["usage"][file];
        assert!(
            m.is_object(),
            "{}: manifest.json has no usage for `{file}`",
            self.name
        );
        let field = |k: &str| m[k].as_u64().unwrap_or(0);
        let (p, c) = (field("prompt_tokens"), field("completion_tokens"));
        let want = Usage {
            prompt_tokens: p,
            completion_tokens: c,
            total_tokens: m["total_tokens"].as_u64().unwrap_or(p + c),
            cache_read_tokens: field("cache_read_tokens"),
            cache_write_tokens: field("cache_write_tokens"),
        };
        assert_eq!(
            *usage, want,
            "{}: usage reported for `{file}` (left) differs from manifest.json (right); the \
             manifest's fields are prompt_tokens (cached included), completion_tokens, \
             cache_read_tokens and cache_write_tokens (absent = 0), total_tokens (absent = \
             prompt + completion)",
            self.name
        );
    }

    /// Adds what makes the mock call `calls` (its `#mock` script); HTTP kinds need nothing.
    fn script_tool_calls(&self, req: &mut ChatRequest, calls: &[(&str, Value)]) {
        if self.http.is_none() {
            mock_setup::script(req, calls);
        }
    }

    /// The status of the `server_error` case: the 5xx code in the error body when there is
    /// one (Gemini's `error.code`), else 500.
    fn server_error_status(&self) -> u16 {
        let Some(h) = &self.http else { return 500 };
        std::fs::read(h.server.dir().join("error_500.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| v.pointer("/error/code").and_then(Value::as_u64))
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| (500..600).contains(c))
            .unwrap_or(500)
    }

    /// Calls the driver and collects its answer.
    async fn call(&self, req: &ChatRequest) -> (Outcome, Vec<RecordedRequest>) {
        let before = self.http.as_ref().map_or(0, |h| h.server.requests().len());
        let outcome = tokio::time::timeout(CALL_TIMEOUT, async {
            match self.driver.chat(MODEL, req).await {
                Err(e) => Outcome::Refused(e),
                Ok(mut stream) => {
                    let mut events = Vec::new();
                    let mut error = None;
                    while let Some(item) = stream.next().await {
                        match item {
                            Ok(ev) => events.push(ev),
                            Err(e) => {
                                error = Some(e);
                                break;
                            }
                        }
                    }
                    Outcome::Streamed { events, error }
                }
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{}: the call did not finish within {CALL_TIMEOUT:?}",
                self.name
            )
        });
        let sent = self
            .http
            .as_ref()
            .map(|h| h.server.requests().split_off(before))
            .unwrap_or_default();
        if self.http.is_some() {
            assert_eq!(
                sent.len(),
                1,
                "{}: expected exactly one upstream request (max_retries is 0), got {}",
                self.name,
                sent.len()
            );
        }
        (outcome, sent)
    }

    /// Checks the manifest's `request_expect` and `path_expect` for `case` on `sent`.
    fn check_requests(&self, case: &str, sent: &[RecordedRequest]) {
        let Some(h) = &self.http else { return };
        for r in sent {
            if let Some(expect) = h.manifest["request_expect"][case].as_object() {
                for (pointer, want) in expect {
                    let got = r.body.pointer(pointer);
                    assert_eq!(
                        got,
                        Some(want),
                        "{}: case `{case}`: upstream request body at `{pointer}` should be {want}, \
                         got {got:?}; the body was:\n{}",
                        self.name,
                        serde_json::to_string_pretty(&r.body).unwrap_or_default()
                    );
                }
            }
            if let Some(sub) = h.manifest["path_expect"][case].as_str() {
                assert!(
                    r.path.contains(sub),
                    "{}: case `{case}`: upstream path `{}` should contain `{sub}`",
                    self.name,
                    r.path
                );
            }
        }
    }

    fn tool_ids_sent(&self) -> bool {
        self.http
            .as_ref()
            .is_some_and(|h| h.manifest["tool_ids_sent"].as_bool().unwrap_or(true))
    }
}

/// What a call came to.
enum Outcome {
    /// `chat` failed before any event.
    Refused(ProviderError),
    /// `chat` succeeded; the events until the stream ended or failed.
    Streamed {
        events: Vec<ChatEvent>,
        error: Option<Error>,
    },
}

// ---------------------------------------------------------------------------------------------
// Requests.

fn msg(role: Role, content: Vec<ContentBlock>) -> Message {
    Message {
        role,
        content,
        name: None,
    }
}

fn text_request(stream: bool) -> ChatRequest {
    ChatRequest {
        model: MODEL.to_owned(),
        messages: vec![
            msg(Role::System, vec![ContentBlock::text("Be brief.")]),
            msg(Role::User, vec![ContentBlock::text("Say hello.")]),
        ],
        stream,
        ..Default::default()
    }
}

fn tools() -> Vec<ToolSpec> {
    let tool = |name: &str, description: &str, param: &str| ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {param: {"type": "string"}},
            "required": [param],
        }),
    };
    vec![
        tool("get_weather", "Current weather in a city", "city"),
        tool("get_time", "Current time in a time zone", "tz"),
    ]
}

fn tool_request(stream: bool, user: &str) -> ChatRequest {
    ChatRequest {
        model: MODEL.to_owned(),
        messages: vec![msg(Role::User, vec![ContentBlock::text(user)])],
        tools: tools(),
        stream,
        ..Default::default()
    }
}

fn round_trip_request() -> ChatRequest {
    let (name, args) = weather();
    ChatRequest {
        model: MODEL.to_owned(),
        messages: vec![
            msg(Role::User, vec![ContentBlock::text("Weather in Paris?")]),
            msg(
                Role::Assistant,
                vec![ContentBlock::ToolUse {
                    id: RAW_TOOL_ID.to_owned(),
                    name: name.to_owned(),
                    input_json: args.to_string(),
                }],
            ),
            msg(
                Role::Tool,
                vec![ContentBlock::ToolResult {
                    tool_use_id: RAW_TOOL_ID.to_owned(),
                    content: vec![ContentBlock::text("18C sunny")],
                    is_error: false,
                }],
            ),
        ],
        tools: tools(),
        stream: false,
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Checks on answers.

/// The events of a complete answer: no error, exactly one `Usage`, exactly one `Finish` (the last
/// event, after the usage), no router-only events. Returns the events, the usage and the finish.
fn complete(name: &str, what: &str, outcome: Outcome) -> (Vec<ChatEvent>, Usage, FinishReason) {
    let (events, error) = match outcome {
        Outcome::Refused(e) => panic!(
            "{name}: {what}: the call failed before any event: {:?} {} (retryable {})",
            e.error.code, e.error.message, e.retryable
        ),
        Outcome::Streamed { events, error } => (events, error),
    };
    if let Some(e) = error {
        panic!(
            "{name}: {what}: the stream failed: {:?} {}; events before it: {events:?}",
            e.code, e.message
        );
    }
    let usages: Vec<(usize, Usage)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            ChatEvent::Usage(u) => Some((i, *u)),
            _ => None,
        })
        .collect();
    let finishes: Vec<(usize, FinishReason)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            ChatEvent::Finish(f) => Some((i, *f)),
            _ => None,
        })
        .collect();
    assert_eq!(
        usages.len(),
        1,
        "{name}: {what}: expected exactly one Usage event, got {}: {events:?}",
        usages.len()
    );
    assert_eq!(
        finishes.len(),
        1,
        "{name}: {what}: expected exactly one Finish event, got {}: {events:?}",
        finishes.len()
    );
    let (ui, usage) = usages[0];
    let (fi, finish) = finishes[0];
    assert_eq!(
        fi,
        events.len() - 1,
        "{name}: {what}: Finish must be the last event: {events:?}"
    );
    assert!(
        ui < fi,
        "{name}: {what}: Usage must come before Finish: {events:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, ChatEvent::ProviderChosen { .. } | ChatEvent::Fallback(_))),
        "{name}: {what}: drivers never emit ProviderChosen or Fallback: {events:?}"
    );
    (events, usage, finish)
}

fn text_of(events: &[ChatEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

/// A tool call assembled from its start and argument deltas.
#[derive(Debug)]
struct Call {
    index: u32,
    id: String,
    name: String,
    arguments: String,
}

/// Tool calls assembled per index, in the order they started.
fn tool_calls(name: &str, events: &[ChatEvent]) -> Vec<Call> {
    let mut calls: Vec<Call> = Vec::new();
    for e in events {
        match e {
            ChatEvent::ToolCallStart { index, id, name: n } => {
                assert!(
                    !calls.iter().any(|c| c.index == *index),
                    "{name}: tool call index {index} started twice: {events:?}"
                );
                calls.push(Call {
                    index: *index,
                    id: id.clone(),
                    name: n.clone(),
                    arguments: String::new(),
                });
            }
            ChatEvent::ToolCallDelta { index, arguments } => {
                let call = calls
                    .iter_mut()
                    .find(|c| c.index == *index)
                    .unwrap_or_else(|| {
                        panic!(
                            "{name}: arguments for tool call {index} before its start: {events:?}"
                        )
                    });
                call.arguments.push_str(arguments);
            }
            _ => {}
        }
    }
    calls
}

fn valid_tool_id(id: &str) -> bool {
    (1..=40).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks the assembled calls against `want` (name, arguments), in order.
fn check_calls(name: &str, what: &str, events: &[ChatEvent], want: &[(&str, Value)]) {
    let calls = tool_calls(name, events);
    assert_eq!(
        calls.len(),
        want.len(),
        "{name}: {what}: expected {} tool call(s), got {calls:?}",
        want.len()
    );
    for (call, (n, args)) in calls.iter().zip(want) {
        assert_eq!(call.name, *n, "{name}: {what}: tool call name: {calls:?}");
        let parsed: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|e| {
            panic!(
                "{name}: {what}: arguments of {n} do not parse as JSON ({e}): {:?}",
                call.arguments
            )
        });
        assert_eq!(parsed, *args, "{name}: {what}: arguments of {n}");
        assert!(
            valid_tool_id(&call.id),
            "{name}: {what}: tool call id {:?} does not match ^[a-zA-Z0-9_-]{{1,40}}$",
            call.id
        );
    }
    for (i, a) in calls.iter().enumerate() {
        assert!(
            !calls[i + 1..].iter().any(|b| b.id == a.id),
            "{name}: {what}: tool call ids must be distinct: {calls:?}"
        );
    }
}

fn refused(name: &str, what: &str, outcome: Outcome) -> ProviderError {
    match outcome {
        Outcome::Refused(e) => e,
        Outcome::Streamed { events, error } => panic!(
            "{name}: {what}: expected an error before any event, got events {events:?} then {error:?}"
        ),
    }
}

/// An error before or inside the stream, with no `Finish`. Returns the error.
fn failed(name: &str, what: &str, outcome: Outcome) -> Error {
    match outcome {
        Outcome::Refused(e) => e.error,
        Outcome::Streamed { events, error } => {
            assert!(
                !events.iter().any(|e| matches!(e, ChatEvent::Finish(_))),
                "{name}: {what}: a failed answer must never finish: {events:?}"
            );
            error.unwrap_or_else(|| {
                panic!("{name}: {what}: the stream ended without an error: {events:?}")
            })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The cases.

async fn run(name: &'static str, case: Case) {
    let t = Target::new(name, case).await;
    if let Some(reason) = t.unsupported(case) {
        eprintln!("{name}: case {case:?} is declared unsupported: {reason}");
        return;
    }
    match case {
        Case::Text => text(&t, "text", false).await,
        Case::StreamText => text(&t, "stream_text", true).await,
        Case::ToolCall => {
            tool_call(&t, false).await;
            tool_call(&t, true).await;
        }
        Case::ToolRoundTrip => tool_round_trip(&t).await,
        Case::ParallelToolCalls => parallel_tool_calls(&t).await,
        Case::Usage => {
            // `complete` counts exactly one Usage per answer; `check_usage` compares it.
            text(&t, "usage", false).await;
            text(&t, "usage", true).await;
            tool_call_in(&t, "usage", true).await;
        }
        Case::RateLimited => rate_limited(&t).await,
        Case::ServerError => server_error(&t).await,
        Case::BrokenStream => broken_stream(&t).await,
        Case::Malformed => malformed(&t).await,
    }
}

async fn text(t: &Target, case: &str, stream: bool) {
    let file = if stream { "text.stream" } else { "text.json" };
    t.serve(Serve::file(file));
    let (outcome, sent) = t.call(&text_request(stream)).await;
    let what = format!("{case} ({file})");
    let (events, usage, finish) = complete(t.name, &what, outcome);
    assert_eq!(
        text_of(&events),
        t.expected_text(file),
        "{}: {what}: text",
        t.name
    );
    assert_eq!(finish, FinishReason::Stop, "{}: {what}: finish", t.name);
    t.check_usage(file, &usage);
    t.check_requests(case, &sent);
}

async fn tool_call(t: &Target, stream: bool) {
    tool_call_in(t, "tool_call", stream).await;
}

async fn tool_call_in(t: &Target, case: &str, stream: bool) {
    let file = if stream {
        "tool_call.stream"
    } else {
        "tool_call.json"
    };
    t.serve(Serve::file(file));
    let mut req = tool_request(stream, "Weather in Paris?");
    t.script_tool_calls(&mut req, &[weather()]);
    let (outcome, sent) = t.call(&req).await;
    let what = format!("{case} ({file})");
    let (events, usage, finish) = complete(t.name, &what, outcome);
    check_calls(t.name, &what, &events, &[weather()]);
    assert_eq!(
        finish,
        FinishReason::ToolCalls,
        "{}: {what}: finish",
        t.name
    );
    t.check_usage(file, &usage);
    t.check_requests(case, &sent);
}

async fn tool_round_trip(t: &Target) {
    let file = "after_tool.json";
    t.serve(Serve::file(file));
    let (outcome, sent) = t.call(&round_trip_request()).await;
    let what = format!("tool_round_trip ({file})");
    let (events, usage, finish) = complete(t.name, &what, outcome);
    assert_eq!(
        text_of(&events),
        t.expected_text(file),
        "{}: {what}: text",
        t.name
    );
    assert_eq!(finish, FinishReason::Stop, "{}: {what}: finish", t.name);
    t.check_usage(file, &usage);
    t.check_requests("tool_round_trip", &sent);
    for r in &sent {
        let body = r.body.to_string();
        assert!(
            !body.contains(RAW_TOOL_ID),
            "{}: {what}: the raw tool id {RAW_TOOL_ID:?} reached the upstream; normalise every \
             tool_use id and tool_result tool_use_id with providers::tool_call_id: {body}",
            t.name
        );
        if t.tool_ids_sent() {
            let id = tool_call_id(RAW_TOOL_ID);
            let n = body.matches(id.as_ref()).count();
            assert!(
                n >= 2,
                "{}: {what}: the normalised id {id} should appear in both the tool call and its \
                 result, found {n} time(s): {body}",
                t.name
            );
        }
    }
}

async fn parallel_tool_calls(t: &Target) {
    let file = "parallel_tools.stream";
    t.serve(Serve::file(file));
    let mut req = tool_request(true, "Weather and local time in Paris?");
    t.script_tool_calls(&mut req, &[weather(), time()]);
    let (outcome, sent) = t.call(&req).await;
    let what = format!("parallel_tool_calls ({file})");
    let (events, usage, finish) = complete(t.name, &what, outcome);
    check_calls(t.name, &what, &events, &[weather(), time()]);
    assert_eq!(
        finish,
        FinishReason::ToolCalls,
        "{}: {what}: finish",
        t.name
    );
    t.check_usage(file, &usage);
    t.check_requests("parallel_tool_calls", &sent);
}

async fn rate_limited(t: &Target) {
    for stream in [false, true] {
        t.serve(
            Serve::file("error_429.json")
                .status(429)
                .header("retry-after", "7"),
        );
        let (outcome, sent) = t.call(&text_request(stream)).await;
        let what = format!("rate_limited (stream {stream})");
        let e = refused(t.name, &what, outcome);
        assert_eq!(
            e.error.code,
            ErrorCode::RateLimited,
            "{}: {what}: {:?}",
            t.name,
            e.error
        );
        let want = if t.http.is_some() {
            Duration::from_secs(7)
        } else {
            mock_setup::RETRY_AFTER
        };
        assert_eq!(
            e.error.retry_after,
            Some(want),
            "{}: {what}: retry_after",
            t.name
        );
        assert!(e.retryable, "{}: {what}: a 429 is retryable", t.name);
        t.check_requests("rate_limited", &sent);
    }
}

async fn server_error(t: &Target) {
    let status = t.server_error_status();
    for stream in [false, true] {
        t.serve(Serve::file("error_500.json").status(status));
        let (outcome, sent) = t.call(&text_request(stream)).await;
        let what = format!("server_error ({status}, stream {stream})");
        let e = refused(t.name, &what, outcome);
        assert_eq!(
            e.error.code,
            ErrorCode::UpstreamError,
            "{}: {what}: {:?}",
            t.name,
            e.error
        );
        assert!(e.retryable, "{}: {what}: a 5xx is retryable", t.name);
        t.check_requests("server_error", &sent);
    }
}

async fn broken_stream(t: &Target) {
    t.serve(Serve::file("text.stream").cut_and_abort());
    let (outcome, sent) = t.call(&text_request(true)).await;
    let e = failed(t.name, "broken_stream", outcome);
    assert_eq!(
        e.code,
        ErrorCode::UpstreamError,
        "{}: broken_stream: {e:?}",
        t.name
    );
    t.check_requests("broken_stream", &sent);
}

async fn malformed(t: &Target) {
    t.serve(Serve::file("malformed.stream"));
    let (outcome, sent) = t.call(&text_request(true)).await;
    let e = failed(t.name, "malformed", outcome);
    assert_eq!(
        e.code,
        ErrorCode::UpstreamError,
        "{}: malformed: {e:?}",
        t.name
    );
    t.check_requests("malformed", &sent);
}

// ---------------------------------------------------------------------------------------------
// The mock: no upstream, so its behaviour comes from config and from `#mock` scripts in the
// conversation (see `providers/mock.rs`).

mod mock_setup {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use serde_json::{Value, json};
    use weft_config::{MockModelConfig, MockProviderConfig, ProviderConfig};
    use weft_core::message::{ContentBlock, Role, Usage};
    use weft_router::ChatRequest;
    use weft_router::providers::{Case, Driver};

    /// The `Retry-After` the mock puts on its injected 429s.
    pub const RETRY_AFTER: Duration = Duration::from_secs(1);

    /// A mock with model `m` that fails every call with 429 (`rate_limited`) or 500
    /// (`server_error`), and otherwise answers normally.
    pub fn driver(case: Case) -> Driver {
        let cfg = MockModelConfig {
            error_rate_429: if case == Case::RateLimited { 1.0 } else { 0.0 },
            error_rate_500: if case == Case::ServerError { 1.0 } else { 0.0 },
            ..MockModelConfig::default()
        };
        let models = BTreeMap::from([(super::MODEL.to_owned(), cfg)]);
        Driver::new("mock", &ProviderConfig::Mock(MockProviderConfig { models }))
            .expect("the mock driver builds")
    }

    /// What the mock answers: it echoes the last user message, and after a tool result reports
    /// the tool's output.
    pub fn expected_text(file: &str) -> &'static str {
        if file == "after_tool.json" {
            "the tool returned: 18C sunny"
        } else {
            "echo: Say hello."
        }
    }

    /// The mock estimates usage; it must be non-zero and add up.
    pub fn check_usage(u: &Usage) {
        assert!(
            u.prompt_tokens > 0 && u.completion_tokens > 0,
            "mock: usage should be non-zero: {u:?}"
        );
        assert_eq!(
            u.total_tokens,
            u.prompt_tokens + u.completion_tokens,
            "mock: usage total: {u:?}"
        );
    }

    /// Appends a `#mock` script line to the last user message so the mock makes `calls` in one
    /// turn.
    pub fn script(req: &mut ChatRequest, calls: &[(&str, Value)]) {
        let turn: Vec<Value> = calls
            .iter()
            .map(|(name, input)| json!({"name": name, "input": input}))
            .collect();
        let line = format!("\n#mock {}", json!({"turns": [turn]}));
        let user = req
            .messages
            .iter_mut()
            .rev()
            .find(|m| m.role == Role::User)
            .expect("the request has a user message");
        user.content.push(ContentBlock::text(line));
    }
}

// ---------------------------------------------------------------------------------------------
// One line per provider.

/// Stamps out one `#[tokio::test]` per conformance case for `provider`, in a module of its name
/// (`cargo test -p weft-router --test conformance openai::`).
macro_rules! conformance {
    ($provider:ident) => {
        mod $provider {
            use super::{Case, run};

            #[tokio::test]
            async fn text() {
                run(stringify!($provider), Case::Text).await;
            }
            #[tokio::test]
            async fn stream_text() {
                run(stringify!($provider), Case::StreamText).await;
            }
            #[tokio::test]
            async fn tool_call() {
                run(stringify!($provider), Case::ToolCall).await;
            }
            #[tokio::test]
            async fn tool_round_trip() {
                run(stringify!($provider), Case::ToolRoundTrip).await;
            }
            #[tokio::test]
            async fn parallel_tool_calls() {
                run(stringify!($provider), Case::ParallelToolCalls).await;
            }
            #[tokio::test]
            async fn usage() {
                run(stringify!($provider), Case::Usage).await;
            }
            #[tokio::test]
            async fn rate_limited() {
                run(stringify!($provider), Case::RateLimited).await;
            }
            #[tokio::test]
            async fn server_error() {
                run(stringify!($provider), Case::ServerError).await;
            }
            #[tokio::test]
            async fn broken_stream() {
                run(stringify!($provider), Case::BrokenStream).await;
            }
            #[tokio::test]
            async fn malformed() {
                run(stringify!($provider), Case::Malformed).await;
            }
        }
    };
}

conformance!(mock);
conformance!(openai);
conformance!(anthropic);
conformance!(gemini);
conformance!(deepseek);
conformance!(ollama);
