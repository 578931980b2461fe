//! A small client for the gateway's public API, as an application would call it.

use std::time::Duration;

use serde_json::Value;

/// What one call came back with: a status (0 = no answer: the connection failed or was cut)
/// and the body as JSON (`Null` when it was not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    pub base: String,
    token: String,
}

impl Api {
    pub fn new(base: &str, token: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(8)
            .build()?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
        })
    }

    /// The token this client calls with.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The same client against another base URL (one gateway replica) or with another token.
    pub fn with(&self, base: Option<&str>, token: Option<&str>) -> Self {
        Self {
            http: self.http.clone(),
            base: base.map_or_else(|| self.base.clone(), |b| b.trim_end_matches('/').to_owned()),
            token: token.map_or_else(|| self.token.clone(), str::to_owned),
        }
    }

    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Answer {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                match resp.bytes().await {
                    Ok(bytes) => Answer {
                        status,
                        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                    },
                    Err(_) => Answer {
                        status: 0,
                        body: Value::Null,
                    },
                }
            }
            Err(_) => Answer {
                status: 0,
                body: Value::Null,
            },
        }
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Answer {
        self.call(reqwest::Method::PUT, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.call(reqwest::Method::DELETE, path, None).await
    }

    /// A streamed call read to its end: the status and the whole body as text (status 0 when
    /// the stream was cut before its end).
    pub async fn post_stream(&self, path: &str, body: &Value) -> (u16, String) {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await;
        match resp {
            Ok(r) => {
                let status = r.status().as_u16();
                match r.text().await {
                    Ok(t) => (status, t),
                    Err(_) => (0, String::new()),
                }
            }
            Err(_) => (0, String::new()),
        }
    }
}
