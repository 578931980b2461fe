//! The OpenAPI document for every route, served at `/v1/openapi.json`. A test checks that each
//! route the gateway serves is listed.

use axum::response::{IntoResponse, Response};

/// The document, kept beside the crate so reviews see it as JSON.
pub const OPENAPI_JSON: &str = include_str!("../openapi.json");

pub async fn openapi() -> Response {
    ([("content-type", "application/json")], OPENAPI_JSON).into_response()
}
