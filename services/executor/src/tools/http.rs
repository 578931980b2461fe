//! The `HTTP` tool (to be written).
