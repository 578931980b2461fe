//! Rendering errors at the edge: OpenAI's shape on the OpenAI-compatible routes, Anthropic's on
//! the Anthropic-compatible `/v1/messages`, weft's native shape elsewhere. All carry
//! `Retry-After` when the error knows one.

use axum::Json;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use weft_core::{Error, ErrorCode};

/// Which error body a route speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    OpenAi,
    Native,
    /// `{"type":"error","error":{"type","message"}}`, as Anthropic's Messages API answers.
    Anthropic,
}

/// An [`Error`] bound to the shape of the route that produced it.
#[derive(Debug)]
pub struct ApiError(pub Error, pub Shape);

impl ApiError {
    pub fn openai(e: Error) -> Self {
        Self(e, Shape::OpenAi)
    }

    pub fn native(e: Error) -> Self {
        Self(e, Shape::Native)
    }

    pub fn anthropic(e: Error) -> Self {
        Self(e, Shape::Anthropic)
    }
}

/// Anthropic's error `type` for a code (its SDKs pick the exception class by status; the type
/// is what a caller logs or matches on).
pub fn anthropic_type(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::InvalidRequest | ErrorCode::UnsupportedMediaType => "invalid_request_error",
        ErrorCode::PayloadTooLarge => "request_too_large",
        ErrorCode::Unauthenticated => "authentication_error",
        ErrorCode::PermissionDenied => "permission_error",
        ErrorCode::NotFound | ErrorCode::ModelNotFound => "not_found_error",
        ErrorCode::Conflict => "conflict_error",
        ErrorCode::RateLimited | ErrorCode::TenantConcurrencyExhausted => "rate_limit_error",
        ErrorCode::UpstreamTimeout => "timeout_error",
        ErrorCode::Unavailable
        | ErrorCode::AdmissionUnavailable
        | ErrorCode::TenantPaused
        | ErrorCode::UiNotBuilt => "overloaded_error",
        ErrorCode::UpstreamError
        | ErrorCode::ModelOutputInvalid
        | ErrorCode::CodeAgentError
        | ErrorCode::CodeAgentReplayDivergence
        | ErrorCode::Internal => "api_error",
    }
}

/// Anthropic's error body: `{"type":"error","error":{"type","message"}}`. It has no field for the
/// parameter at fault, so the message names it.
pub fn anthropic_body(e: &Error) -> serde_json::Value {
    serde_json::json!({
        "type": "error",
        "error": {"type": anthropic_type(e.code), "message": e.message},
    })
}

pub fn render(e: &Error, shape: Shape) -> Response {
    let status =
        StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match shape {
        Shape::OpenAi => e.openai_body(),
        Shape::Native => e.native_body(),
        Shape::Anthropic => anthropic_body(e),
    };
    let mut resp = (status, Json(body)).into_response();
    if let Some(after) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(
            &(after.as_secs() + u64::from(after.subsec_nanos() > 0))
                .max(1)
                .to_string(),
        )
    {
        resp.headers_mut().insert("retry-after", v);
    }
    resp
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        render(&self.0, self.1)
    }
}
