//! Rendering errors at the edge: OpenAI's shape on the OpenAI-compatible routes, weft's native
//! shape elsewhere. Both carry `Retry-After` when the error knows one.

use axum::Json;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use weft_core::Error;

/// Which error body a route speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    OpenAi,
    Native,
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
}

pub fn render(e: &Error, shape: Shape) -> Response {
    let status =
        StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match shape {
        Shape::OpenAi => e.openai_body(),
        Shape::Native => e.native_body(),
    };
    let mut resp = (status, Json(body)).into_response();
    if let Some(after) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&after.as_secs().max(1).to_string())
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

/// An error from a router call, with transport failures made readable.
pub fn from_status(s: &tonic::Status) -> Error {
    let e = Error::from(s);
    let from_router = s.metadata().get(weft_core::error::GRPC_CODE_KEY).is_some();
    if from_router {
        return e;
    }
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => {
            tracing::warn!(grpc_code = ?s.code(), "router unreachable");
            Error::unavailable(
                "the router is unavailable; retry shortly, and check that weft-router is running",
            )
        }
        tonic::Code::DeadlineExceeded => Error::new(
            weft_core::ErrorCode::UpstreamTimeout,
            "the router did not answer in time",
        ),
        _ => {
            tracing::error!(grpc_code = ?s.code(), "router call failed");
            Error::internal()
        }
    }
}
