//! `weft`: the operator CLI — run the fleet, migrate, manage tokens, check the machine.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::json;
use weft_config::{CommonArgs, Overrides};
use weft_core::{Scopes, TenantId, TokenId};
use weft_gateway::tokens::{CreateTokenInput, create_token};
use weft_store::TokenStore;

#[derive(Parser, Debug)]
#[command(
    name = "weft",
    version,
    about = "weft: an OpenAI-compatible LLM gateway and agent runtime"
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Debug)]
struct Common {
    #[command(flatten)]
    shared: CommonArgs,
    /// Postgres URL (overrides database.url).
    #[arg(long, global = true)]
    database_url: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the whole fleet in one process on loopback (mock provider by default), apply
    /// migrations, and print the URL and the bootstrap admin token (the token itself only on the
    /// start that mints it; later starts print the file it is kept in).
    Up {
        /// Gateway HTTP address.
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Router gRPC address.
        #[arg(long)]
        router_listen: Option<std::net::SocketAddr>,
        /// Substrate (definitions) gRPC address.
        #[arg(long)]
        substrate_listen: Option<std::net::SocketAddr>,
        /// Write {"url", "admin_token"} as JSON to this file once serving.
        #[arg(long)]
        ready_file: Option<PathBuf>,
    },
    /// Apply pending database migrations.
    Migrate,
    /// Manage API tokens directly in the database.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Check the config, Postgres, Redis, NATS and ports; exit 1 if any check fails.
    Doctor,
    /// Run only a run executor, against the router and substrate at executor.router_url and
    /// executor.substrate_url (needs auth.internal_jwt_secret shared with them).
    Executor,
    /// Run only the provider router (gRPC on router.listen; needs auth.internal_jwt_secret
    /// shared with the gateway and executors).
    Router {
        /// Router gRPC address.
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
    },
    /// Print the content hash a deployment will report for a definition file.
    #[command(subcommand)]
    Hash(HashCmd),
}

#[derive(Subcommand, Debug)]
enum HashCmd {
    /// Print the `sha256:` version hash of an agent definition: a `<name>.md` file (YAML front
    /// matter + system prompt body) or a `.json` object of content fields. Needs no config or
    /// database; an invalid file exits 1 naming the field.
    Agent {
        /// The definition file.
        file: PathBuf,
    },
    /// Print the `sha256:` version hash of a skill folder (`<name>/SKILL.md` plus its text
    /// files), as a deployment loading it from substrate.skills_dir reports it. Needs no config
    /// or database; an invalid folder exits 1 naming the file and the field.
    Skill {
        /// The skill's folder.
        dir: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum TokenCmd {
    /// Mint a token and print it (once) on stdout.
    Create {
        /// Tenant slug (a-z, 0-9, '-').
        #[arg(long, required_unless_present = "admin")]
        tenant: Option<String>,
        /// Who the token is for.
        #[arg(long, required_unless_present = "admin")]
        subject: Option<String>,
        /// Comma-separated scopes, e.g. llm:call,runs:create.
        #[arg(long, required_unless_present = "admin")]
        scopes: Option<String>,
        /// A label for the token.
        #[arg(long)]
        name: Option<String>,
        /// Shorthand for an operator admin token (tenant `default`, scope `admin`).
        #[arg(long)]
        admin: bool,
        /// Lifetime, e.g. 3600s, 90m, 12h, 30d.
        #[arg(long)]
        expires_in: Option<String>,
    },
    /// List tokens (never their secrets).
    List {
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Revoke a token by id; every replica refuses it within 1 s.
    Revoke { id: String },
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("weft: {msg}");
    ExitCode::FAILURE
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut o = Overrides::default();
    o.set("database", "url", cli.common.database_url.as_deref());
    if let Cmd::Doctor = cli.cmd {
        return doctor(&cli.common.shared, o).await;
    }
    if let Cmd::Hash(HashCmd::Agent { file }) = &cli.cmd {
        return match weft_substrate::boot::read_agent_file(file) {
            Ok(def) => {
                println!("{}", def.content.hash());
                ExitCode::SUCCESS
            }
            Err(weft_substrate::SubstrateError::Boot(msg)) => fail(msg),
            Err(e) => fail(e),
        };
    }
    if let Cmd::Hash(HashCmd::Skill { dir }) = &cli.cmd {
        return match weft_substrate::hash_skill_dir(dir) {
            Ok(hash) => {
                println!("{hash}");
                ExitCode::SUCCESS
            }
            Err(weft_substrate::SubstrateError::Boot(msg)) => fail(msg),
            Err(e) => fail(e),
        };
    }
    if let Cmd::Up {
        listen,
        router_listen,
        substrate_listen,
        ..
    } = &cli.cmd
    {
        o.set("gateway", "listen", *listen)
            .set("router", "listen", *router_listen)
            .set("substrate", "listen", *substrate_listen);
    }
    if let Cmd::Router { listen } = &cli.cmd {
        o.set("router", "listen", *listen);
    }
    let config = match cli.common.shared.load(o) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weft: {e}");
            return ExitCode::from(2);
        }
    };
    let _guard = match weft_telemetry::init("weft", &config.telemetry) {
        Ok(g) => g,
        Err(e) => return fail(e),
    };
    match cli.cmd {
        Cmd::Up { ready_file, .. } => up(config, ready_file).await,
        Cmd::Migrate => match connect(&config).await {
            Ok(_) => {
                println!("migrations applied");
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        },
        Cmd::Token(t) => token(&config, t).await,
        Cmd::Doctor | Cmd::Hash(_) => ExitCode::SUCCESS,
        Cmd::Executor => executor(config).await,
        Cmd::Router { .. } => match weft_router::run_until_signal(config).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        },
    }
}

async fn executor(config: weft_config::Config) -> ExitCode {
    match weft_executor::run_until_signal(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

async fn connect(config: &weft_config::Config) -> Result<TokenStore, weft_store::StoreError> {
    let pool = weft_store::connect(config.database.url.expose(), 2).await?;
    weft_store::migrate(&pool).await?;
    Ok(TokenStore::new(pool))
}

async fn up(config: weft_config::Config, ready_file: Option<PathBuf>) -> ExitCode {
    let token_file = config.bootstrap.token_file.clone();
    let fleet = match weft::Fleet::start(config).await {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    // Signals are handled from here on, before anyone is told the fleet is up.
    let stop = fleet.shutdown_token();
    tokio::spawn(weft_telemetry::shutdown_on_signal(stop.clone()));
    let url = fleet.url();
    println!("weft is up");
    println!("url: {url}");
    match &fleet.admin_token {
        Some(t) if fleet.minted && fleet.saved => println!(
            "admin token: {t}\n  (saved to {}; printed only now, on the start that minted it)",
            token_file.display()
        ),
        Some(t) if fleet.minted => println!(
            "admin token: {t}\n  (could not be saved to {}: copy it now, it is shown once)",
            token_file.display()
        ),
        // Printed once, when minted: later starts say where it is, so it stays out of logs.
        Some(_) => println!(
            "admin token: in {} (minted on the first start)",
            token_file.display()
        ),
        None => println!(
            "admin token: minted on an earlier start and not found in {}; mint another with `weft token create --admin`",
            token_file.display()
        ),
    }
    println!(
        "try: curl -s {url}/v1/chat/completions -H \"authorization: Bearer $TOKEN\" -H 'content-type: application/json' -d '{{\"model\":\"mock-1\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'"
    );
    if let Some(path) = ready_file {
        let body = json!({ "url": url, "admin_token": fleet.admin_token });
        if let Err(e) = std::fs::write(&path, body.to_string()) {
            return fail(format!("cannot write {}: {e}", path.display()));
        }
    }
    stop.cancelled().await;
    eprintln!("weft: stopping");
    fleet.stop(Duration::from_secs(10)).await;
    ExitCode::SUCCESS
}

/// `30d`, `12h`, `90m`, `3600s` or plain seconds.
fn parse_duration(s: &str) -> Option<Duration> {
    let (num, unit) = s.trim().split_at(
        s.trim()
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(s.trim().len()),
    );
    let n: u64 = num.parse().ok()?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        "d" => n.checked_mul(86_400)?,
        _ => return None,
    };
    (secs > 0).then(|| Duration::from_secs(secs))
}

async fn token(config: &weft_config::Config, cmd: TokenCmd) -> ExitCode {
    let store = match connect(config).await {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    match cmd {
        TokenCmd::Create {
            tenant,
            subject,
            scopes,
            name,
            admin,
            expires_in,
        } => {
            let tenant = tenant.unwrap_or_else(|| "default".into());
            let subject = subject.unwrap_or_else(|| "admin".into());
            let scopes = scopes.unwrap_or_else(|| "admin".into());
            let tenant = match TenantId::parse(&tenant) {
                Ok(t) => t,
                Err(e) => return fail(e.message),
            };
            let scopes = match Scopes::parse_list(&scopes) {
                Ok(s) => s,
                Err(e) => return fail(e.message),
            };
            let scopes = if admin {
                Scopes::new(scopes.iter().chain([weft_core::Scope::Admin]))
            } else {
                scopes
            };
            let expires_at = match expires_in.as_deref().map(parse_duration) {
                None => None,
                Some(Some(d)) => Some(time::OffsetDateTime::now_utc() + d),
                Some(None) => return fail("--expires-in must look like 3600s, 90m, 12h or 30d"),
            };
            let input = CreateTokenInput {
                name: name.unwrap_or_else(|| format!("{subject} (cli)")),
                tenant,
                subject,
                scopes,
                expires_at,
                bootstrap: false,
            };
            match create_token(&store, None, input).await {
                Ok((rec, secret)) => {
                    eprintln!(
                        "created token {} for {}/{} with scopes {} (shown once)",
                        rec.id, rec.tenant, rec.subject, rec.scopes
                    );
                    println!("{secret}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e.message),
            }
        }
        TokenCmd::List { tenant } => {
            let tenant = match tenant.as_deref().map(TenantId::parse).transpose() {
                Ok(t) => t,
                Err(e) => return fail(e.message),
            };
            match store
                .list(tenant.as_ref(), &weft_core::Scopes::default())
                .await
            {
                Ok(list) => {
                    println!(
                        "{:<36}  {:<16} {:<20} {:<14} {:<8} scopes",
                        "id", "tenant", "subject", "prefix", "state"
                    );
                    for r in list {
                        let state = if r.revoked_at.is_some() {
                            "revoked"
                        } else if r.is_active(time::OffsetDateTime::now_utc()) {
                            "active"
                        } else {
                            "expired"
                        };
                        println!(
                            "{:<36}  {:<16} {:<20} {:<14} {:<8} {}",
                            r.id, r.tenant, r.subject, r.prefix, state, r.scopes
                        );
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
        TokenCmd::Revoke { id } => {
            let Ok(id) = id.parse::<TokenId>() else {
                return fail(format!(
                    "`{id}` is not a token id; `weft token list` shows them"
                ));
            };
            match store.revoke(id, None, &weft_core::Scopes::default()).await {
                Ok(Some(r)) => {
                    println!("revoked {}", r.id);
                    ExitCode::SUCCESS
                }
                Ok(None) => fail(format!("no token {id}")),
                Err(e) => fail(e),
            }
        }
    }
}

async fn doctor(common: &CommonArgs, o: Overrides) -> ExitCode {
    use weft::doctor::Verdict;
    let checks = weft::doctor::run(common, o).await;
    for c in &checks {
        let v = match c.verdict {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
        };
        println!("{v}  {:<22} {}", c.name, c.detail);
    }
    if checks.iter().any(|c| c.verdict == Verdict::Fail) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2d"), Some(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("15"), Some(Duration::from_secs(15)));
        assert_eq!(parse_duration("0s"), None);
        assert_eq!(parse_duration("1w"), None);
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}
