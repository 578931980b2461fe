//! Observability for every weft service (logs on stderr, Prometheus `/metrics`, OTLP traces, W3C
//! trace context in gRPC metadata, HTTP headers and, through `weft_bus`, NATS headers) and the
//! process plumbing every binary shares: signals, [`boot`], [`runtime`] and [`alloc`]. Spans and
//! logs carry ids, sizes, codes and timings, never prompts, completions, tool results or tokens.

pub mod alloc;
pub mod boot;
pub mod handles;
pub mod health;
pub mod runtime;

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};
use weft_config::{LogFormat, TelemetryConfig};

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("telemetry.log_level {0:?} is not a valid filter: {1}")]
    Filter(String, String),
    #[error("telemetry.otlp_endpoint: {0}")]
    Otlp(String),
    #[error("{0}")]
    Env(String),
}

/// Keeps the tracer provider alive; dropping it flushes pending spans.
pub struct TelemetryGuard {
    provider: SdkTracerProvider,
}

impl std::fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TelemetryGuard")
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        // The flush waits (up to 5 s) on the exporter's tasks, so it must not block a worker.
        let on_worker = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let shutdown = || self.provider.shutdown();
        let flushed = if on_worker {
            tokio::task::block_in_place(shutdown)
        } else {
            shutdown()
        };
        if let Err(e) = flushed {
            eprintln!("telemetry: flushing spans failed: {e}");
        }
    }
}

/// Targets never logged, whatever `telemetry.log_level` says: rmcp logs what a peer sent, which
/// may echo a run credential (the MCP bridge reports those failures itself, redacted).
const QUIET_TARGETS: &[&str] = &["rmcp"];

/// `log_level` with each quiet target set to `off`, in the filter's own directives: a separate
/// filter layer would lose the level hint and make every dependency's `log` records get built.
fn quieted(log_level: &str) -> String {
    let quiet = |d: &str| {
        let target = d.split(['=', '[']).next().unwrap_or_default().trim();
        QUIET_TARGETS.iter().any(|t| {
            target
                .strip_prefix(t)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
        })
    };
    let mut out: Vec<String> = log_level
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty() && !quiet(d))
        .map(str::to_owned)
        .collect();
    out.extend(QUIET_TARGETS.iter().map(|t| format!("{t}=off")));
    out.join(",")
}

/// Where and whether spans are exported, from `telemetry.otlp_endpoint` and the standard
/// OpenTelemetry variables (docs/operations.md, Tracing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    /// The OTLP/gRPC endpoint.
    pub endpoint: String,
    /// `service.name`: `OTEL_SERVICE_NAME`, else the binary's name.
    pub service_name: String,
}

/// The export `cfg` and the environment (`env` reads one variable) ask for; `None` when spans
/// are not exported. `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn export off
/// whatever else is set; otherwise `telemetry.otlp_endpoint` wins over
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, which wins over `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub fn export_from(
    service: &str,
    cfg: &TelemetryConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Export>, TelemetryError> {
    let set = |k: &str| {
        env(k)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    match set("OTEL_TRACES_EXPORTER").as_deref() {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => {
            return Err(TelemetryError::Env(format!(
                "OTEL_TRACES_EXPORTER={other} is not supported; set it to otlp or none"
            )));
        }
    }
    let endpoint = cfg
        .otlp_endpoint
        .clone()
        .filter(|e| !e.trim().is_empty())
        .or_else(|| set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"));
    let Some(endpoint) = endpoint else {
        return Ok(None);
    };
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(p) = set(var) {
            if p != "grpc" {
                return Err(TelemetryError::Env(format!(
                    "{var}={p} is not supported; weft exports OTLP over grpc only: set it to grpc \
                     and point the endpoint at the collector's gRPC port (4317)"
                )));
            }
            break;
        }
    }
    let service_name = set("OTEL_SERVICE_NAME").unwrap_or_else(|| service.to_owned());
    Ok(Some(Export {
        endpoint,
        service_name,
    }))
}

/// Installs the global subscriber once per process; later calls only return a guard.
pub fn init(
    service: &'static str,
    cfg: &TelemetryConfig,
) -> Result<TelemetryGuard, TelemetryError> {
    let filter = EnvFilter::try_new(quieted(&cfg.log_level))
        .map_err(|e| TelemetryError::Filter(cfg.log_level.clone(), e.to_string()))?;
    let export = export_from(service, cfg, |k| std::env::var(k).ok())?;
    // The default resource reads OTEL_RESOURCE_ATTRIBUTES; the sampler comes from
    // OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (the SDK's default config reads them).
    let mut builder = SdkTracerProvider::builder().with_resource(
        opentelemetry_sdk::Resource::builder()
            .with_service_name(
                export
                    .as_ref()
                    .map_or_else(|| service.to_owned(), |e| e.service_name.clone()),
            )
            .build(),
    );
    // OpenTelemetry spans only with an exporter: building them costs allocations per request.
    if let Some(export) = &export {
        use opentelemetry_otlp::WithExportConfig as _;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(&export.endpoint)
            .build()
            .map_err(|e| TelemetryError::Otlp(e.to_string()))?;
        builder = builder.with_batch_exporter(exporter);
    }
    let provider = builder.build();
    let otel = export.is_some().then(|| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(service))
            .boxed()
    });
    let format = match cfg.log_format {
        LogFormat::Auto if std::io::IsTerminal::is_terminal(&std::io::stderr()) => LogFormat::Text,
        LogFormat::Auto => LogFormat::Json,
        f => f,
    };
    // A second init in the same process fails harmlessly: the first subscriber stays.
    let _ = subscriber(filter, format, std::io::stderr, otel).try_init();
    Ok(TelemetryGuard { provider })
}

/// The target of the spans made once per request on the hot paths (the gateway's `http`, the
/// router's `router.chat`, `router.embed` and `provider_call`): what [`logs_carry_spans`] keeps
/// off below `debug`.
pub const REQUEST_SPANS: &str = "weft::request";

/// Whether the per-request spans ([`REQUEST_SPANS`]: the request's id, method and route on
/// every line logged while serving it) are on for the log lines: only when `filter` lets debug
/// through somewhere. At `info` and quieter no per-request line is logged, and building and
/// formatting those spans for lines never written cost 13% of a chat request's CPU at c=64
/// (loadtest/results/chat.md), so they are then off, or kept from the log layer when exported.
/// A line that needs its request names it in its own fields (the gateway's "request failed");
/// other spans (a run's, with its id) stay on the lines.
fn logs_carry_spans(filter: &EnvFilter) -> bool {
    filter
        .max_level_hint()
        .is_none_or(|l| l >= tracing::level_filters::LevelFilter::DEBUG)
}

/// A filter by callsite, as a plain function.
type CallsiteFilter = tracing_subscriber::filter::FilterFn<fn(&tracing::Metadata<'_>) -> bool>;

/// What the log and OpenTelemetry layers sit on: the level filter over the registry, then (when
/// nothing reads them) the filter that turns the per-request spans off.
type Filtered = tracing_subscriber::layer::Layered<
    Option<CallsiteFilter>,
    tracing_subscriber::layer::Layered<EnvFilter, tracing_subscriber::Registry>,
>;

/// Not a per-request span ([`REQUEST_SPANS`]).
fn not_a_request_span(m: &tracing::Metadata<'_>) -> bool {
    m.is_event() || m.target() != REQUEST_SPANS
}

/// A layer over [`Filtered`], boxed (the OpenTelemetry layer, when it exports).
type BoxedLayer = Box<dyn tracing_subscriber::Layer<Filtered> + Send + Sync>;

/// The subscriber [`init`] installs: `filter` over everything, the log layer writing `format`
/// to `writer` (with the per-request spans per [`logs_carry_spans`]), and the OpenTelemetry
/// layer when given.
fn subscriber<W>(
    filter: EnvFilter,
    format: LogFormat,
    writer: W,
    otel: Option<BoxedLayer>,
) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let spans = logs_carry_spans(&filter);
    let fmt: BoxedLayer = match format {
        LogFormat::Json | LogFormat::Auto => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer().with_writer(writer).boxed(),
    };
    let keep: fn(&tracing::Metadata<'_>) -> bool = not_a_request_span;
    // With no exporter nobody reads them: off altogether (never built). With one, built for it
    // and kept from the log layer.
    let off = (!spans && otel.is_none()).then(|| tracing_subscriber::filter::filter_fn(keep));
    let fmt = if !spans && otel.is_some() {
        fmt.with_filter(tracing_subscriber::filter::filter_fn(keep))
            .boxed()
    } else {
        fmt
    };
    let layers: Vec<BoxedLayer> = std::iter::once(fmt).chain(otel).collect();
    tracing_subscriber::registry()
        .with(filter)
        .with(off)
        .with(layers)
}

/// The process-wide Prometheus recorder (installed on first use) for `/metrics`.
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&[
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0,
            ])
            .map(PrometheusBuilder::build_recorder)
            .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
        let handle = recorder.handle();
        // Another recorder may already be installed (a test harness); then ours only renders.
        let _ = metrics::set_global_recorder(recorder);
        // Without the exporter's upkeep task, histogram samples pile up until a scrape (RSS
        // grew with every request); drain them on a thread (this may run outside a runtime).
        let upkeep = handle.clone();
        let _ = std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                loop {
                    std::thread::sleep(METRICS_UPKEEP_EVERY);
                    upkeep.run_upkeep();
                }
            });
        handle
    })
}

/// How often pending histogram samples are drained into their buckets.
const METRICS_UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

struct MetadataInjector<'a>(&'a mut tonic::metadata::MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
            value.parse(),
        ) {
            self.0.insert(k, v);
        }
    }
}

struct MetadataExtractor<'a>(&'a tonic::metadata::MetadataMap);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// Writes the current span's W3C `traceparent` into outgoing gRPC metadata.
pub fn inject_trace_context(md: &mut tonic::metadata::MetadataMap) {
    let cx = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&cx, &mut MetadataInjector(md));
}

/// Makes `span` a child of the W3C trace context in incoming gRPC metadata, if there is one.
pub fn adopt_trace_context(span: &tracing::Span, md: &tonic::metadata::MetadataMap) {
    let cx = TraceContextPropagator::new().extract(&MetadataExtractor(md));
    let _ = span.set_parent(cx);
}

/// An [`Injector`] over any `set(key, value)`.
struct FnInjector<F>(F);

impl<F: FnMut(&str, String)> Injector for FnInjector<F> {
    fn set(&mut self, key: &str, value: String) {
        (self.0)(key, value);
    }
}

/// An [`Extractor`] over any `get(key)`; the W3C propagator only gets its two keys.
struct FnExtractor<'a, F>(F, std::marker::PhantomData<&'a ()>);

impl<'a, F: Fn(&str) -> Option<&'a str>> Extractor for FnExtractor<'a, F> {
    fn get(&self, key: &str) -> Option<&str> {
        (self.0)(key)
    }

    fn keys(&self) -> Vec<&str> {
        Vec::new()
    }
}

/// Hands the current span's W3C trace context (`traceparent`, and `tracestate` when there is
/// one) to `set`, for a carrier that is neither gRPC metadata nor HTTP headers (NATS headers:
/// `weft_bus`). Nothing is set when spans are not exported.
pub fn inject_trace_context_with(set: impl FnMut(&str, String)) {
    let cx = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&cx, &mut FnInjector(set));
}

/// Makes `span` a child of the W3C trace context `get` finds, if any; call it before `span`
/// is first entered (a started span keeps its parent).
pub fn adopt_trace_context_with<'a>(span: &tracing::Span, get: impl Fn(&str) -> Option<&'a str>) {
    let cx = TraceContextPropagator::new().extract(&FnExtractor(get, std::marker::PhantomData));
    let _ = span.set_parent(cx);
}

/// Writes the current span's W3C trace context into outgoing HTTP headers (a provider call, the
/// HTTP tool).
pub fn inject_http_trace_context(headers: &mut axum::http::HeaderMap) {
    inject_trace_context_with(|k, v| {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::from_bytes(k.as_bytes()),
            axum::http::HeaderValue::from_str(&v),
        ) {
            headers.insert(k, v);
        }
    });
}

/// Makes `span` a child of the W3C trace context in incoming HTTP headers (`traceparent`), if
/// there is one; before `span` is first entered.
pub fn adopt_http_trace_context(span: &tracing::Span, headers: &axum::http::HeaderMap) {
    // Most requests carry none: they pay one header lookup.
    if !headers.contains_key("traceparent") {
        return;
    }
    adopt_trace_context_with(span, |k| headers.get(k).and_then(|v| v.to_str().ok()));
}

/// The next delivery of a signal; never, when its handler could not be installed.
#[cfg(unix)]
async fn next_signal(s: Option<tokio::signal::unix::Signal>) {
    match s {
        Some(mut s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// Cancels `token` on the first SIGINT or SIGTERM.
pub fn shutdown_on_signal(
    token: tokio_util::sync::CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    // The handlers are installed now, not on the future's first poll: a SIGTERM that arrives
    // right after a process announces it is up must drain it, not kill it.
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::terminate()).ok(),
            signal(SignalKind::interrupt()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let (term, int) = signals;
            tokio::select! {
                () = next_signal(term) => {}
                () = next_signal(int) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutdown signal received; draining");
        token.cancel();
    }
}

/// Serves `GET /metrics` on `listener` until `shutdown` (for services whose listener is gRPC).
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    let handle = prometheus();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || async move { handle.render() }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// A binary's start: load the config from its flags, then install telemetry for `service`.
/// The error is a message for stderr (exit code 2).
pub fn start(
    service: &'static str,
    args: &weft_config::CommonArgs,
    overrides: weft_config::Overrides,
) -> Result<(weft_config::Config, TelemetryGuard), String> {
    let config = args.load(overrides).map_err(|e| e.to_string())?;
    let guard = init(service, &config.telemetry).map_err(|e| e.to_string())?;
    Ok((config, guard))
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// Log lines written to memory.
    #[derive(Clone, Default)]
    struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// One request's span with an event inside it, under the subscriber `init` builds at
    /// `level`, with or without the OpenTelemetry layer: (span disabled?, the log output).
    fn one_request(level: &str, with_otel: bool) -> (bool, String) {
        let lines = Lines::default();
        let writer = lines.clone();
        let provider = SdkTracerProvider::builder().build();
        let otel = with_otel.then(|| {
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("test"))
                .boxed()
        });
        let filter = EnvFilter::try_new(quieted(level)).unwrap();
        let sub = subscriber(filter, LogFormat::Json, move || writer.clone(), otel);
        let disabled = tracing::subscriber::with_default(sub, || {
            let run = tracing::info_span!("run", run_id = "run-7");
            let _run = run.enter();
            let span = tracing::info_span!(
                target: REQUEST_SPANS,
                "http",
                request_id = "r-1",
                route = "/v1/x"
            );
            span.in_scope(|| tracing::warn!(status = 503, "request failed"));
            span.is_disabled()
        });
        (disabled, lines.text())
    }

    #[test]
    fn at_info_the_log_layer_builds_no_spans_and_still_logs() {
        let (disabled, out) = one_request("info", false);
        assert!(
            disabled,
            "nothing reads a request's span at info without export"
        );
        assert!(
            out.contains("request failed") && out.contains("503"),
            "{out}"
        );
        assert!(!out.contains("r-1"), "no request span on the line: {out}");
        assert!(out.contains("run-7"), "other spans stay on the line: {out}");
    }

    #[test]
    fn at_debug_the_lines_carry_their_request() {
        let (disabled, out) = one_request("info,weft::request=debug", false);
        assert!(!disabled);
        assert!(
            out.contains("request failed") && out.contains("r-1"),
            "{out}"
        );
    }

    #[test]
    fn exported_spans_exist_at_info_without_being_formatted() {
        let (disabled, out) = one_request("info", true);
        assert!(!disabled, "the exporter reads the span");
        assert!(
            out.contains("request failed") && !out.contains("r-1"),
            "{out}"
        );
    }

    #[test]
    fn trace_context_crosses_grpc_metadata() {
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            let caller = tracing::info_span!("caller");
            let mut md = tonic::metadata::MetadataMap::new();
            caller.in_scope(|| inject_trace_context(&mut md));
            let header = md
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .expect("a traceparent header")
                .to_owned();
            let parts: Vec<&str> = header.split('-').collect();
            assert_eq!(parts.len(), 4, "{header}");
            assert_eq!(parts[0], "00");
            let caller_trace = caller.context().span().span_context().trace_id();
            assert_eq!(parts[1], caller_trace.to_string());

            let callee = tracing::info_span!("callee");
            adopt_trace_context(&callee, &md);
            let _entered = callee.enter();
            assert_eq!(
                callee.context().span().span_context().trace_id(),
                caller_trace,
                "the callee joins the caller's trace"
            );
        });
    }
}

#[cfg(test)]
mod export_tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    fn cfg(endpoint: Option<&str>) -> TelemetryConfig {
        TelemetryConfig {
            otlp_endpoint: endpoint.map(str::to_owned),
            ..TelemetryConfig::default()
        }
    }

    #[test]
    fn nothing_configured_exports_nothing() {
        assert_eq!(
            export_from("weft-router", &cfg(None), env(&[])).unwrap(),
            None
        );
    }

    #[test]
    fn the_standard_variables_configure_export_and_the_config_key_wins() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
            ("OTEL_SERVICE_NAME", "edge"),
        ];
        let e = export_from("weft-gateway", &cfg(None), env(&vars))
            .unwrap()
            .unwrap();
        assert_eq!(
            (e.endpoint.as_str(), e.service_name.as_str()),
            ("http://a:4317", "edge")
        );
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4317"),
        ];
        let e = export_from("weft-gateway", &cfg(None), env(&vars))
            .unwrap()
            .unwrap();
        assert_eq!(
            (e.endpoint.as_str(), e.service_name.as_str()),
            ("http://t:4317", "weft-gateway")
        );
        let e = export_from("weft-gateway", &cfg(Some("http://c:4317")), env(&vars))
            .unwrap()
            .unwrap();
        assert_eq!(e.endpoint, "http://c:4317");
    }

    #[test]
    fn disabled_wins_and_other_protocols_are_refused_with_the_fix() {
        let vars = [("OTEL_SDK_DISABLED", "TRUE")];
        assert_eq!(
            export_from("w", &cfg(Some("http://c:4317")), env(&vars)).unwrap(),
            None
        );
        let vars = [
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
        ];
        assert_eq!(export_from("w", &cfg(None), env(&vars)).unwrap(), None);
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ];
        let e = export_from("w", &cfg(None), env(&vars))
            .unwrap_err()
            .to_string();
        assert!(e.contains("set it to grpc"), "{e}");
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ];
        assert!(export_from("w", &cfg(None), env(&vars)).unwrap().is_some());
    }

    #[test]
    fn trace_context_crosses_http_headers() {
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            use opentelemetry::trace::TraceContextExt as _;
            let caller = tracing::info_span!("caller");
            let mut headers = axum::http::HeaderMap::new();
            caller.in_scope(|| inject_http_trace_context(&mut headers));
            assert!(headers.contains_key("traceparent"));
            let callee = tracing::info_span!("callee");
            adopt_http_trace_context(&callee, &headers);
            let _entered = callee.enter();
            assert_eq!(
                callee.context().span().span_context().trace_id(),
                caller.context().span().span_context().trace_id()
            );
        });
    }

    #[test]
    fn without_the_layer_nothing_is_injected() {
        let mut headers = axum::http::HeaderMap::new();
        let span = tracing::info_span!("untraced");
        span.in_scope(|| inject_http_trace_context(&mut headers));
        assert!(headers.is_empty());
    }
}

#[cfg(test)]
mod quiet_tests {
    use super::quieted;

    #[test]
    fn rmcp_stays_off_whatever_the_level_says() {
        assert_eq!(quieted("info"), "info,rmcp=off");
        assert_eq!(
            quieted("debug,rmcp=trace,rmcp::transport::worker=debug,weft=debug"),
            "debug,weft=debug,rmcp=off"
        );
        assert_eq!(quieted("rmcpx=debug"), "rmcpx=debug,rmcp=off");
        // The result is a filter EnvFilter takes.
        for level in ["info", "warn,weft_gateway=debug", ""] {
            tracing_subscriber::EnvFilter::try_new(quieted(level)).unwrap();
        }
    }
}
