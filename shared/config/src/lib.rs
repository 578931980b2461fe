//! weft's configuration: defaults → TOML file → `WEFT_<SECTION>__<KEY>` env → CLI flags, later
//! winning. Unknown keys are errors; [`Config::validate`] explains; [`Secret`]s are redacted.

//!
//! One module per section, each with its struct, defaults and `validate`; [`Config::validate`]
//! runs them in turn.

mod auth;
mod bootstrap;
mod check;
mod cli;
mod database;
mod executor;
mod gateway;
mod ingress;
mod mcp;
mod mcp_bridge;
mod nats;
mod provider;
mod redis;
mod router;
mod secret;
mod substrate;
mod telemetry;
mod volumes;

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

pub use auth::{AuthConfig, OIDC_ALGORITHMS, OidcIssuerConfig};
pub use bootstrap::BootstrapConfig;
pub use check::Checked;
pub use cli::{
    CommonArgs, DatabaseFlags, FlagLayer, FleetListenFlags, GatewayListenFlag, Overrides,
    RouterListenFlag, RouterListenFlags, RouterOnlyListen, SubstrateListenFlag, TelemetryFlags,
};
pub use database::DatabaseConfig;
pub use executor::ExecutorConfig;
pub use gateway::GatewayConfig;
pub use ingress::IngressConfig;
pub use mcp::McpServerFaceConfig;
pub use mcp_bridge::McpBridgeConfig;
pub use nats::NatsConfig;
pub use provider::{
    HttpProviderConfig, MockModelConfig, MockProviderConfig, OpenAiProviderConfig, ProviderConfig,
};
pub use redis::RedisConfig;
pub use router::{LimitSpec, Limits, Price, RouterConfig, TenantRouting};
pub use secret::Secret;
pub use substrate::{ChannelDecl, SubstrateConfig};
pub use telemetry::{LogFormat, TelemetryConfig};
pub use volumes::{BlobStoreConfig, ExecConfig, VolumesConfig};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config: {0}")]
    Load(#[from] Box<figment::Error>),
    #[error("config file {0} does not exist; pass an existing file or none to use the defaults")]
    MissingFile(PathBuf),
    #[error("config: {0}")]
    Invalid(String),
}

/// The whole fleet's configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub gateway: GatewayConfig,
    pub router: RouterConfig,
    pub database: DatabaseConfig,
    pub auth: AuthConfig,
    pub telemetry: TelemetryConfig,
    pub bootstrap: BootstrapConfig,
    pub redis: RedisConfig,
    pub nats: NatsConfig,
    pub substrate: SubstrateConfig,
    pub executor: ExecutorConfig,
    pub mcp_bridge: McpBridgeConfig,
    pub mcp: McpServerFaceConfig,
    pub ingress: IngressConfig,
    pub volumes: VolumesConfig,
}

impl Config {
    /// Loads defaults → `file` → `WEFT_*__*` env → `overrides` (CLI flags), then validates.
    pub fn load(file: Option<&Path>, overrides: serde_json::Value) -> Result<Self, ConfigError> {
        Self::load_layers(file, Serialized::defaults(overrides))
    }

    /// [`Config::load`] with any figment provider as the top layer.
    fn load_layers(
        file: Option<&Path>,
        overrides: impl figment::Provider,
    ) -> Result<Self, ConfigError> {
        Self::figment(file, overrides)?
            .extract::<Config>()
            .map_err(|e| ConfigError::Load(Box::new(e)))
            .and_then(|c| c.validate().map(|()| c))
    }

    fn figment(
        file: Option<&Path>,
        overrides: impl figment::Provider,
    ) -> Result<Figment, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError::MissingFile(path.to_owned()));
            }
            fig = fig.merge(Toml::file_exact(path));
        }
        // Only `WEFT_<SECTION>__<KEY>` is config; webhook and hook secrets and CLI variables
        // are not.
        fig = fig.merge(
            Env::prefixed("WEFT_")
                .filter(|k| {
                    let k = k.as_str().to_ascii_uppercase();
                    k.contains("__") && !k.starts_with("WEBHOOK_") && !k.starts_with("HOOK_")
                })
                .split("__"),
        );
        Ok(fig.merge(overrides))
    }

    /// The internal JWT key, which services running as separate processes must share.
    pub fn required_jwt_secret(&self, peer: &str) -> Result<&Secret, ConfigError> {
        self.auth.internal_jwt_secret.as_ref().ok_or_else(|| {
            ConfigError::Invalid(format!(
                "auth.internal_jwt_secret is not set; set WEFT_AUTH__INTERNAL_JWT_SECRET to the same value as the {peer}'s"
            ))
        })
    }

    /// Checks what types cannot, section by section: ranges, and references within a section
    /// (a router candidate names a configured provider). No check spans two sections today; one
    /// that does belongs here, after the sections' own.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.gateway.validate()?;
        self.auth.validate()?;
        self.mcp_bridge.validate()?;
        self.executor.validate()?;
        self.nats.validate()?;
        self.redis.validate()?;
        self.substrate.validate()?;
        self.mcp.validate()?;
        self.volumes.validate()?;
        self.router.validate()
    }
}

#[cfg(test)]
#[expect(
    clippy::result_large_err,
    reason = "figment's Jail API returns its own error type"
)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_use_the_mock() {
        let c = Config::default();
        c.validate().unwrap();
        assert!(matches!(
            c.router.providers["mock"],
            ProviderConfig::Mock(_)
        ));
    }

    #[test]
    fn http_private_exempt_entries_must_be_cidrs() {
        let mut c = Config::default();
        c.executor.http_private_exempt = vec!["127.0.0.1/32".into(), "fd00::/8".into()];
        c.validate().unwrap();
        for bad in [
            "127.0.0.1",
            "10.0.0.0/33",
            "::1/129",
            "example.com/8",
            "10.0.0.0/+8",
        ] {
            c.executor.http_private_exempt = vec![bad.into()];
            let err = c.validate().unwrap_err().to_string();
            assert!(
                err.contains("executor.http_private_exempt") && err.contains(bad),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn layers_apply_in_order() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "weft.toml",
                r#"
                [gateway]
                listen = "127.0.0.1:9000"
                max_body_bytes = 2048
                [router.providers.up]
                kind = "openai"
                base_url = "http://127.0.0.1:1/v1"
                models = ["m"]
                "#,
            )?;
            jail.set_env("WEFT_GATEWAY__MAX_BODY_BYTES", "4096");
            jail.set_env("WEFT_URL", "ignored: not section-qualified");
            jail.set_env("WEFT_WEBHOOK_ACME__GITHUB", "ignored: a webhook secret");
            let c = Config::load(
                Some(Path::new("weft.toml")),
                serde_json::json!({"gateway": {"listen": "127.0.0.1:9100"}}),
            )
            .map_err(|e| e.to_string())?;
            assert_eq!(c.gateway.listen.port(), 9100, "cli beats file");
            assert_eq!(c.gateway.max_body_bytes, 4096, "env beats file");
            assert!(c.router.providers.contains_key("up"));
            assert!(c.router.providers.contains_key("mock"), "defaults stay");
            Ok(())
        });
    }

    #[test]
    fn unknown_keys_are_refused() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("weft.toml", "[gateway]\nlisten_addr = \"x\"\n")?;
            let err = Config::load(Some(Path::new("weft.toml")), serde_json::json!({}))
                .unwrap_err()
                .to_string();
            assert!(err.contains("listen_addr"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn validation_names_the_field() {
        let mut c = Config::default();
        c.router.aliases.insert("x".into(), vec!["nope/m".into()]);
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("router.aliases.x") && err.contains("nope"),
            "{err}"
        );
        let mut c = Config::default();
        c.gateway.token_cache_ttl_ms = 5000;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("token_cache_ttl_ms")
        );
    }

    #[test]
    fn secrets_are_redacted_in_debug() {
        let mut c = Config::default();
        c.auth.internal_jwt_secret = Some(Secret::new("hunter2"));
        c.database.url = Secret::new("postgres://u:pw@h/db");
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("hunter2") && !dbg.contains("pw@"), "{dbg}");
    }
}
