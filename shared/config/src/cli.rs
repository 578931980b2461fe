//! Command-line flags the weft binaries share, and the layer flags make above the environment.
//!
//! Flags are typed: each flag group is a `clap::Args` struct that serializes as the part of the
//! config file it sets (`--router-listen` as `{"router": {"listen": …}}`), leaving out flags not
//! given, and [`Overrides::flags`] merges that into figment as it is.

use std::net::SocketAddr;
use std::path::PathBuf;

use figment::Figment;
use figment::providers::Serialized;
use serde::{Serialize, Serializer};

use crate::{Config, ConfigError, LogFormat};

/// `--config` and `--log-format`, flattened into each binary's CLI. Serializes as its one config
/// key, `telemetry.log_format`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CommonArgs {
    /// TOML config file (defaults, then this file, then WEFT_<SECTION>__<KEY> env, then flags).
    #[arg(long, env = "WEFT_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// Log format (telemetry.log_format).
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
}

/// `--database-url`, for every subcommand.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DatabaseFlags {
    /// Postgres URL (overrides database.url).
    #[arg(long, global = true)]
    pub database_url: Option<String>,
}

/// The addresses `weft up` binds (`weft doctor` takes the same flags, to check them).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FleetListenFlags {
    /// Gateway HTTP address (gateway.listen).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Router gRPC address (router.listen).
    #[arg(long)]
    pub router_listen: Option<SocketAddr>,
    /// Substrate (definitions) gRPC address (substrate.listen).
    #[arg(long)]
    pub substrate_listen: Option<SocketAddr>,
}

/// `--listen` of a process that runs only the router.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RouterListenFlags {
    /// Router gRPC address (router.listen).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
}

/// `<section>.listen`, when its flag is given.
#[derive(Serialize)]
struct Listen {
    #[serde(skip_serializing_if = "Option::is_none")]
    listen: Option<SocketAddr>,
}

impl Serialize for CommonArgs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Telemetry {
            #[serde(skip_serializing_if = "Option::is_none")]
            log_format: Option<LogFormat>,
        }
        #[derive(Serialize)]
        struct Layer {
            telemetry: Telemetry,
        }
        Layer {
            telemetry: Telemetry {
                log_format: self.log_format,
            },
        }
        .serialize(s)
    }
}

impl Serialize for DatabaseFlags {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Database<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            url: Option<&'a str>,
        }
        #[derive(Serialize)]
        struct Layer<'a> {
            database: Database<'a>,
        }
        Layer {
            database: Database {
                url: self.database_url.as_deref(),
            },
        }
        .serialize(s)
    }
}

impl Serialize for FleetListenFlags {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Layer {
            gateway: Listen,
            router: Listen,
            substrate: Listen,
        }
        Layer {
            gateway: Listen {
                listen: self.listen,
            },
            router: Listen {
                listen: self.router_listen,
            },
            substrate: Listen {
                listen: self.substrate_listen,
            },
        }
        .serialize(s)
    }
}

impl Serialize for RouterListenFlags {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Layer {
            router: Listen,
        }
        Layer {
            router: Listen {
                listen: self.listen,
            },
        }
        .serialize(s)
    }
}

/// The flag layer: typed flag structs, and `section.key` pairs from binaries whose flags are not
/// typed yet, merged in the order given (a later one wins) on top of the environment.
#[derive(Debug, Clone)]
pub struct Overrides(Figment);

impl Default for Overrides {
    fn default() -> Self {
        Self(Figment::new())
    }
}

impl Overrides {
    /// Adds typed flags shaped like the config file: a struct with a field per section (serde
    /// renames allowed) whose absent flags serialize to nothing.
    pub fn flags(&mut self, flags: &impl Serialize) -> &mut Self {
        self.merge(Serialized::defaults(flags))
    }

    /// Sets `section.key` when `value` is present; the value is read as its text.
    pub fn set(&mut self, section: &str, key: &str, value: Option<impl ToString>) -> &mut Self {
        match value {
            Some(v) => self.merge(Serialized::default(
                &format!("{section}.{key}"),
                v.to_string(),
            )),
            None => self,
        }
    }

    fn merge(&mut self, provider: impl figment::Provider) -> &mut Self {
        let fig = std::mem::replace(&mut self.0, Figment::new());
        self.0 = fig.merge(provider);
        self
    }
}

impl CommonArgs {
    /// Loads the config with `extra` and then these flags as the top layer.
    pub fn load(&self, mut extra: Overrides) -> Result<Config, ConfigError> {
        extra.flags(self);
        Config::load_layers(self.config.as_deref(), extra.0)
    }
}

#[cfg(test)]
#[expect(
    clippy::result_large_err,
    reason = "figment's Jail API returns its own error type"
)]
mod tests {
    use clap::Parser;
    use serde_json::{Value, json};

    use super::*;

    fn layer(o: &Overrides) -> Value {
        o.0.extract::<Value>().unwrap()
    }

    #[test]
    fn overrides_nest_by_section_and_skip_absent_values() {
        let mut o = Overrides::default();
        o.set("gateway", "listen", Some("127.0.0.1:1"))
            .set("gateway", "router_url", None::<String>)
            .set("database", "url", Some("postgres://x/y"));
        assert_eq!(
            layer(&o),
            json!({"gateway": {"listen": "127.0.0.1:1"}, "database": {"url": "postgres://x/y"}})
        );
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        database: DatabaseFlags,
        #[command(flatten)]
        listen: FleetListenFlags,
    }

    impl Cli {
        fn overrides(&self) -> Overrides {
            let mut o = Overrides::default();
            o.flags(&self.database).flags(&self.listen);
            o
        }
    }

    #[test]
    fn typed_flags_merge_as_their_config_shape() {
        let cli = Cli::parse_from([
            "t",
            "--listen",
            "127.0.0.1:9",
            "--database-url",
            "postgres://x/y",
            "--log-format",
            "json",
        ]);
        let o = cli.overrides();
        assert_eq!(
            layer(&o),
            json!({
                "gateway": {"listen": "127.0.0.1:9"},
                "router": {},
                "substrate": {},
                "database": {"url": "postgres://x/y"}
            })
        );
        figment::Jail::expect_with(|_| {
            let c = cli.common.load(o).map_err(|e| e.to_string())?;
            assert_eq!(c.gateway.listen.port(), 9);
            assert_eq!(c.database.url.expose(), "postgres://x/y");
            assert_eq!(c.telemetry.log_format, LogFormat::Json);
            Ok(())
        });
    }

    #[test]
    fn absent_flags_change_nothing() {
        figment::Jail::expect_with(|_| {
            let cli = Cli::parse_from(["t"]);
            let c = cli
                .common
                .load(cli.overrides())
                .map_err(|e| e.to_string())?;
            assert_eq!(c, Config::default());
            Ok(())
        });
    }
}
