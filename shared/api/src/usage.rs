//! `GET /v1/usage`: a tenant's model calls over a time range, grouped.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{NextCursor, TenantName, Timestamp};
use crate::op::Op;

/// What a summary may be grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum GroupKey {
    Provider,
    Model,
    RequestedModel,
    Subject,
    Token,
    Kind,
    Day,
    Hour,
}

/// The answer of `GET /v1/usage`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct UsageSummary {
    pub data: Vec<UsageGroup>,
    pub tenant: String,
    pub from: Timestamp,
    pub to: Timestamp,
    pub group_by: Vec<GroupKey>,
    /// more than 10000 groups matched; only the first 10000 are in data
    pub truncated: bool,
    #[serde(default)]
    pub next_cursor: NextCursor,
}

/// One group. Only the keys named in group_by are present (`token` fills `token_id`; day and hour are the RFC 3339 start of the UTC bucket).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct UsageGroup {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_model: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day: Option<Option<Timestamp>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hour: Option<Option<Timestamp>>,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_usd: f64,
    pub avg_latency_ms: f64,
    pub p95_latency_ms: f64,
}

pub fn ops() -> Vec<Op> {
    vec![
        Op::get("/v1/usage", "Usage of a tenant's model calls over a time range, grouped")
            .describe("Scope: tenant:admin (own tenant) or admin (any tenant, with `tenant=`). Sums the calls that finished in [from, to). A tenant admin naming another tenant gets 404.")
            .tag("usage")
            .security(crate::Security::Bearer)
            .query::<String>("group_by", Some("comma-separated keys: provider, model, requested_model, subject, token, kind, day, hour (UTC); none gives one row of totals"), Some("provider,model".into()))
            .query::<Timestamp>("from", Some("RFC 3339, inclusive; defaults to 24 h before `to` (an empty value is a 400)"), None)
            .query::<Timestamp>("to", Some("RFC 3339, exclusive; defaults to now (an empty value is a 400)"), None)
            .query::<TenantName>("tenant", Some("the tenant to read; defaults to the caller's; only `admin` may name another"), Some("default".into()))
            .ok::<UsageSummary>("the groups")
            .error(400, "unknown group_by value, a time that is not RFC 3339, `from` after `to`, or an unknown parameter")
            .error(401, "missing, invalid, expired or revoked token")
            .error(403, "the token lacks `tenant:admin`")
            .error(404, "another tenant than the caller's, for a tenant admin")
            .error(503, "the database is unreachable"),
    ]
}
