//! `/healthz` (the process is up), `/readyz` (Postgres, the router, NATS and Redis answer, not
//! shutting down),
//! `/metrics`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures::FutureExt as _;
use futures::future::BoxFuture;

use crate::AppState;

pub async fn healthz() -> Response {
    weft_telemetry::health::healthz().await
}

/// Ready when Postgres, the router, NATS and Redis answer through the gateway's own clients and
/// it is not shutting down (the shared evaluation of [`weft_telemetry::health`]).
pub async fn readyz(State(st): State<AppState>) -> Response {
    let checks: [(String, BoxFuture<'_, bool>); 4] = [
        (
            "postgres".into(),
            weft_store::ping(&st.pool).map(|r| r.is_ok()).boxed(),
        ),
        ("router".into(), st.router_ping().map(|r| r.is_ok()).boxed()),
        ("nats".into(), st.bus.ping().map(|r| r.is_ok()).boxed()),
        ("redis".into(), st.coord.ping().map(|r| r.is_ok()).boxed()),
    ];
    weft_telemetry::health::evaluate(checks, true, st.shutdown.is_cancelled())
        .await
        .into_response()
}

pub async fn metrics() -> Response {
    (
        [("content-type", "text/plain; version=0.0.4")],
        weft_telemetry::prometheus().render(),
    )
        .into_response()
}
