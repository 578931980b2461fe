//! Metric handles kept per label value: a hot path records with one map lookup, not a new key.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use metrics::{Counter, Histogram};

/// Values made on first use per key (after the recorder is installed) and shared after.
pub struct Keyed<T> {
    map: RwLock<HashMap<Box<str>, Arc<T>>>,
}

impl<T> Default for Keyed<T> {
    fn default() -> Self {
        Self {
            map: RwLock::default(),
        }
    }
}

impl<T> Keyed<T> {
    /// The value for `key`, made by `make` the first time. Keys must come from a bounded set
    /// (routes, configured providers): entries are never dropped.
    pub fn get(&self, key: &str, make: impl FnOnce() -> T) -> Arc<T> {
        if let Some(v) = self.map.read().ok().and_then(|m| m.get(key).cloned()) {
            return v;
        }
        let v = Arc::new(make());
        if let Ok(mut m) = self.map.write() {
            return m.entry(key.into()).or_insert(v).clone();
        }
        v
    }
}

/// Per HTTP route: a latency histogram, and a request counter per status code.
struct Route {
    seconds: Histogram,
    by_status: RwLock<HashMap<u16, Counter>>,
}

/// `<prefix>_request_seconds{route}` and `<prefix>_requests_total{route, status}`.
pub struct RouteMetrics {
    seconds: &'static str,
    total: &'static str,
    routes: Keyed<Route>,
}

impl RouteMetrics {
    /// `seconds` and `total` are the two metric names.
    pub fn new(seconds: &'static str, total: &'static str) -> Self {
        Self {
            seconds,
            total,
            routes: Keyed::default(),
        }
    }

    /// Records one request to `route` (a matched path or "unmatched": a bounded set) that
    /// answered `status` after `elapsed` seconds.
    pub fn record(&self, route: &str, status: u16, elapsed: f64) {
        let r = self.routes.get(route, || Route {
            seconds: metrics::histogram!(self.seconds, "route" => route.to_owned()),
            by_status: RwLock::default(),
        });
        r.seconds.record(elapsed);
        let known = r
            .by_status
            .read()
            .ok()
            .and_then(|m| m.get(&status).cloned());
        let counter = known.unwrap_or_else(|| {
            let c = metrics::counter!(self.total, "route" => route.to_owned(), "status" => status.to_string());
            if let Ok(mut m) = r.by_status.write() {
                m.insert(status, c.clone());
            }
            c
        });
        counter.increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_reach_the_recorder_under_their_labels() {
        let h = crate::prometheus();
        let m = RouteMetrics::new("test_handles_seconds", "test_handles_total");
        for _ in 0..3 {
            m.record("/v1/x", 200, 0.001);
        }
        m.record("/v1/x", 404, 0.002);
        let text = h.render();
        assert!(
            text.contains(r#"test_handles_total{route="/v1/x",status="200"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"test_handles_total{route="/v1/x",status="404"} 1"#),
            "{text}"
        );
        assert!(text.contains("test_handles_seconds"), "{text}");
    }
}
