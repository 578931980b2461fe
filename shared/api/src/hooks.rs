//! `/v1/hooks…`: tool-use hooks (docs/hooks.md), the eight definition routes ([`crate::defs`])
//! over [`HookContent`], and what weft sends a hook's receiver ([`HookCall`]) and reads back
//! ([`HookAnswer`]).
//!
//! A hook is an operator's policy between the model and a tool: before a call of a matching
//! tool (`pre`) its receiver may allow it, deny it or rewrite its input; after it (`post`) it
//! may rewrite the result. Calls are signed with Standard Webhooks and dialled through the
//! executor's egress guard. The content types live here once (serde, JSON Schema); weft-core
//! (`weft_core::hook`) validates them and stores them as a definition kind.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::defs::{DefContentSchema, def_ops};
use crate::op::Op;

/// When a hook is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookPhase {
    /// Before the tool runs: the receiver may allow, deny or rewrite the input.
    Pre,
    /// After the tool ran: the receiver may allow or rewrite the result (or withhold it).
    Post,
}

impl HookPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pre => "pre",
            Self::Post => "post",
        }
    }
}

/// What a call that gets no usable answer (receiver down, timeout, non-2xx, unreadable
/// answer) decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailMode {
    /// The call goes on as if the hook allowed it; the failure is recorded.
    Open,
    /// The call is denied (pre) or its result withheld (post).
    #[default]
    Closed,
}

/// A hook definition's content (hashed into its version).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("example" = {
    "description": "Refuse HTTP calls to hosts the compliance list does not know",
    "phase": "pre",
    "agents": ["*"],
    "tools": ["HTTP", "mcp__github__*"],
    "url": "https://policy.example.com/weft/pre",
    "fail_mode": "closed",
    "timeout_ms": 2000,
    "secret_env": "WEFT_HOOK_DEFAULT__POLICY"
}))]
pub struct HookContent {
    /// what the hook is for, shown in listings
    #[serde(default)]
    #[schemars(length(max = 4096))]
    pub description: String,
    /// `pre`: called before the tool runs; `post`: after
    pub phase: HookPhase,
    /// the agents whose runs it applies to, by name, or `*` for every agent
    #[schemars(
        length(min = 1, max = 64),
        inner(regex(pattern = r"^(\*|[a-z0-9][a-z0-9_-]{0,63})$"))
    )]
    pub agents: Vec<String>,
    /// the tools it applies to: exact names (`HTTP`, `mcp__github__create_issue`) or a prefix followed by `*` (`mcp__github__*`; `*` alone: every tool)
    #[schemars(
        length(min = 1, max = 64),
        inner(regex(pattern = r"^[A-Za-z0-9_-]{0,128}\*?$"))
    )]
    pub tools: Vec<String>,
    /// where weft POSTs each call (http or https; dialled through the executor's egress guard, so a private, loopback or link-local address is refused unless the operator exempts it)
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://[^\s/?#]+"))]
    pub url: String,
    /// what a call without a usable answer decides; default `closed` (deny)
    #[serde(default)]
    pub fail_mode: FailMode,
    /// how long one call may take, in milliseconds; unset = 5000
    #[serde(default)]
    #[schemars(range(min = 1, max = 60000))]
    pub timeout_ms: Option<u32>,
    /// the name of the environment variable (on every executor) holding the Standard Webhooks signing secret (`whsec_` + base64); it must lie in the tenant's namespace `<executor.hook_secret_env_prefix><TENANT>__<NAME>`, e.g. `WEFT_HOOK_ACME__POLICY`. Unset: calls are not signed
    #[serde(default)]
    #[schemars(length(max = 128), regex(pattern = r"^[A-Z_][A-Z0-9_]{0,127}$"))]
    pub secret_env: Option<String>,
}

impl DefContentSchema for HookContent {
    const NAME: &'static str = "Hook";
    const WARNINGS: bool = true;
}

/// The body of one call to a hook's receiver (`POST <url>`, signed with Standard Webhooks:
/// `webhook-id`, `webhook-timestamp`, `webhook-signature`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HookCall {
    /// `tool_use.pre` or `tool_use.post`
    #[serde(rename = "type")]
    pub kind: String,
    /// the hook definition called
    pub hook: String,
    pub run_id: String,
    pub tenant: String,
    /// the run's agent
    pub agent: String,
    /// the model's id of the call (unique in the run)
    pub tool_use_id: String,
    pub tool: String,
    /// the tool's input: the model's, as rewritten by the pre hooks called before this one
    pub input: Value,
    /// post only: the tool's result, as rewritten by the post hooks called before this one
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// post only: whether the result is an error
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
}

/// `tool_use.pre`.
pub const CALL_PRE: &str = "tool_use.pre";
/// `tool_use.post`.
pub const CALL_POST: &str = "tool_use.post";

/// A receiver's decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookVerdict {
    Allow,
    Deny,
    Rewrite,
}

impl HookVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Rewrite => "rewrite",
        }
    }
}

/// A receiver's answer (a 2xx with a JSON body). Fields other than these are ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HookAnswer {
    pub decision: HookVerdict,
    /// pre `rewrite`: the input the tool runs with instead (a JSON object)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Map<String, Value>>,
    /// post `rewrite`: the result the model sees instead
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// why: shown to the model with a deny, recorded with every decision
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The hook definition routes.
pub fn ops() -> Vec<Op> {
    def_ops::<HookContent>(&crate::def_texts!(
        path: "/v1/hooks", tag: "hooks", example: "policy",
        plural: "hooks", a: "a hook definition", noun: "hook",
        put_a: "a hook definition",
        put_description: "Scope: tenant:admin or admin. The body is the content fields: `phase`, `agents`, `tools` and `url` are required. `secret_env` names the environment variable on the executors holding the signing secret, in the tenant's namespace `WEFT_HOOK_<TENANT>__<NAME>` under the operator's executor.hook_secret_env_prefix (any other name is a 400); the secret itself is never stored. `warnings` says when the URL names an address the egress guard refuses unless the operator exempts it (loopback, private, link-local such as 169.254.169.254). The same content returns the existing version (200, created=false) and makes it active; new content becomes the next version (201) with the previously active version as parent. A new or changed hook applies to tool calls made once the executors' cache of the tenant's hooks is refreshed (executor.hooks_cache_ms).",
        retire: "Retire a hook (it stays readable; tool calls stop calling it)",
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_answer_reads_with_extra_fields_and_a_call_writes_without_post_fields() {
        let a: HookAnswer =
            serde_json::from_value(json!({"decision": "rewrite", "input": {"q": 1}, "trace": "x"}))
                .unwrap();
        assert_eq!(a.decision, HookVerdict::Rewrite);
        assert_eq!(a.input.unwrap()["q"], 1);
        let c = HookCall {
            kind: CALL_PRE.into(),
            hook: "h".into(),
            run_id: "r".into(),
            tenant: "t".into(),
            agent: "a".into(),
            tool_use_id: "c1".into(),
            tool: "HTTP".into(),
            input: json!({}),
            result: None,
            is_error: None,
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["type"], "tool_use.pre");
        assert!(v.get("result").is_none() && v.get("is_error").is_none());
    }
}
