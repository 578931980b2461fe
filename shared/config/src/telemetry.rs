//! `[telemetry]`: logs and trace export.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `json` or `text`.
    pub log_format: LogFormat,
    /// An `EnvFilter` directive such as `info` or `weft_router=debug,info`.
    pub log_level: String,
    /// OTLP/gRPC endpoint for traces, e.g. `http://127.0.0.1:4317`; unset = no export.
    pub otlp_endpoint: Option<String>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            log_format: LogFormat::Auto,
            log_level: "info".into(),
            otlp_endpoint: None,
        }
    }
}

/// How logs are written; also the `--log-format` flag's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Text when stderr is a terminal (a person is reading), JSON otherwise (a log pipeline).
    Auto,
    Json,
    Text,
}
