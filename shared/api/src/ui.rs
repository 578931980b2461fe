//! The web UI's routes: the app (`/`, `/ui`, `/ui/`, `/ui/{path}`), embedded in the gateway, and
//! its session (`/ui/api/session`: log in with a token for a cookie, see it, log out).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::Timestamp;
use crate::op::{In, Op, Security};

/// `POST /ui/api/session`: the token to trade for a session cookie. Strict: an unknown field is
/// a 400.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct UiLogin {
    /// a wft_ API token
    #[schemars(extend("example" = "wft_…"))]
    pub token: String,
}

crate::objects_only!(deserialize: UiLogin);

/// A web UI session: who it acts as, and its CSRF token.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct UiSession {
    pub tenant: String,
    pub subject: String,
    pub scopes: Vec<String>,
    pub token_name: String,
    /// send it in x-csrf-token on every state-changing call made with the cookie
    pub csrf_token: String,
    pub expires_at: Timestamp,
}

const NOT_BUILT: &str = "ui_not_built: this gateway was built without web/dist (`npm ci && npm run build` in web/, then rebuild; `deploy/local/up.sh` does both)";

const APP: &str = "The single-page app built from web/ and embedded in the gateway binary. `index.html` is sent with `Cache-Control: no-cache`. See docs/ui.md.";

/// A route that serves the app's index.html.
fn app(path: &'static str, summary: &'static str) -> Op {
    Op::get(path, summary)
        .describe(APP)
        .tag("ui")
        .security(Security::Open)
        .answer_in::<String>(200, "text/html", "the app's index.html")
        .error(503, NOT_BUILT)
}

pub fn ops() -> Vec<Op> {
    vec![
        Op::get("/", "The root: a redirect to the web UI")
            .describe("`307` to `/ui/`, so a browser opened on the gateway's URL lands on the app. See docs/ui.md.")
            .tag("ui")
            .security(Security::Open)
            .empty(307, "a redirect to `/ui/`")
            .header::<String>("Location", "`/ui/`")
            .answer_in::<String>(200, "text/html", "the app's index.html, for a client that follows the redirect")
            .error(503, NOT_BUILT),
        app("/ui", "The web UI"),
        app("/ui/", "The web UI (the same as /ui)"),
        Op::get("/ui/{path}", "A file of the web UI, or the app for one of its own routes")
            .describe("A built file (hashed assets under `assets/` are cached for a year as immutable); any other path is the app's own route and gets index.html (`no-cache`). A missing file under `assets/` is a 404.")
            .tag("ui")
            .security(Security::Open)
            .param::<String>(In::Path, "path", true, Some("the rest of the path after /ui/"), None)
            .answer_in::<String>(200, "*/*", "the file, or index.html")
            .error(400, "a NUL in the path")
            .error(404, "a missing hashed asset")
            .error(503, NOT_BUILT),
        Op::get("/ui/api/session", "The web UI session of this browser")
            .describe("Who the session cookie acts as, and the CSRF token the page sends in `x-csrf-token` on state-changing calls. Takes the `weft_session` cookie only, never a bearer token.")
            .tag("ui")
            .security(Security::UiSession)
            .ok::<UiSession>("the open session")
            .error(401, "no session cookie, or the session ended (logged out, expired, or its token revoked or expired)"),
        Op::post("/ui/api/session", "Log in: trade a token for a session cookie")
            .describe("Answers with `Set-Cookie: weft_session=…; HttpOnly; SameSite=Strict; Path=/` (plus `Secure` behind a TLS terminator that sends `X-Forwarded-Proto: https`). The session acts as the token's principal until it expires (`gateway.ui_session_ttl_secs`), is logged out, or the token is revoked or expires. A browser `Origin` other than this host is refused. The token is not kept.")
            .tag("ui")
            .security(Security::Open)
            .body::<UiLogin>()
            .answer::<UiSession>(201, "the session (the cookie is in Set-Cookie)")
            .error(400, "a malformed body")
            .error(401, "the token is unknown, malformed, expired or revoked")
            .error(403, "sent from a page of another origin")
            .error(415, "the body is not JSON"),
        Op::delete("/ui/api/session", "Log out")
            .describe("Ends the session and clears the cookie. With an open session the call needs its CSRF token in `x-csrf-token`; without one (no cookie, or a session already ended) it only clears the cookie, so the cookie is optional.")
            .tag("ui")
            .security(Security::UiSessionOptional)
            .param::<String>(In::Header, "x-csrf-token", false, Some("the session's CSRF token (from GET /ui/api/session)"), None)
            .empty(204, "logged out; the cookie is cleared")
            .error(403, "an open session, and `x-csrf-token` missing or wrong"),
    ]
}
