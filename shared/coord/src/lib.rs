//! Redis keys and scripts.
