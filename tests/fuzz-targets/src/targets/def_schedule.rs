//! Schedule definitions: a `PUT /v1/schedules/{name}` body. Beyond "no panic"
//! ([`crate::defs`]): refusals are 4xx naming the field, the gateway hop changes nothing,
//! accepted content is storable and has a stable content address. An accepted schedule
//! compiles; its next fire time after an instant is a whole second strictly after it, and is
//! also the next fire time after the second before it; a plan's fires are ordered, within its
//! window and at most its limit; an `on_complete` memory key renders, with every placeholder at
//! its longest, to 1-512 bytes (what the substrate stores).
#![expect(
    clippy::panic,
    reason = "fuzz targets are test code: a panic is how they report a broken property"
)]

use std::time::Duration;

use crate::defs;
use time::OffsetDateTime;
use weft_core::schedule::{OnComplete, ScheduleContent, TemplateVars, limits, render};

/// 2026-03-08T06:59:59.5Z (a DST change in America/New_York), and 2100-02-28T23:59:59Z.
const INSTANTS: [i128; 2] = [1_772_953_199_500_000_000, 4_107_542_399_000_000_000];

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(body: &[u8]) {
    let Some(s) = defs::check_body::<ScheduleContent>(body) else {
        return;
    };
    let compiled = match s.compile() {
        Ok(c) => c,
        Err(e) => panic!("an accepted schedule does not compile: {}", e.message),
    };
    let mut fire_at = None;
    for ns in INSTANTS {
        let Ok(t) = OffsetDateTime::from_unix_timestamp_nanos(ns) else {
            continue;
        };
        let Some(next) = compiled.next_after(t) else {
            continue;
        };
        assert!(next > t, "next_after({t}) = {next}, not after it");
        assert_eq!(next.nanosecond(), 0, "a fire time is not a whole second");
        let before = next - Duration::from_secs(1);
        assert_eq!(compiled.next_after(before), Some(next), "from {t}");
        fire_at.get_or_insert(next);

        let now = next + Duration::from_secs(3600);
        let plan = compiled.plan(t, now, s.catch_up_max, Duration::from_secs(30), 8);
        assert!(plan.fires.len() <= 8);
        assert!(
            plan.fires.windows(2).all(|w| w[0] < w[1]),
            "fires out of order"
        );
        assert!(
            plan.fires.iter().all(|f| *f >= t && *f <= now),
            "a fire outside the window"
        );
        if let (Some(n), Some(last)) = (plan.next, plan.fires.last()) {
            assert!(n > *last && n <= now, "the plan continues at {n}");
        }
    }

    let vars = TemplateVars {
        final_text: "{{run.id}}",
        run_id: "0190f5c2-7d3a-7e4b-9c1d-2a3b4c5d6e7f",
        run_status: "awaiting_input",
        schedule_name: &"s".repeat(64),
        fire_at: fire_at.unwrap_or(OffsetDateTime::UNIX_EPOCH),
    };
    for action in &s.on_complete {
        match action {
            OnComplete::MemorySet { key, value, .. } => {
                let k = render(key, &vars);
                assert!(
                    (1..=limits::MEMORY_KEY_BYTES).contains(&k.len()),
                    "key {key:?} renders to {} bytes",
                    k.len()
                );
                let _ = render(value, &vars);
            }
            OnComplete::ChannelPublish { message, .. } => {
                let _ = render(message, &vars);
            }
        }
    }
}
