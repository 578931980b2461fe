//! The axum middleware that turns a bearer token into a [`Principal`] request extension, and the
//! tonic interceptor that does the same from an internal JWT.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use weft_core::{Error, Principal};

use weft_store::TokenStore;

use crate::session::{self, SESSION_COOKIE};
use crate::{InternalJwt, TokenResolver};

/// The token in an `Authorization: Bearer …` header, if any; without an `Authorization` header,
/// the one in `x-api-key` (where Anthropic's SDKs send their key, so they can point at weft).
pub fn bearer_token(headers: &http::HeaderMap) -> Option<&str> {
    let Some(v) = headers.get(http::header::AUTHORIZATION) else {
        return headers
            .get("x-api-key")?
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|t| !t.is_empty());
    };
    let (scheme, token) = v.to_str().ok()?.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// State of the bearer-auth middleware: the resolver and how to render a refusal (the OpenAI
/// routes and the native routes have different error shapes).
#[derive(Clone)]
pub struct BearerAuth {
    pub resolver: TokenResolver,
    pub render: Arc<dyn Fn(Error) -> Response + Send + Sync>,
    /// Where web UI sessions are read, when a request without a bearer token may carry the
    /// session cookie instead (the native routes); `None` accepts bearer tokens only.
    pub sessions: Option<TokenStore>,
}

impl BearerAuth {
    /// `axum::middleware::from_fn_with_state(auth, BearerAuth::middleware)`.
    pub async fn middleware(
        State(auth): State<BearerAuth>,
        mut req: Request,
        next: Next,
    ) -> Response {
        let Some(token) = bearer_token(req.headers()) else {
            // The session cookie counts only on a request that names no token at all: a
            // malformed `Authorization` is refused, not quietly replaced by the session.
            let no_token = !req.headers().contains_key(http::header::AUTHORIZATION)
                && !req.headers().contains_key("x-api-key");
            if let (true, Some(store), Some(id)) = (
                no_token,
                &auth.sessions,
                session::cookie(req.headers(), SESSION_COOKIE),
            ) {
                let id = id.to_owned();
                let csrf = session::is_unsafe(req.method())
                    .then(|| req.headers().get(session::CSRF_HEADER).cloned());
                return match session_principal(store, &id, csrf).await {
                    Ok(p) => {
                        req.extensions_mut().insert(p);
                        next.run(req).await
                    }
                    Err(e) => (auth.render)(e),
                };
            }
            return (auth.render)(Error::unauthenticated(
                "missing bearer token; send `Authorization: Bearer wft_…` (or `x-api-key: wft_…`)",
            ));
        };
        match auth.resolver.resolve(token).await {
            Ok(p) => {
                req.extensions_mut().insert(p);
                next.run(req).await
            }
            Err(e) => (auth.render)(e),
        }
    }
}

/// The principal of the UI session `id`. `csrf` is `Some` for a call that changes state: the
/// `x-csrf-token` it carried, which must be the session's.
async fn session_principal(
    store: &TokenStore,
    id: &str,
    csrf: Option<Option<http::HeaderValue>>,
) -> Result<Principal, Error> {
    let s = session::find_session(store, id).await?;
    if let Some(sent) = csrf {
        session::check_csrf(&s, sent.as_ref())?;
    }
    Ok(session::principal(&s))
}

/// Verifies the internal JWT on every gRPC call and puts the [`Principal`] in the extensions.
#[derive(Clone, Debug)]
pub struct JwtInterceptor {
    jwt: InternalJwt,
}

impl JwtInterceptor {
    pub fn new(jwt: InternalJwt) -> Self {
        Self { jwt }
    }
}

impl tonic::service::Interceptor for JwtInterceptor {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let token = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                tonic::Status::from(Error::unauthenticated(
                    "missing internal token; only weft services may call this API",
                ))
            })?;
        let principal: Principal = self.jwt.verify(token).map_err(tonic::Status::from)?;
        req.extensions_mut().insert(principal);
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_parsed_case_insensitively() {
        let mut h = http::HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert("authorization", "bearer wft_x".parse().unwrap());
        assert_eq!(bearer_token(&h), Some("wft_x"));
        h.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
        h.insert("authorization", "Bearer ".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
    }

    #[test]
    fn x_api_key_is_used_only_without_an_authorization_header() {
        let mut h = http::HeaderMap::new();
        h.insert("x-api-key", " wft_k ".parse().unwrap());
        assert_eq!(bearer_token(&h), Some("wft_k"));
        h.insert("authorization", "Bearer wft_b".parse().unwrap());
        assert_eq!(bearer_token(&h), Some("wft_b"));
        // An Authorization header that is not a bearer token is not replaced by x-api-key.
        h.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
        h.remove("authorization");
        h.insert("x-api-key", "".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
    }
}
