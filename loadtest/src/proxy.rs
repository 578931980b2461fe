//! `proxy`: the floor under weft's gateway on this machine. A bare reverse proxy on the stack
//! weft is built on (axum serving, hyper's client calling, tokio with two workers; weft's
//! allocator not included): every request's method, path, body and content type go to the
//! upstream as they came, and its status and body come back, with no parsing, no auth, no
//! routing and no accounting. What it costs per request is what serving one HTTP hop and
//! making another costs here; weft's CPU per request minus this is what weft's own work costs.

use anyhow::Context as _;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{StatusCode, Uri, header};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::cli::ProxyArgs;

#[derive(Clone)]
struct Upstream {
    client: Client<HttpConnector, Full<Bytes>>,
    /// `scheme://authority` of the upstream.
    origin: String,
}

pub async fn run(args: &ProxyArgs) -> anyhow::Result<()> {
    let uri: Uri = args
        .upstream
        .parse()
        .with_context(|| format!("--upstream {:?} is not a URL", args.upstream))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        anyhow::bail!("--upstream {:?} needs a scheme and a host", args.upstream);
    };
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let up = Upstream {
        client: Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(256)
            .build(connector),
        origin: format!("{scheme}://{authority}"),
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("read the bound address")?;
    let base_url = format!("http://{addr}/v1");
    eprintln!("proxy: serving {base_url}, forwarding to {}", up.origin);
    if let Some(path) = &args.ready_file {
        crate::upstream::write_ready(path, &base_url, &addr.to_string())?;
    }
    let app = axum::Router::new().fallback(forward).with_state(up);
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let shutdown = async {
        let _ = crate::upstream::shutdown_signal().await;
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("serve")
}

async fn forward(State(up): State<Upstream>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(body) = body
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
    else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = format!("{}{path}", up.origin).parse::<Uri>() else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut out = http::Request::new(Full::new(body));
    *out.method_mut() = parts.method;
    *out.uri_mut() = uri;
    if let Some(ct) = parts.headers.get(header::CONTENT_TYPE) {
        out.headers_mut().insert(header::CONTENT_TYPE, ct.clone());
    }
    match up.client.request(out).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            // The body is buffered whole (so this proxy is for non-streamed calls): the
            // upstream's framing headers do not apply to what goes back.
            for h in [
                header::CONNECTION,
                header::TRANSFER_ENCODING,
                header::CONTENT_LENGTH,
            ] {
                parts.headers.remove(h);
            }
            match body.collect().await {
                Ok(b) => Response::from_parts(parts, Body::from(b.to_bytes())),
                Err(_) => StatusCode::BAD_GATEWAY.into_response(),
            }
        }
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}
