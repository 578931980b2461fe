//! Command-line flags the weft binaries share, and the layer flags make above the environment.
//!
//! Flags are typed: each flag group is a `clap::Args` struct that serializes as the part of the
//! config file it sets (`--router-listen` as `{"router": {"listen": …}}`), leaving out flags not
//! given, and [`Overrides::flags`] merges that into figment as it is.

use std::net::SocketAddr;
use std::path::PathBuf;

use figment::Figment;
use figment::providers::Serialized;
use serde::Serialize;

use crate::{Config, ConfigError, LogFormat};

/// `--config` and `--log-format`, flattened into each binary's CLI. Serializes as the one config
/// key it sets, `telemetry.log_format` (the file's path is not a key).
#[derive(clap::Args, Serialize, Debug, Clone, Default)]
pub struct CommonArgs {
    /// TOML config file (defaults, then this file, then WEFT_<SECTION>__<KEY> env, then flags).
    #[arg(long, env = "WEFT_CONFIG", global = true)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub telemetry: TelemetryFlags,
}

/// `telemetry.*` flags.
#[derive(clap::Args, Serialize, Debug, Clone, Default)]
pub struct TelemetryFlags {
    /// Log format (telemetry.log_format).
    #[arg(long, global = true, value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
}

/// `database.*` flags: `--database-url`, global so that every subcommand takes it.
#[derive(clap::Args, Serialize, Debug, Clone, Default)]
pub struct DatabaseFlags {
    /// Postgres URL (overrides database.url).
    #[arg(
        long = "database-url",
        id = "database_url",
        value_name = "DATABASE_URL",
        global = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// The addresses `weft up` binds (`weft doctor` takes the same flags, to check them).
#[derive(clap::Args, Serialize, Debug, Clone, Default)]
pub struct FleetListenFlags {
    #[command(flatten)]
    pub gateway: GatewayListenFlag,
    #[command(flatten)]
    pub router: RouterListenFlag,
    #[command(flatten)]
    pub substrate: SubstrateListenFlag,
}

/// `--listen`: gateway.listen.
#[derive(clap::Args, Serialize, Debug, Clone, Default)]
pub struct GatewayListenFlag {
    /// Gateway HTTP address (gateway.listen).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
}

/// `--router-listen`: router.listen.
#[derive(clap::Args, Serialize, Debug, Clone, Default)]
pub struct RouterListenFlag {
    /// Router gRPC address (router.listen).
    #[arg(
        long = "router-listen",
        id = "router_listen",
        value_name = "ROUTER_LISTEN"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
}

/// `--substrate-listen`: substrate.listen.
#[derive(clap::Args, Serialize, Debug, Clone, Default)]
pub struct SubstrateListenFlag {
    /// Substrate (definitions) gRPC address (substrate.listen).
    #[arg(
        long = "substrate-listen",
        id = "substrate_listen",
        value_name = "SUBSTRATE_LISTEN"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
}

/// `--listen` of a process that runs only the router.
#[derive(clap::Args, Serialize, Debug, Clone, Default)]
pub struct RouterListenFlags {
    #[command(flatten)]
    pub router: RouterOnlyListen,
}

/// `--listen`: router.listen.
#[derive(clap::Args, Serialize, Debug, Clone, Default)]
pub struct RouterOnlyListen {
    /// Router gRPC address (router.listen).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
}

/// The flag layer: typed flag structs, merged in the order given (a later one wins) on top of
/// the environment.
#[derive(Debug, Clone)]
pub struct Overrides(Figment);

impl Default for Overrides {
    fn default() -> Self {
        Self(Figment::new())
    }
}

/// A flag group shaped like the whole config file: a field per section it sets (a struct of
/// that section's flags, each `Option` skipped when absent), so that it can be merged as a layer.
/// Section groups (`DatabaseFlags`, `GatewayListenFlag`, …) serialize as their section's
/// content and are not layers: a binary names them in a struct of its own, field = section.
pub trait FlagLayer: Serialize {}

impl FlagLayer for CommonArgs {}
impl FlagLayer for FleetListenFlags {}
impl FlagLayer for RouterListenFlags {}

impl Overrides {
    /// Adds a layer of typed flags; a flag not given changes nothing.
    pub fn flags(&mut self, flags: &impl FlagLayer) -> &mut Self {
        self.merge(Serialized::defaults(flags))
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

    #[derive(clap::Args, Serialize)]
    struct Flags {
        #[command(flatten)]
        database: DatabaseFlags,
        #[command(flatten)]
        #[serde(flatten)]
        listen: FleetListenFlags,
    }

    impl FlagLayer for Flags {}

    #[test]
    fn flags_nest_by_section_and_skip_absent_values() {
        let mut o = Overrides::default();
        o.flags(&Flags {
            database: DatabaseFlags {
                url: Some("postgres://x/y".into()),
            },
            listen: FleetListenFlags {
                gateway: GatewayListenFlag {
                    listen: Some("127.0.0.1:1".parse().unwrap()),
                },
                ..FleetListenFlags::default()
            },
        });
        assert_eq!(
            layer(&o),
            json!({
                "gateway": {"listen": "127.0.0.1:1"},
                "router": {},
                "substrate": {},
                "database": {"url": "postgres://x/y"}
            })
        );
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        flags: Flags,
    }

    impl Cli {
        fn overrides(&self) -> Overrides {
            let mut o = Overrides::default();
            o.flags(&self.flags);
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
