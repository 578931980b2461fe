//! Web UI sessions: a browser trades a `wft_` token for an HttpOnly, `SameSite=Strict` cookie
//! holding a random session id. The session acts as its token (read through a join on every
//! request, so revoking the token ends it), expires, and can be closed. A state-changing call
//! made with the cookie must also carry the session's CSRF token in `x-csrf-token`, which a page
//! of another origin can neither read nor set.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore as _;
use subtle::ConstantTimeEq as _;
use time::OffsetDateTime;
use weft_core::{Error, Principal};
use weft_store::{TokenStore, UiSession};

use crate::token::hash_token;

/// The cookie that carries the session id.
pub const SESSION_COOKIE: &str = "weft_session";
/// The header that carries the session's CSRF token on state-changing calls.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Every session id starts with this.
pub const SESSION_PREFIX: &str = "wfs_";

/// A new session's secrets: the cookie value (never stored), its hash, and the CSRF token.
pub struct NewSession {
    pub id: String,
    pub hash: [u8; 32],
    pub csrf_token: String,
}

impl std::fmt::Debug for NewSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewSession").finish_non_exhaustive()
    }
}

fn random_b64() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

pub fn new_session() -> NewSession {
    let id = format!("{SESSION_PREFIX}{}", random_b64());
    NewSession {
        hash: hash_token(&id),
        id,
        csrf_token: random_b64(),
    }
}

/// The value of cookie `name` among the request's `Cookie` headers. `None` when it is missing,
/// empty, or sent more than once: a second `weft_session` can only have been planted (by a
/// sibling domain, for a narrower path), and picking either could act as someone else.
pub fn cookie<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    let mut found = headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(k, _)| *k == name)
        .map(|(_, v)| v.trim());
    let first = found.next()?;
    if found.next().is_some() || first.is_empty() {
        return None;
    }
    Some(first)
}

/// Whether `id` has the shape of a session id (`wfs_` and 43 base64url characters), checked
/// before any query so garbage costs nothing.
fn well_formed(id: &str) -> bool {
    id.strip_prefix(SESSION_PREFIX).is_some_and(|rest| {
        rest.len() == 43
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// Whether a method changes state (and so needs the CSRF token when sent with the cookie).
pub fn is_unsafe(method: &http::Method) -> bool {
    !matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

/// The session behind cookie value `id`, if it is open; a 401 that says what to do when it is
/// not (unknown, malformed, logged out, expired, or its token revoked or expired). Any other
/// error is the store's (Postgres unreachable).
pub async fn find_session(store: &TokenStore, id: &str) -> Result<UiSession, Error> {
    let ended = || Error::unauthenticated("the UI session has ended or is unknown; sign in again");
    if !well_formed(id) {
        return Err(ended());
    }
    let hash = hash_token(id);
    let session = store.find_session(&hash).await.map_err(|e| {
        tracing::error!(error = %e, "session lookup failed");
        e.to_api()
    })?;
    match session {
        Some(s) if s.is_active(OffsetDateTime::now_utc()) && s.token.hash.len() == 32 => Ok(s),
        _ => Err(ended()),
    }
}

/// The principal a session acts as.
pub fn principal(s: &UiSession) -> Principal {
    Principal {
        tenant: s.token.tenant.clone(),
        subject: s.token.subject.clone(),
        scopes: s.token.scopes.clone(),
        token_id: Some(s.token.id.to_string()),
        agent: None,
    }
}

/// Refuses a state-changing call whose `x-csrf-token` (`sent`) is missing or not the session's.
pub fn check_csrf(s: &UiSession, sent: Option<&http::HeaderValue>) -> Result<(), Error> {
    let sent = sent.map(http::HeaderValue::as_bytes).unwrap_or_default();
    if bool::from(sent.ct_eq(s.csrf_token.as_bytes())) {
        Ok(())
    } else {
        Err(Error::forbidden(format!(
            "a state-changing call made with the UI session cookie must send the session's \
             CSRF token in `{CSRF_HEADER}` (GET /ui/api/session returns it)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_ids_are_looked_up() {
        assert!(well_formed(&new_session().id));
        assert!(!well_formed("wfs_AAAA"));
        assert!(!well_formed(&format!("wft_{}", "a".repeat(43))));
        assert!(!well_formed(&format!("wfs_{}", "a/".repeat(21) + "a")));
    }

    #[test]
    fn a_cookie_sent_twice_is_no_cookie() {
        let mut h = http::HeaderMap::new();
        h.append(http::header::COOKIE, "weft_session=wfs_a".parse().unwrap());
        h.append(
            http::header::COOKIE,
            "x=1; weft_session=wfs_b".parse().unwrap(),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), None);
        assert_eq!(cookie(&h, "x"), Some("1"));
    }

    #[test]
    fn cookies_are_found_by_name_across_headers() {
        let mut h = http::HeaderMap::new();
        h.append(
            http::header::COOKIE,
            "a=1; weft_theme=dark".parse().unwrap(),
        );
        h.append(
            http::header::COOKIE,
            "weft_session=wfs_x ; b=2".parse().unwrap(),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("wfs_x"));
        assert_eq!(cookie(&h, "a"), Some("1"));
        assert_eq!(cookie(&h, "weft"), None);
        h.clear();
        h.append(http::header::COOKIE, "weft_session=".parse().unwrap());
        assert_eq!(cookie(&h, SESSION_COOKIE), None);
    }

    #[test]
    fn new_sessions_are_unique_and_hash_to_themselves() {
        let a = new_session();
        let b = new_session();
        assert!(a.id.starts_with(SESSION_PREFIX));
        assert_ne!(a.id, b.id);
        assert_ne!(a.csrf_token, b.csrf_token);
        assert_eq!(hash_token(&a.id), a.hash);
        assert!(!format!("{a:?}").contains(&a.id));
    }

    #[test]
    fn only_reads_are_safe() {
        assert!(!is_unsafe(&http::Method::GET));
        assert!(!is_unsafe(&http::Method::HEAD));
        assert!(is_unsafe(&http::Method::POST));
        assert!(is_unsafe(&http::Method::DELETE));
        assert!(is_unsafe(&http::Method::PUT));
    }
}
