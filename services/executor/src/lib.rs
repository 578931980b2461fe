//! The executor: pulls runs from JetStream, takes a fenced lease on each, and runs the agent
//! loop (model → tool_use → tool_result) against the router, persisting every step.

pub mod tools;
