//! W3C trace context in NATS headers: the one place a message that starts work elsewhere (a run
//! dispatch) carries its sender's trace, and the one place a receiver joins it.

use async_nats::HeaderMap;

/// Headers carrying the current span's trace context (`traceparent`, `tracestate`); `None` when
/// there is none to carry (spans not exported), so the message goes without headers.
pub fn headers() -> Option<HeaderMap> {
    let mut h = HeaderMap::new();
    weft_telemetry::inject_trace_context_with(|k, v| h.insert(k, v.as_str()));
    (!h.is_empty()).then_some(h)
}

/// Makes `span` a child of the trace context in a message's headers, if they carry one; call it
/// before `span` is first entered.
pub fn adopt(span: &tracing::Span, headers: Option<&HeaderMap>) {
    if let Some(h) = headers {
        weft_telemetry::adopt_trace_context_with(span, |k| h.get(k).map(|v| v.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    #[test]
    fn a_dispatch_carries_the_senders_trace_and_the_receiver_joins_it() {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            let sender = tracing::info_span!("sender");
            let headers = sender.in_scope(super::headers).expect("trace headers");
            let run = tracing::info_span!("run");
            super::adopt(&run, Some(&headers));
            let _entered = run.enter();
            assert_eq!(
                run.context().span().span_context().trace_id(),
                sender.context().span().span_context().trace_id()
            );
        });
        assert!(super::headers().is_none(), "no trace, no headers");
    }
}
