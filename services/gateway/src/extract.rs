//! Request extractors that answer in weft's error shapes, never axum's `text/plain`:
//! - the JSON body: 415 for a non-JSON body, 413 over the cap, and a 400 that names the field at
//!   fault (`messages[0].role: unknown variant …`) for a body that does not fit;
//! - the query string ([`NativeQuery`]) and path parameters ([`NativePath`]): a 400 naming the
//!   parameter.
//!
//! Native routes store what they are given, and Postgres cannot store U+0000 in `text` or
//! `jsonb`; so a NUL anywhere in a native body, query or path is a 400 naming where it is, before
//! any work is done (the rule in docs/security.md). The OpenAI- and Anthropic-compatible doors
//! pass such text to the provider unchanged; the one of them that stores (the Responses API)
//! keeps JSON text, where U+0000 is an escape, and checks the ids it looks up itself.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::Value;
use weft_core::storable::nul_error;
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
        if !is_json(&req) {
            return Err(ApiError(unsupported_media_type(), shape(OPENAI)));
        }
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|r| ApiError(body_error(&r), shape(OPENAI)))?;
        let parsed = if OPENAI {
            parse(&bytes)
        } else {
            parse_native(&bytes)
        };
        parsed
            .map(ValidJson)
            .map_err(|e| ApiError(e, shape(OPENAI)))
    }
}

fn is_json(req: &Request) -> bool {
    req.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| {
            let m = m.trim();
            m.eq_ignore_ascii_case("application/json")
                || (m.starts_with("application/") && m.ends_with("+json"))
        })
}

fn unsupported_media_type() -> Error {
    Error::new(
        ErrorCode::UnsupportedMediaType,
        "the request body must be JSON; send `Content-Type: application/json`",
    )
}

pub(crate) fn body_error(r: &axum::extract::rejection::BytesRejection) -> Error {
    if r.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        Error::new(
            ErrorCode::PayloadTooLarge,
            "the request body is larger than this gateway accepts (gateway.max_body_bytes)",
        )
    } else {
        Error::invalid("the request body could not be read")
    }
}

/// An optional native JSON body: no body (or only whitespace) is `T::default()`; anything else
/// is held to [`NativeJson`]'s rules (415 when not JSON, 400 naming the field).
pub struct OptionalNativeJson<T>(pub T);

impl<S, T> FromRequest<S> for OptionalNativeJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Default,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let json = is_json(&req);
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|r| ApiError::native(body_error(&r)))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(T::default()));
        }
        if !json {
            return Err(ApiError::native(unsupported_media_type()));
        }
        parse_native(&bytes)
            .map(OptionalNativeJson)
            .map_err(ApiError::native)
    }
}

/// [`parse`] for a native route: also refuses a NUL in any string or key of the body.
pub fn parse_native<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    refuse_nul(bytes)?;
    parse(bytes)
}

/// A 400 naming `path` when the JSON in `bytes` has U+0000 in a string or a key. JSON can only
/// carry a NUL as the escape `\u0000`, so bodies without that sequence skip the walk.
pub fn refuse_nul(bytes: &[u8]) -> Result<(), Error> {
    if !bytes.windows(6).any(|w| w == b"\\u0000") {
        return Ok(());
    }
    // Not JSON: `parse` reports that.
    let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
        return Ok(());
    };
    match weft_core::storable::nul_path(&v) {
        Some(path) => Err(nul_error(&path)),
        None => Ok(()),
    }
}

/// The query string of a native route, deserialized into `T`; a bad value is a native 400 whose
/// `param` names the parameter (`?from_seq=null` → `from_seq`), and a NUL in any name or value is
/// refused.
pub struct NativeQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for NativeQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parse_query(parts.uri.query().unwrap_or_default())
            .map(NativeQuery)
            .map_err(ApiError::native)
    }
}

/// Deserializes a query string as [`NativeQuery`] does.
pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, Error> {
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k.contains('\0') || v.contains('\0') {
            return Err(nul_error(&k));
        }
    }
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|err| {
        let path = err.path().to_string();
        let msg = err.into_inner().to_string();
        if path == "." || path.is_empty() {
            // A missing or unknown parameter: serde names it in backticks.
            let param = msg.split('`').nth(1).map(str::to_owned);
            let mut e = Error::invalid(format!("invalid query string: {msg}"));
            e.param = param;
            e
        } else {
            Error::invalid(format!("query parameter `{path}`: {msg}")).with_param(path)
        }
    })
}

/// Path parameters of a native route. A parameter that does not decode (bad percent-encoding,
/// not UTF-8) or holds a NUL is a native 400 naming it, instead of axum's `text/plain` answer.
pub struct NativePath<T>(pub T);

impl<S, T> FromRequestParts<S> for NativePath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        use axum::extract::RawPathParams;
        let raw = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|r| {
                ApiError::native(Error::invalid(format!("invalid path: {}", r.body_text())))
            })?;
        for (name, value) in &raw {
            if value.contains('\0') {
                return Err(ApiError::native(nul_error(name)));
            }
        }
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(NativePath(v)),
            Err(r) => Err(ApiError::native(Error::invalid(format!(
                "invalid path parameter: {}",
                r.body_text()
            )))),
        }
    }
}

/// Deserializes `bytes`, naming the path of the offending field on failure.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let msg = inner.to_string();
        // serde's messages end with " at line X column Y"; the path says more.
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_owned();
        // serde_json reports a value of the wrong JSON type for an enum ("expected value") as a
        // syntax error; when the body is valid JSON it is a type error at the field's path.
        let syntax = (inner.is_syntax() || inner.is_eof())
            && serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_err();
        if syntax {
            Error::invalid(format!("the request body is not valid JSON: {msg}"))
        } else if inner.is_syntax() {
            let path = if path == "." { String::new() } else { path };
            Error::invalid(format!(
                "`{path}` has the wrong type: it must be one of the values the API reference lists"
            ))
            .with_param(path)
        } else if path == "." || path.is_empty() {
            let param = missing_field(&msg);
            let mut e = Error::invalid(format!("invalid request body: {msg}"));
            e.param = param;
            e
        } else {
            Error::invalid(format!("`{path}`: {msg}")).with_param(path)
        }
    })?;
    // One JSON value, then only whitespace: a bare `Deserializer` stops after the value, so
    // without this `{"a":1} junk` (or `{"a":1}{"a":2}`) would be read as `{"a":1}`.
    de.end().map_err(|e| {
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_owned();
        Error::invalid(format!("the request body is not valid JSON: {msg}"))
    })?;
    Ok(value)
}

fn missing_field(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("missing field `")?;
    rest.split('`').next().map(str::to_owned)
}

/// A 400 naming the field at `path` (`input[0].content[1].text`), with what to fix.
pub(crate) fn invalid_at(path: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("`{path}` {msg}")).with_param(path)
}

/// `v` as a `T`, or a 400 naming the field at fault under `path` (`messages[0].content[1].text`):
/// how the doors that read a body's parts one by one (the Messages and Responses APIs) check
/// each part.
pub(crate) fn typed<T: DeserializeOwned>(v: Value, path: &str) -> Result<T, Error> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let inner = e.path().to_string();
        let at = if inner.is_empty() || inner == "." {
            path.to_owned()
        } else {
            format!("{path}.{inner}")
        };
        Error::invalid(format!("`{at}`: {}", e.into_inner())).with_param(at)
    })
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
    fn a_nul_anywhere_in_a_native_body_names_its_path() {
        let e = parse_native::<Value>(br#"{"a":{"b":["x","y\u0000z"]}}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("a.b[1]"));
        assert!(e.message.contains("NUL"), "{}", e.message);
        let e = parse_native::<Value>(br#"{"k\u0000":1}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some(r"k\u0000"));
        // An escaped backslash followed by `u0000` is not a NUL.
        assert!(parse_native::<Value>(br#"{"a":"\\u0000"}"#).is_ok());
        // The OpenAI door passes it through.
        assert!(parse::<Value>(br#"{"a":"\u0000"}"#).is_ok());
    }

    #[test]
    fn a_body_is_one_json_value() {
        // What the fuzzer found (def_schedule, def_mcp_server): each was read as its first value.
        for body in [
            &br#"{"a":1} junk"#[..],
            br#"{"a":1}{"a":2}"#,
            br#"0 12 ? * MON#1",}"#,
            b"{}}",
        ] {
            let e = parse::<Value>(body).unwrap_err();
            assert_eq!(
                e.message, "the request body is not valid JSON: trailing characters",
                "{body:?}"
            );
        }
        assert!(parse::<Value>(b" {\"a\": 1} \r\n\t").is_ok());
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[expect(dead_code, reason = "fields exist to be parsed")]
    struct Q {
        from_seq: Option<i64>,
        agent: Option<String>,
    }

    #[test]
    fn query_errors_name_the_parameter() {
        for q in ["from_seq=9223372036854775808", "from_seq=null", "from_seq="] {
            let e = parse_query::<Q>(q).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("from_seq"), "{q}: {}", e.message);
        }
        let e = parse_query::<Q>("agent=a%00b").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("agent"));
        let e = parse_query::<Q>("nope=1").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("nope"), "{}", e.message);
        assert!(parse_query::<Q>("from_seq=3&agent=x").is_ok());
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
        // An enum given a number is a type error at its path, not "not valid JSON".
        #[derive(serde::Deserialize, Debug)]
        #[expect(dead_code, reason = "fields exist to be parsed")]
        struct E {
            kind: Kind,
        }
        #[derive(serde::Deserialize, Debug)]
        enum Kind {
            A,
        }
        let e = parse::<E>(br#"{"kind": 12345}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("kind"), "{}", e.message);
    }
}
