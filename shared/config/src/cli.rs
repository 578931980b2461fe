//! Command-line flags every weft binary shares, and the helper that turns flags into the top
//! configuration layer.

use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::{Config, ConfigError};

/// `--config` and `--log-format`, flattened into each binary's CLI.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CommonArgs {
    /// TOML config file (defaults, then this file, then WEFT_<SECTION>__<KEY> env, then flags).
    #[arg(long, env = "WEFT_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// Log format: auto (text on a terminal, else JSON), json or text.
    #[arg(long, global = true, value_parser = ["auto", "json", "text"])]
    pub log_format: Option<String>,
}

/// Flag overrides, shaped like the config file: `section.key = value`.
#[derive(Debug, Default)]
pub struct Overrides(Map<String, Value>);

impl Overrides {
    /// Sets `section.key` when `value` is present.
    pub fn set(&mut self, section: &str, key: &str, value: Option<impl ToString>) -> &mut Self {
        if let Some(v) = value {
            let entry = self
                .0
                .entry(section.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = entry {
                m.insert(key.to_owned(), Value::String(v.to_string()));
            }
        }
        self
    }
}

impl CommonArgs {
    /// Loads the config with these flags and `extra` as the top layer.
    pub fn load(&self, mut extra: Overrides) -> Result<Config, ConfigError> {
        extra.set("telemetry", "log_format", self.log_format.as_deref());
        Config::load(self.config.as_deref(), Value::Object(extra.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_nest_by_section_and_skip_absent_values() {
        let mut o = Overrides::default();
        o.set("gateway", "listen", Some("127.0.0.1:1"))
            .set("gateway", "router_url", None::<String>)
            .set("database", "url", Some("postgres://x/y"));
        assert_eq!(
            Value::Object(o.0),
            serde_json::json!({"gateway": {"listen": "127.0.0.1:1"}, "database": {"url": "postgres://x/y"}})
        );
    }
}
