//! `/healthz` (the process is up), `/readyz` (Postgres, the router, NATS and Redis answer),
//! `/metrics`.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::AppState;

pub async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

pub async fn readyz(State(st): State<AppState>) -> Response {
    let deadline = Duration::from_secs(2);
    let db = matches!(
        tokio::time::timeout(deadline, weft_store::ping(&st.pool)).await,
        Ok(Ok(()))
    );
    let router = matches!(
        tokio::time::timeout(deadline, st.router_ping()).await,
        Ok(Ok(()))
    );
    let nats = matches!(
        tokio::time::timeout(deadline, st.bus.ping()).await,
        Ok(Ok(()))
    );
    let redis = matches!(
        tokio::time::timeout(deadline, st.coord.ping()).await,
        Ok(Ok(()))
    );
    let ready = db && router && nats && redis;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let word = |ok: bool| if ok { "ok" } else { "unavailable" };
    (
        status,
        Json(json!({
            "status": if ready { "ready" } else { "not_ready" },
            "checks": {"postgres": word(db), "router": word(router), "nats": word(nats), "redis": word(redis)},
        })),
    )
        .into_response()
}

pub async fn metrics() -> Response {
    (
        [("content-type", "text/plain; version=0.0.4")],
        weft_telemetry::prometheus().render(),
    )
        .into_response()
}
