//! Test support. Every test isolates itself: [`TestDb`] makes a fresh database per test on the
//! machine's Postgres, and [`FakeUpstream`] is an OpenAI-compatible server on port 0 that counts
//! calls and can be told to stream, call tools, fail with 429/500, break mid-stream or stall.
//! The load generator also uses [`FakeUpstream`] as its upstream.
//! [`FixtureServer`] replays recorded provider fixtures (every provider kind's real wire format)
//! for the driver conformance suite and the `weft-fake-upstream` binary.

#![expect(
    clippy::expect_used,
    reason = "test support: a failed set-up is a failed test"
)]

mod db;
pub mod fixtures;
mod upstream;

pub use db::TestDb;
pub use fixtures::{FixtureServer, Kind, RecordedRequest, Serve};
pub use upstream::{Behavior, FakeUpstream, Recorded};
