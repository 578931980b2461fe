//! `weft token create | list | revoke`: API tokens, directly in the database.

use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use weft_core::{Scopes, TenantId, TokenId};
use weft_gateway::tokens::{CreateTokenInput, create_token};

use super::{fail, token_store};

#[derive(Subcommand, Debug)]
pub enum TokenCmd {
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

/// Which database `url` names (`weft` on `127.0.0.1:5432`), as Postgres reads the URL: never
/// its password, wherever the URL puts one.
pub fn shown_url(url: &str) -> String {
    use std::str::FromStr as _;
    match sqlx::postgres::PgConnectOptions::from_str(url) {
        Ok(o) => format!(
            "`{}` on {}:{}",
            o.get_database().unwrap_or("(the user's default)"),
            o.get_host(),
            o.get_port()
        ),
        Err(_) => "(a database.url that does not parse)".to_owned(),
    }
}

/// Runs one token subcommand.
pub async fn run(config: &weft_config::Config, cmd: TokenCmd) -> ExitCode {
    let store = match token_store(config).await {
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
                    // Written straight to a database, not through a running fleet: say which,
                    // so a token minted against the wrong one is noticed at once.
                    eprintln!(
                        "written to the database {}: only a fleet on that database accepts it (give `weft up`'s --database-url or --config to mint for another; over HTTP: POST /v1/tokens)",
                        shown_url(config.database.url.expose())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_is_named_without_its_password() {
        assert_eq!(
            shown_url("postgres://weft:s3cret@db:5432/weft"),
            "`weft` on db:5432"
        );
        assert_eq!(
            shown_url("postgres://postgres@127.0.0.1:5432/weft"),
            "`weft` on 127.0.0.1:5432"
        );
        let q = shown_url("postgres://db/weft?user=w&password=s3cret&sslmode=require");
        assert!(!q.contains("s3cret") && q.contains("`weft`"), "{q}");
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2d"), Some(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("15"), Some(Duration::from_secs(15)));
        assert_eq!(parse_duration("0s"), None);
        assert_eq!(parse_duration("1w"), None);
    }
}
