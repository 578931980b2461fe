//! The closed set of error codes and the one error value that crosses service boundaries.
//!
//! Each code knows its HTTP status, gRPC code and OpenAI error `type`; services map to those only
//! at their edge. Across gRPC the code and parameter ride in status metadata so the gateway can
//! rebuild the exact error the router raised.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

/// Metadata key carrying the [`ErrorCode`] on a gRPC status.
pub const GRPC_CODE_KEY: &str = "weft-error-code";
/// Metadata key carrying the offending request parameter on a gRPC status.
pub const GRPC_PARAM_KEY: &str = "weft-error-param";
/// Metadata key carrying a retry-after hint in whole seconds.
pub const GRPC_RETRY_AFTER_KEY: &str = "weft-retry-after";

/// Every error weft reports. Closed: adding one is a deliberate API change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is malformed or a field is out of range.
    InvalidRequest,
    /// No valid bearer token.
    Unauthenticated,
    /// The principal lacks a scope for this operation.
    PermissionDenied,
    /// The resource does not exist (or belongs to another tenant).
    NotFound,
    /// The requested model, alias or tier is unknown.
    ModelNotFound,
    /// The resource already exists.
    Conflict,
    /// The request body exceeds the configured cap.
    PayloadTooLarge,
    /// The request body is not JSON.
    UnsupportedMediaType,
    /// A rate limit or quota is exhausted.
    RateLimited,
    /// The tenant already has as many admitted runs as it may; retry after `Retry-After`.
    TenantConcurrencyExhausted,
    /// Admission cannot be decided (Redis is unreachable); runs fail closed.
    AdmissionUnavailable,
    /// The tenant is draining or the fleet is in maintenance (docs/operations.md): no new run
    /// is admitted until it is resumed; retry after `Retry-After`.
    TenantPaused,
    /// Every upstream candidate failed.
    UpstreamError,
    /// The model's output could not be read: a tool call the provider could not parse (e.g.
    /// llama.cpp's "does not match the expected format") or OpenAI's "the model produced
    /// invalid content". The same request may succeed again; a run's turn is asked again
    /// with a note to the model.
    ModelOutputInvalid,
    /// The upstream did not answer in time.
    UpstreamTimeout,
    /// An internal dependency (router, database) is unreachable.
    Unavailable,
    /// The gateway was built without the web UI (`web/dist` was missing at compile time).
    UiNotBuilt,
    /// A code agent's script failed: it threw, did not parse, defines no `main`, ran out of
    /// memory, or ran past its wall clock (docs/code-agents.md). A run error only.
    CodeAgentError,
    /// A code agent's script, replayed from the transcript, made a call other than the one it
    /// recorded (another tool or input), or returned before making every recorded call. A run
    /// error only.
    CodeAgentReplayDivergence,
    /// A bug or an unexpected failure; details are logged, never returned.
    Internal,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 20] = [
        Self::InvalidRequest,
        Self::Unauthenticated,
        Self::PermissionDenied,
        Self::NotFound,
        Self::ModelNotFound,
        Self::Conflict,
        Self::PayloadTooLarge,
        Self::UnsupportedMediaType,
        Self::RateLimited,
        Self::TenantConcurrencyExhausted,
        Self::AdmissionUnavailable,
        Self::TenantPaused,
        Self::UpstreamError,
        Self::ModelOutputInvalid,
        Self::UpstreamTimeout,
        Self::Unavailable,
        Self::UiNotBuilt,
        Self::CodeAgentError,
        Self::CodeAgentReplayDivergence,
        Self::Internal,
    ];

    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::Unauthenticated => "unauthenticated",
            Self::PermissionDenied => "permission_denied",
            Self::NotFound => "not_found",
            Self::ModelNotFound => "model_not_found",
            Self::Conflict => "conflict",
            Self::PayloadTooLarge => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::RateLimited => "rate_limited",
            Self::TenantConcurrencyExhausted => "tenant_concurrency_exhausted",
            Self::AdmissionUnavailable => "admission_unavailable",
            Self::TenantPaused => "tenant_paused",
            Self::UpstreamError => "upstream_error",
            Self::UpstreamTimeout => "upstream_timeout",
            Self::ModelOutputInvalid => "model_output_invalid",
            Self::Unavailable => "unavailable",
            Self::UiNotBuilt => "ui_not_built",
            Self::CodeAgentError => "code_agent_error",
            Self::CodeAgentReplayDivergence => "code_agent_replay_divergence",
            Self::Internal => "internal",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The HTTP status this code maps to.
    pub fn http_status(self) -> u16 {
        match self {
            Self::InvalidRequest => 400,
            Self::Unauthenticated => 401,
            Self::PermissionDenied => 403,
            Self::NotFound | Self::ModelNotFound => 404,
            Self::Conflict => 409,
            Self::PayloadTooLarge => 413,
            Self::UnsupportedMediaType => 415,
            Self::RateLimited | Self::TenantConcurrencyExhausted => 429,
            Self::Internal | Self::CodeAgentError | Self::CodeAgentReplayDivergence => 500,
            Self::UpstreamError | Self::ModelOutputInvalid => 502,
            Self::Unavailable
            | Self::AdmissionUnavailable
            | Self::TenantPaused
            | Self::UiNotBuilt => 503,
            Self::UpstreamTimeout => 504,
        }
    }

    /// The gRPC status code this maps to.
    pub fn grpc_code(self) -> tonic::Code {
        use tonic::Code;
        match self {
            Self::InvalidRequest => Code::InvalidArgument,
            Self::Unauthenticated => Code::Unauthenticated,
            Self::PermissionDenied => Code::PermissionDenied,
            Self::NotFound | Self::ModelNotFound => Code::NotFound,
            Self::Conflict => Code::AlreadyExists,
            Self::PayloadTooLarge => Code::OutOfRange,
            Self::UnsupportedMediaType => Code::InvalidArgument,
            Self::RateLimited | Self::TenantConcurrencyExhausted => Code::ResourceExhausted,
            Self::UpstreamError | Self::ModelOutputInvalid => Code::Unknown,
            Self::UpstreamTimeout => Code::DeadlineExceeded,
            Self::Unavailable
            | Self::AdmissionUnavailable
            | Self::TenantPaused
            | Self::UiNotBuilt => Code::Unavailable,
            Self::CodeAgentError => Code::Unknown,
            Self::CodeAgentReplayDivergence => Code::Aborted,
            Self::Internal => Code::Internal,
        }
    }

    /// The best code for a gRPC status that carries no weft metadata.
    pub fn from_grpc_code(code: tonic::Code) -> Self {
        use tonic::Code;
        match code {
            Code::InvalidArgument | Code::FailedPrecondition => Self::InvalidRequest,
            Code::Unauthenticated => Self::Unauthenticated,
            Code::PermissionDenied => Self::PermissionDenied,
            Code::NotFound => Self::NotFound,
            Code::AlreadyExists => Self::Conflict,
            Code::ResourceExhausted => Self::RateLimited,
            Code::DeadlineExceeded => Self::UpstreamTimeout,
            Code::Unavailable => Self::Unavailable,
            _ => Self::Internal,
        }
    }

    /// The OpenAI error `type` for this code.
    pub fn openai_type(self) -> &'static str {
        match self {
            Self::InvalidRequest
            | Self::NotFound
            | Self::ModelNotFound
            | Self::Conflict
            | Self::PayloadTooLarge
            | Self::UnsupportedMediaType => "invalid_request_error",
            Self::Unauthenticated => "authentication_error",
            Self::PermissionDenied => "permission_error",
            Self::RateLimited | Self::TenantConcurrencyExhausted => "rate_limit_error",
            Self::UpstreamError
            | Self::ModelOutputInvalid
            | Self::UpstreamTimeout
            | Self::Unavailable
            | Self::AdmissionUnavailable
            | Self::TenantPaused
            | Self::UiNotBuilt
            | Self::CodeAgentError
            | Self::CodeAgentReplayDivergence
            | Self::Internal => "server_error",
        }
    }

    /// Whether a caller may retry the same request later.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::RateLimited
                | Self::TenantConcurrencyExhausted
                | Self::AdmissionUnavailable
                | Self::TenantPaused
                | Self::UpstreamError
                | Self::ModelOutputInvalid
                | Self::UpstreamTimeout
                | Self::Unavailable
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error that reaches a client. `message` is safe to show: lowercase, no trailing period, and
/// for input errors it says how to fix the input.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
    /// When the caller may retry, if known.
    pub retry_after: Option<Duration>,
}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            param: None,
            retry_after: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthenticated, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::PermissionDenied, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }

    /// An internal failure. The message is generic; log the cause before calling this.
    pub fn internal() -> Self {
        Self::new(
            ErrorCode::Internal,
            "internal error; the request id in x-request-id identifies it in the server logs",
        )
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// The OpenAI error body: `{"error":{"message","type","code","param"}}`.
    pub fn openai_body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.code.openai_type(),
                "code": self.code.as_str(),
                "param": self.param,
            }
        })
    }

    /// The weft-native error body: `{"error":{"code","message"}}` (plus `param` when known).
    pub fn native_body(&self) -> serde_json::Value {
        let mut inner = serde_json::json!({ "code": self.code.as_str(), "message": self.message });
        if let (Some(p), Some(obj)) = (&self.param, inner.as_object_mut()) {
            obj.insert("param".into(), serde_json::Value::String(p.clone()));
        }
        serde_json::json!({ "error": inner })
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        let mut status = tonic::Status::new(e.code.grpc_code(), e.message);
        let md = status.metadata_mut();
        if let Ok(v) = e.code.as_str().parse() {
            md.insert(GRPC_CODE_KEY, v);
        }
        if let Some(v) = e.param.as_deref().and_then(|p| p.parse().ok()) {
            md.insert(GRPC_PARAM_KEY, v);
        }
        if let Some(v) = e
            .retry_after
            .and_then(|d| d.as_secs().to_string().parse().ok())
        {
            md.insert(GRPC_RETRY_AFTER_KEY, v);
        }
        status
    }
}

impl From<&tonic::Status> for Error {
    fn from(s: &tonic::Status) -> Self {
        let md = s.metadata();
        let code = md
            .get(GRPC_CODE_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(ErrorCode::parse)
            .unwrap_or_else(|| ErrorCode::from_grpc_code(s.code()));
        let mut e = Error::new(code, s.message());
        e.param = md
            .get(GRPC_PARAM_KEY)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        e.retry_after = md
            .get(GRPC_RETRY_AFTER_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .map(Duration::from_secs);
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_its_name() {
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(c.as_str()), Some(c));
            assert_eq!(
                serde_json::to_value(c).unwrap(),
                serde_json::json!(c.as_str())
            );
        }
    }

    #[test]
    fn http_statuses_are_the_documented_ones() {
        assert_eq!(ErrorCode::InvalidRequest.http_status(), 400);
        assert_eq!(ErrorCode::Unauthenticated.http_status(), 401);
        assert_eq!(ErrorCode::ModelNotFound.http_status(), 404);
        assert_eq!(ErrorCode::PayloadTooLarge.http_status(), 413);
        assert_eq!(ErrorCode::UnsupportedMediaType.http_status(), 415);
        assert_eq!(ErrorCode::RateLimited.http_status(), 429);
        assert_eq!(ErrorCode::Unavailable.http_status(), 503);
        for c in ErrorCode::ALL {
            assert!((400..600).contains(&c.http_status()));
        }
    }

    #[test]
    fn errors_survive_a_grpc_hop() {
        let e = Error::new(ErrorCode::ModelNotFound, "model `x` does not exist")
            .with_param("model")
            .with_retry_after(Duration::from_secs(3));
        let status = tonic::Status::from(e.clone());
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert_eq!(Error::from(&status), e);
    }

    #[test]
    fn plain_grpc_statuses_map_to_a_code() {
        let s = tonic::Status::unavailable("connection refused");
        assert_eq!(Error::from(&s).code, ErrorCode::Unavailable);
    }

    #[test]
    fn openai_shape_has_all_four_fields() {
        let body = Error::invalid("`model` is required")
            .with_param("model")
            .openai_body();
        let err = &body["error"];
        assert_eq!(err["type"], "invalid_request_error");
        assert_eq!(err["code"], "invalid_request");
        assert_eq!(err["param"], "model");
        assert_eq!(err["message"], "`model` is required");
        let native = Error::not_found("no such token").native_body();
        assert_eq!(native["error"]["code"], "not_found");
        assert!(native["error"].get("type").is_none());
    }
}
