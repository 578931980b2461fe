//! NATS subjects and JetStream dispatch.
