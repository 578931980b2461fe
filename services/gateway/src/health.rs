//! `/healthz` (the process is up), `/readyz` (Postgres, the router, NATS and Redis answer),
//! `/metrics`.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use weft_api::base::{Check, Health, Readiness, ReadyStatus};

use crate::AppState;

pub async fn healthz() -> Response {
    Json(Health::default()).into_response()
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
    let checks = [
        ("postgres", db),
        ("router", router),
        ("nats", nats),
        ("redis", redis),
    ];
    let body = Readiness {
        status: if ready {
            ReadyStatus::Ready
        } else {
            ReadyStatus::NotReady
        },
        checks: checks
            .into_iter()
            .map(|(name, ok)| (name.to_owned(), Check::from(ok)))
            .collect(),
    };
    (status, Json(body)).into_response()
}

pub async fn metrics() -> Response {
    (
        [("content-type", "text/plain; version=0.0.4")],
        weft_telemetry::prometheus().render(),
    )
        .into_response()
}
