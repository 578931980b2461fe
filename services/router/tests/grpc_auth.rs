//! The router refuses gRPC calls without a valid internal JWT.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use weft_auth::InternalJwt;
use weft_core::{Principal, Scopes, TenantId};
use weft_proto::v1;
use weft_proto::v1::router_client::RouterClient;

async fn start() -> (String, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let jwt = InternalJwt::new(
        b"router-test-secret-0123456789abcdef",
        Duration::from_secs(60),
    );
    tokio::spawn(weft_router::run(
        listener,
        weft_config::Config::default(),
        jwt,
        stop.clone(),
    ));
    (format!("http://{addr}"), stop)
}

fn principal() -> Principal {
    Principal {
        tenant: TenantId::parse("t").unwrap(),
        subject: "s".into(),
        scopes: Scopes::default(),
        token_id: None,
        agent: None,
    }
}

fn with_token<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

#[tokio::test]
async fn calls_without_a_valid_internal_token_are_refused() {
    let (url, stop) = start().await;
    let mut client = RouterClient::connect(url).await.unwrap();

    let err = client
        .list_models(v1::ListModelsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    let forged = InternalJwt::new(
        b"some-other-secret-0123456789abcdef",
        Duration::from_secs(60),
    )
    .sign(&principal())
    .unwrap();
    let err = client
        .list_models(with_token(v1::ListModelsRequest::default(), &forged))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    let good = InternalJwt::new(
        b"router-test-secret-0123456789abcdef",
        Duration::from_secs(60),
    )
    .sign(&principal())
    .unwrap();
    let models = client
        .list_models(with_token(v1::ListModelsRequest::default(), &good))
        .await
        .unwrap()
        .into_inner()
        .models;
    assert!(models.iter().any(|m| m.id == "mock-1"));
    stop.cancel();
}
