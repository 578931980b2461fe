//! The fleet's HTTP API as the subcommands that drive a running fleet call it (`weft run`,
//! `attach`, `chat`, `process test`): the caller's token, JSON bodies, and errors that say what
//! to do (start the fleet, fix the token, …).

use std::time::Duration;

use serde_json::Value;

/// How long a call other than a stream may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// A stream that sends nothing for this long is taken for dead and re-attached (the gateway
/// sends a keepalive comment every 15 s).
const STREAM_SILENCE: Duration = Duration::from_secs(45);

/// The fleet's API, with the caller's token.
pub struct Api {
    pub base: String,
    token: String,
    http: reqwest::Client,
}

/// An answer that is not a success.
pub struct Refusal {
    pub status: u16,
    pub body: Value,
    /// `Retry-After`, when the fleet gave one.
    pub retry_after: Option<Duration>,
}

impl Api {
    pub fn new(base: &str, token: &str) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(STREAM_SILENCE)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            http,
        })
    }

    /// What to say when the fleet cannot be reached.
    pub fn unreachable(&self, e: &reqwest::Error) -> String {
        format!(
            "cannot reach the fleet at {} ({e}); start it (`weft up`) or give its gateway's URL with --url",
            self.base
        )
    }

    /// One JSON call: the status and the JSON body (`null` when the body is not JSON).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .timeout(CALL_TIMEOUT);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| self.unreachable(&e))?;
        let status = resp.status().as_u16();
        Ok((status, resp.json().await.unwrap_or(Value::Null)))
    }

    /// Opens the run's event stream from `from_seq`. `Err(Ok(_))` is the fleet's refusal,
    /// `Err(Err(_))` a fleet that could not be reached.
    pub async fn stream(
        &self,
        run: &str,
        from_seq: i64,
    ) -> Result<reqwest::Response, Result<Refusal, String>> {
        let req = self.http.get(format!(
            "{}/v1/runs/{run}/stream?from_seq={from_seq}",
            self.base
        ));
        self.open(req).await
    }

    /// Creates a run with `body` (which asks for `stream: true`) and answers its event stream
    /// from seq 1, as [`Api::stream`] does.
    pub async fn create_streaming(
        &self,
        body: &Value,
    ) -> Result<reqwest::Response, Result<Refusal, String>> {
        let req = self.http.post(format!("{}/v1/runs", self.base)).json(body);
        self.open(req).await
    }

    async fn open(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Result<Refusal, String>> {
        let resp = req
            .bearer_auth(&self.token)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| Err(self.unreachable(&e)))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = resp.json().await.unwrap_or(Value::Null);
        Err(Ok(Refusal {
            status,
            body,
            retry_after,
        }))
    }
}

/// What the fleet said, with how to fix the usual causes: `what` is the thing refused ("cannot
/// start a run of agent `a`").
pub fn refused(what: &str, status: u16, body: &Value) -> String {
    let said = match body["error"]["message"].as_str() {
        Some(m) => format!("{status}: {m}"),
        None => format!("HTTP {status}"),
    };
    let hint = match status {
        401 => {
            "; check $WEFT_TOKEN or --token (mint a token with `weft token create` or POST /v1/tokens)"
        }
        403 => "; the token needs the scopes runs:create and runs:read",
        _ => "",
    };
    format!("{what} ({said}){hint}")
}
