//! The web UI at `/ui`: `web/dist`, built by Vite, embedded in the binary at compile time.
//!
//! - A path that names a built file is that file. Hashed assets (`/ui/assets/…`) are cached for
//!   a year as immutable; everything else, `index.html` included, is `no-cache`, so a new build
//!   is picked up on the next load.
//! - Any other path under `/ui` is the single-page app's own route: it gets `index.html`, except
//!   under `/ui/assets/`, where a missing file is a 404 (a stale page asking for an old hash).
//! - A binary built without `web/dist` compiles and answers every `/ui` path with 503
//!   `ui_not_built`, saying how to build it.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rust_embed::RustEmbed;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;
use weft_api::common::Timestamp;
use weft_auth::session::{self, SESSION_COOKIE};
use weft_core::{Error, ErrorCode, TokenId};
use weft_store::UiSession;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{NativeJson, ValidJson};

#[derive(RustEmbed)]
#[folder = "../../web/dist/"]
#[allow_missing = true]
struct Dist;

/// The UI's routes: the app at `/ui` and everything under it, and its session at
/// `/ui/api/session`.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        // A browser opened on the gateway's URL lands on the app.
        .route(
            "/",
            get(|| async { axum::response::Redirect::temporary("/ui/") }),
        )
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/{*path}", get(asset))
        .route(
            "/ui/api/session",
            get(session_handler)
                .post(login_handler)
                .delete(logout_handler),
        )
}

pub use weft_api::ui::UiLogin as LoginBody;

fn session_out(s: &UiSession) -> weft_api::ui::UiSession {
    weft_api::ui::UiSession {
        tenant: s.token.tenant.to_string(),
        subject: s.token.subject.clone(),
        scopes: s.token.scopes.to_strings(),
        token_name: s.token.name.clone(),
        csrf_token: s.csrf_token.clone(),
        // Formatting fails only past year 9999, which no session's expiry reaches.
        expires_at: Timestamp(s.expires_at.format(&Rfc3339).unwrap_or_default()),
    }
}

/// `Set-Cookie` for session `value`, living `max_age` seconds (0 clears it). `Secure` when
/// `always_secure` (`gateway.ui_cookie_secure`) or when the request reached the TLS terminator
/// in front over https (the first `X-Forwarded-Proto` is `https`).
fn session_cookie(
    value: &str,
    max_age: u64,
    always_secure: bool,
    headers: &HeaderMap,
) -> HeaderValue {
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    let secure = if always_secure || https {
        "; Secure"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("weft_session=; Path=/; Max-Age=0"))
}

/// The `host[:port]` of an `Origin` header (`scheme://host[:port]`, http or https, nothing
/// after), lower-cased; `None` for anything else (`null`, a path, another scheme).
fn origin_authority(origin: &str) -> Option<String> {
    let (scheme, rest) = origin.split_once("://")?;
    let ok = (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        && !rest.is_empty()
        && !rest.contains(['/', '?', '#', '@']);
    ok.then(|| rest.to_ascii_lowercase())
}

/// Refuses a login a page of another origin sent: a browser's `Sec-Fetch-Site: cross-site`, or
/// an `Origin` that is not this host. This host is the request's `Host` (or the HTTP/2
/// authority), or the `X-Forwarded-Host` a proxy in front that rewrites `Host` sends. A request
/// without `Origin` (not a browser's cross-origin POST) passes: the JSON body already keeps
/// plain HTML forms out.
fn same_origin(headers: &HeaderMap, uri: &Uri) -> Result<(), ApiError> {
    let refuse = |why: String| {
        Err(ApiError::native(Error::forbidden(format!(
            "a UI session can only be opened from weft's own page; {why}"
        ))))
    };
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
    {
        return refuse("this request came from another site (Sec-Fetch-Site: cross-site)".into());
    }
    let Some(raw) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = String::from_utf8_lossy(raw.as_bytes());
    let Some(from) = origin_authority(&origin) else {
        return refuse(format!("Origin {origin:?} is not an http(s) origin"));
    };
    let first = |v: &HeaderValue| {
        v.to_str()
            .ok()
            .and_then(|v| v.split(',').next())
            .map(|v| v.trim().to_ascii_lowercase())
    };
    let hosts: Vec<String> = [
        headers.get(header::HOST).and_then(first),
        uri.authority().map(|a| a.as_str().to_ascii_lowercase()),
        headers.get("x-forwarded-host").and_then(first),
    ]
    .into_iter()
    .flatten()
    .collect();
    if hosts.contains(&from) {
        Ok(())
    } else {
        refuse(format!(
            "Origin {origin:?} is not this host ({})",
            hosts.join(", ")
        ))
    }
}

/// `POST /ui/api/session`: trades a token for a session cookie.
async fn login_handler(
    State(st): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    ValidJson(body): NativeJson<LoginBody>,
) -> Result<Response, ApiError> {
    same_origin(&headers, &uri)?;
    let principal = st
        .resolver
        .resolve(body.token.trim())
        .await
        .map_err(ApiError::native)?;
    // A session hangs off a token row (revoking the token ends it); an identity provider's JWT
    // has none.
    let token_id = principal
        .token_id
        .as_deref()
        .and_then(|id| id.parse::<Uuid>().ok())
        .ok_or_else(|| {
            ApiError::native(Error::invalid(
                "the web UI signs in with a weft token (`wft_…`), not an identity provider's JWT; create one with `weft token create`",
            ).with_param("token"))
        })?;
    let new = session::new_session();
    let ttl = st.ui_session_ttl;
    let expires_at = OffsetDateTime::now_utc() + ttl;
    st.tokens
        .open_session(&new.hash, TokenId(token_id), &new.csrf_token, expires_at)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "opening a UI session failed");
            ApiError::native(e.to_api())
        })?;
    // The session this browser held before, if any, ends: one browser, one session.
    if let Some(old) = session::cookie(&headers, SESSION_COOKIE) {
        st.tokens
            .close_session(&weft_auth::hash_token(old))
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "closing the previous UI session failed");
                ApiError::native(e.to_api())
            })?;
    }
    let s = session::find_session(&st.tokens, &new.id)
        .await
        .map_err(ApiError::native)?;
    let mut res = (StatusCode::CREATED, Json(session_out(&s))).into_response();
    res.headers_mut().insert(
        header::SET_COOKIE,
        session_cookie(&new.id, ttl.as_secs(), st.ui_cookie_secure, &headers),
    );
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(res)
}

/// `GET /ui/api/session`: who the session cookie acts as, and its CSRF token.
async fn session_handler(
    State(st): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = session::cookie(&headers, SESSION_COOKIE).ok_or_else(|| {
        ApiError::native(Error::unauthenticated(
            "no UI session; sign in with a token (POST /ui/api/session)",
        ))
    })?;
    let s = session::find_session(&st.tokens, id)
        .await
        .map_err(ApiError::native)?;
    let mut res = Json(session_out(&s)).into_response();
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(res)
}

/// `DELETE /ui/api/session`: logs out. Ends the session (with its CSRF token) and clears the
/// cookie; without an open session it only clears the cookie.
async fn logout_handler(
    State(st): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let open = match session::cookie(&headers, SESSION_COOKIE) {
        None => None,
        Some(id) => match session::find_session(&st.tokens, id).await {
            Ok(s) => Some((id, s)),
            // Already ended: only the cookie is left to clear.
            Err(e) if e.code == ErrorCode::Unauthenticated => None,
            // Postgres unreachable: do not report a logout that did not happen.
            Err(e) => return Err(ApiError::native(e)),
        },
    };
    if let Some((id, s)) = open {
        session::check_csrf(&s, headers.get(session::CSRF_HEADER)).map_err(ApiError::native)?;
        st.tokens
            .close_session(&weft_auth::hash_token(id))
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "closing a UI session failed");
                ApiError::native(e.to_api())
            })?;
    }
    let mut res = StatusCode::NO_CONTENT.into_response();
    res.headers_mut().insert(
        header::SET_COOKIE,
        session_cookie("", 0, st.ui_cookie_secure, &headers),
    );
    Ok(res)
}

async fn index() -> Response {
    serve("index.html")
}

async fn asset(Path(path): Path<String>) -> Response {
    // As everywhere in the API: a NUL in what the caller sent is a 400 naming the field.
    if path.contains('\0') {
        return ApiError::native(
            Error::invalid("`path` must not contain a NUL character").with_param("path"),
        )
        .into_response();
    }
    serve(&path)
}

/// Whether this binary carries a built UI.
pub fn built() -> bool {
    Dist::get("index.html").is_some()
}

const IMMUTABLE: &str = "public, max-age=31536000, immutable";
const NO_CACHE: &str = "no-cache";
/// The page loads only its own scripts and styles, talks only to its own origin, and may not be
/// framed.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; \
                   frame-ancestors 'none'";

fn serve(path: &str) -> Response {
    if !built() {
        return ApiError::native(Error::new(
            ErrorCode::UiNotBuilt,
            "this gateway was built without the web UI; run `npm ci && npm run build` in web/ \
             and rebuild the gateway (`./deploy/local/up.sh` does both)",
        ))
        .into_response();
    }
    if path.starts_with("api/") {
        return ApiError::native(Error::not_found(format!(
            "no route for /ui/{path}; the UI's API is /ui/api/session"
        )))
        .into_response();
    }
    let (name, file) = match Dist::get(path) {
        Some(f) if !path.ends_with('/') => (path, f),
        _ if path.starts_with("assets/") => {
            return ApiError::native(Error::not_found(format!(
                "no UI asset `/ui/{path}`; reload the page to get the current build"
            )))
            .into_response();
        }
        _ => match Dist::get("index.html") {
            Some(f) => ("index.html", f),
            None => return ApiError::native(Error::internal()).into_response(),
        },
    };
    let cache = if name.starts_with("assets/") {
        IMMUTABLE
    } else {
        NO_CACHE
    };
    // The embedded bytes are `'static`: served without a copy.
    let mut res = Response::new(Body::from(file.data));
    *res.status_mut() = StatusCode::OK;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(name)),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // On every file, not only the HTML: an SVG opened on its own is a document too.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    res
}

/// The media type of a built file, by its extension (Vite emits only these kinds).
fn content_type(name: &str) -> &'static str {
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    match ext {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "woff" => "font/woff",
        "ttf" => "font/ttf",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "avif" => "image/avif",
        "wasm" => "application/wasm",
        "webmanifest" => "application/manifest+json",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_login_from_another_origin_is_refused() {
        let uri: Uri = "/ui/api/session".parse().unwrap();
        let ok = |pairs: &[(&'static str, &str)]| same_origin(&headers(pairs), &uri).is_ok();
        assert!(ok(&[("host", "weft.example:8787")]));
        assert!(ok(&[
            ("host", "weft.example:8787"),
            ("origin", "http://weft.example:8787")
        ]));
        assert!(ok(&[
            ("host", "WEFT.example:8787"),
            ("origin", "https://weft.EXAMPLE:8787")
        ]));
        // A proxy that rewrites Host names the public one in X-Forwarded-Host.
        assert!(ok(&[
            ("host", "10.0.0.5:8787"),
            ("x-forwarded-host", "weft.example"),
            ("origin", "https://weft.example")
        ]));
        assert!(!ok(&[
            ("host", "weft.example:8787"),
            ("origin", "http://weft.example:9999")
        ]));
        assert!(!ok(&[
            ("host", "weft.example"),
            ("origin", "https://evil.example")
        ]));
        assert!(!ok(&[("host", "weft.example"), ("origin", "null")]));
        assert!(!ok(&[
            ("host", "weft.example"),
            ("origin", "http://weft.example/x")
        ]));
        assert!(!ok(&[("origin", "http://weft.example")]));
        assert!(!ok(&[
            ("host", "weft.example"),
            ("sec-fetch-site", "cross-site")
        ]));
        // HTTP/2 has no Host header: the request's authority stands in.
        let h2: Uri = "http://weft.example:8787/ui/api/session".parse().unwrap();
        assert!(same_origin(&headers(&[("origin", "http://weft.example:8787")]), &h2).is_ok());
    }

    #[test]
    fn the_cookie_is_secure_when_configured_or_behind_https() {
        let c = |secure, pairs: &[(&'static str, &str)]| {
            session_cookie("v", 5, secure, &headers(pairs))
                .to_str()
                .unwrap()
                .to_owned()
        };
        assert!(!c(false, &[]).contains("Secure"));
        assert!(c(true, &[]).ends_with("; Secure"));
        assert!(c(false, &[("x-forwarded-proto", "https, http")]).ends_with("; Secure"));
        assert!(!c(false, &[("x-forwarded-proto", "http")]).contains("Secure"));
    }

    #[test]
    fn content_types_follow_the_extension() {
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
        assert_eq!(
            content_type("assets/index-abc.js"),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(content_type("assets/x.css"), "text/css; charset=utf-8");
        assert_eq!(content_type("README"), "application/octet-stream");
    }

    #[test]
    fn without_a_build_every_path_is_ui_not_built_and_with_one_the_app_is_served() {
        let res = serve("runs/abc");
        if built() {
            assert_eq!(res.status(), StatusCode::OK);
            assert_eq!(
                res.headers()
                    .get(header::CACHE_CONTROL)
                    .map(|v| v.as_bytes()),
                Some(NO_CACHE.as_bytes())
            );
            assert_eq!(serve("assets/missing-0000.js").status(), 404);
            assert_eq!(serve("api/sesion").status(), 404);
            assert!(res.headers().contains_key(header::CONTENT_SECURITY_POLICY));
        } else {
            assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        }
    }
}
