//! The JSON body extractor: 415 for a non-JSON body, 413 over the cap, and a 400 that names the
//! field at fault (`messages[0].role: unknown variant …`) for a body that does not fit.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use serde::de::DeserializeOwned;
use weft_core::{Error, ErrorCode};

use crate::error::{ApiError, Shape};

/// A JSON body; rejections render in OpenAI's shape when `OPENAI` is true.
pub struct ValidJson<T, const OPENAI: bool>(pub T);

pub type OpenAiJson<T> = ValidJson<T, true>;
pub type NativeJson<T> = ValidJson<T, false>;

const fn shape(openai: bool) -> Shape {
    if openai { Shape::OpenAi } else { Shape::Native }
}

impl<S, T, const OPENAI: bool> FromRequest<S> for ValidJson<T, OPENAI>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let json_ct = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|m| {
                let m = m.trim();
                m.eq_ignore_ascii_case("application/json")
                    || (m.starts_with("application/") && m.ends_with("+json"))
            });
        if json_ct != Some(true) {
            return Err(ApiError(
                Error::new(
                    ErrorCode::UnsupportedMediaType,
                    "the request body must be JSON; send `Content-Type: application/json`",
                ),
                shape(OPENAI),
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            let e = if r.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                Error::new(
                    ErrorCode::PayloadTooLarge,
                    "the request body is larger than this gateway accepts (gateway.max_body_bytes)",
                )
            } else {
                Error::invalid("the request body could not be read")
            };
            ApiError(e, shape(OPENAI))
        })?;
        parse(&bytes)
            .map(ValidJson)
            .map_err(|e| ApiError(e, shape(OPENAI)))
    }
}

/// Deserializes `bytes`, naming the path of the offending field on failure.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let msg = inner.to_string();
        // serde's messages end with " at line X column Y"; the path says more.
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_owned();
        if inner.is_syntax() || inner.is_eof() {
            Error::invalid(format!("the request body is not valid JSON: {msg}"))
        } else if path == "." || path.is_empty() {
            let param = missing_field(&msg);
            let mut e = Error::invalid(format!("invalid request body: {msg}"));
            e.param = param;
            e
        } else {
            Error::invalid(format!("`{path}`: {msg}")).with_param(path)
        }
    })
}

fn missing_field(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("missing field `")?;
    rest.split('`').next().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[expect(dead_code, reason = "fields exist to be parsed")]
    struct Req {
        model: String,
        messages: Vec<Msg>,
    }
    #[derive(serde::Deserialize, Debug)]
    #[expect(dead_code, reason = "fields exist to be parsed")]
    struct Msg {
        role: String,
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse::<Req>(br#"{"model":"m","messages":"nope"}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        assert!(e.message.contains("`messages`"), "{}", e.message);
        let e = parse::<Req>(br#"{"model":"m","messages":[{"role":1}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        let e = parse::<Req>(br#"{"messages":[]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("model"));
        assert!(e.message.contains("missing field `model`"));
        let e = parse::<Req>(b"{").unwrap_err();
        assert!(e.message.contains("not valid JSON"));
    }
}
