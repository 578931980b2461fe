//! `weft doctor`: checks the config and everything weft depends on, one line per check with
//! PASS, WARN or FAIL, and a fix hint for anything that is not PASS.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;
use weft_config::{CommonArgs, Config, Overrides};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Pass,
    Warn,
    Fail,
}

#[derive(Debug)]
pub struct Check {
    pub name: String,
    pub verdict: Verdict,
    pub detail: String,
}

fn check(name: &str, verdict: Verdict, detail: impl Into<String>) -> Check {
    Check {
        name: name.to_owned(),
        verdict,
        detail: detail.into(),
    }
}

const TIMEOUT: Duration = Duration::from_secs(3);

/// Runs every check. A config that does not load is the only check then.
pub async fn run(args: &CommonArgs, overrides: Overrides) -> Vec<Check> {
    let file = args.config.as_deref();
    let config = match args.load(overrides) {
        Ok(c) => c,
        Err(e) => return vec![check("config", Verdict::Fail, e.to_string())],
    };
    let mut out = vec![check(
        "config",
        Verdict::Pass,
        file.map_or_else(
            || "built-in defaults (no file)".to_owned(),
            |p| p.display().to_string(),
        ),
    )];
    out.push(postgres(&config).await);
    if let Some(c) = memory_search(&config).await {
        out.push(c);
    }
    out.push(redis(&config).await);
    out.push(nats(&config).await);
    if let Some(c) = down(&out) {
        out.push(c);
    }
    for l in crate::fleet::Listener::ALL {
        out.push(port(l, l.addr(&config)).await);
    }
    for (name, p) in &config.router.providers {
        if let Some(o) = p.http()
            && let Some(var) = &o.api_key_env
        {
            out.push(if std::env::var_os(var).is_some() {
                check(
                    &format!("provider {name}"),
                    Verdict::Pass,
                    format!("{var} is set"),
                )
            } else {
                check(
                    &format!("provider {name}"),
                    Verdict::Fail,
                    format!("{var} is not set; export it before starting weft"),
                )
            });
        }
    }
    out
}

async fn postgres(config: &Config) -> Check {
    let url = config.database.url.expose();
    // Connected as it is: the doctor only looks, so a missing database is reported, never
    // created.
    let pool = match tokio::time::timeout(TIMEOUT, weft_store::connect_existing(url, 1)).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) if weft_store::is_missing_database(&e) => {
            return check(
                "postgres",
                Verdict::Warn,
                format!(
                    "reachable, but the database of database.url does not exist yet; `weft up` or `weft migrate` creates it ({})",
                    host_port(url, 5432)
                ),
            );
        }
        Ok(Err(e)) => {
            return check(
                "postgres",
                Verdict::Fail,
                format!("{e}; is Postgres running? (./deploy/local/deps.sh starts it)"),
            );
        }
        Err(_) => {
            return check(
                "postgres",
                Verdict::Fail,
                "no answer within 3 s; is Postgres running?",
            );
        }
    };
    let applied: Result<Vec<i64>, _> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(&pool)
            .await;
    let known: Vec<i64> = weft_store::MIGRATOR.iter().map(|m| m.version).collect();
    match applied {
        Ok(v) if known.iter().all(|k| v.contains(k)) => check(
            "postgres",
            Verdict::Pass,
            format!("reachable; {} migrations applied", v.len()),
        ),
        Ok(v) => check(
            "postgres",
            Verdict::Warn,
            format!(
                "reachable; {} of {} migrations applied; run `weft migrate`",
                v.len(),
                known.len()
            ),
        ),
        Err(_) => check(
            "postgres",
            Verdict::Warn,
            "reachable; no migrations applied yet; run `weft migrate`",
        ),
    }
}

/// One line naming the infrastructure that is down, when any is, and what the services do
/// meanwhile: they stay up, not ready (`/readyz` 503, gRPC health NOT_SERVING), and start within
/// about a second of it answering again.
fn down(checks: &[Check]) -> Option<Check> {
    let names: Vec<&str> = checks
        .iter()
        .filter(|c| {
            c.verdict == Verdict::Fail && ["postgres", "redis", "nats"].contains(&c.name.as_str())
        })
        .map(|c| c.name.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    Some(check(
        "down",
        Verdict::Fail,
        format!(
            "{} down: weft services started now wait for it, not ready (their /readyz names it), and serve within about 1 s of it answering; start it (./deploy/local/deps.sh does locally) or fix its URL",
            names.join(", ")
        ),
    ))
}

/// How memory search ranks on this database: pgvector when the extension is installed, an
/// exact cosine scan otherwise. `None` when Postgres is unreachable (its own check says so).
async fn memory_search(config: &Config) -> Option<Check> {
    let url = config.database.url.expose();
    let pool = tokio::time::timeout(TIMEOUT, weft_store::connect_existing(url, 1))
        .await
        .ok()?
        .ok()?;
    let support = weft_substrate::memory::vector_support(&pool).await.ok()?;
    let mode = weft_substrate::memory::search_mode(support);
    let detail = match (mode, support.installed, support.available) {
        (weft_substrate::memory::SearchMode::Pgvector, _, _) => {
            "pgvector: ranked in Postgres by the `vector` extension".to_owned()
        }
        (_, true, _) => "exact scan: the `vector` extension is installed, but this weft ranks by an exact cosine scan of up to 20,000 newest embedded entries per scope (docs/api.md)".to_owned(),
        (_, false, true) => "exact scan (cosine over up to 20,000 newest embedded entries per scope); pgvector is available but not installed in this database".to_owned(),
        (_, false, false) => "exact scan (cosine over up to 20,000 newest embedded entries per scope); pgvector is not available on this server".to_owned(),
    };
    Some(check("memory search", Verdict::Pass, detail))
}

/// `host:port` of a `scheme://[user@]host:port[/…]` URL.
fn host_port(url: &str, default_port: u16) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let hp = rest.split('/').next().unwrap_or(rest);
    if hp.contains(':') {
        hp.to_owned()
    } else {
        format!("{hp}:{default_port}")
    }
}

async fn redis(config: &Config) -> Check {
    let addr = host_port(config.redis.url.expose(), 6379);
    let probe = async {
        let mut s = TcpStream::connect(&addr).await?;
        s.write_all(b"PING\r\n").await?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).await?;
        Ok::<_, std::io::Error>(line)
    };
    match tokio::time::timeout(TIMEOUT, probe).await {
        Ok(Ok(l)) if l.starts_with("+PONG") => {
            check("redis", Verdict::Pass, format!("{addr} answers PING"))
        }
        Ok(Ok(l)) if l.contains("NOAUTH") => check(
            "redis",
            Verdict::Warn,
            format!("{addr} needs a password; put it in redis.url"),
        ),
        Ok(Ok(l)) => check(
            "redis",
            Verdict::Fail,
            format!("{addr} answered {:?} to PING", l.trim()),
        ),
        Ok(Err(e)) => check(
            "redis",
            Verdict::Fail,
            format!("{addr}: {e}; is redis-server running?"),
        ),
        Err(_) => check(
            "redis",
            Verdict::Fail,
            format!("{addr}: no answer within 3 s"),
        ),
    }
}

async fn nats(config: &Config) -> Check {
    let addr = host_port(&config.nats.url, 4222);
    let probe = async {
        let s = TcpStream::connect(&addr).await?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).await?;
        Ok::<_, std::io::Error>(line)
    };
    match tokio::time::timeout(TIMEOUT, probe).await {
        Ok(Ok(l)) if l.starts_with("INFO ") => {
            let info: serde_json::Value =
                serde_json::from_str(l.trim_start_matches("INFO ").trim()).unwrap_or_default();
            let version = info["version"].as_str().unwrap_or("?").to_owned();
            if info["jetstream"].as_bool() == Some(true) {
                check(
                    "nats",
                    Verdict::Pass,
                    format!("{addr} is NATS {version} with JetStream"),
                )
            } else {
                check(
                    "nats",
                    Verdict::Fail,
                    format!(
                        "{addr} is NATS {version} without JetStream; start nats-server with -js"
                    ),
                )
            }
        }
        Ok(Ok(l)) => check(
            "nats",
            Verdict::Fail,
            format!("{addr} did not greet like NATS: {:?}", l.trim()),
        ),
        Ok(Err(e)) => check(
            "nats",
            Verdict::Fail,
            format!("{addr}: {e}; is nats-server running?"),
        ),
        Err(_) => check(
            "nats",
            Verdict::Fail,
            format!("{addr}: no answer within 3 s"),
        ),
    }
}

async fn port(l: crate::fleet::Listener, addr: SocketAddr) -> Check {
    let name = format!("port {}", l.key());
    match tokio::net::TcpListener::bind(addr).await {
        Ok(_) => check(&name, Verdict::Pass, format!("{addr} is free")),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => check(
            &name,
            Verdict::Warn,
            format!(
                "{addr} is in use (is weft already running?); `weft up` needs it for {}: pick another with {} ADDR (the same flag for `weft doctor`) or {} in the config",
                l.service(),
                l.flag(),
                l.key()
            ),
        ),
        Err(e) => check(&name, Verdict::Fail, format!("{addr}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stopped_nats_is_named_as_down() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let mut config = Config::default();
        config.nats.url = format!("nats://{addr}");
        let c = nats(&config).await;
        assert_eq!(c.verdict, Verdict::Fail, "{}", c.detail);
        let summary = down(&[c, check("redis", Verdict::Pass, "")]).unwrap();
        assert_eq!(summary.verdict, Verdict::Fail);
        assert!(
            summary.detail.starts_with("nats down:"),
            "{}",
            summary.detail
        );
        assert!(down(&[check("nats", Verdict::Pass, "")]).is_none());
    }

    #[test]
    fn host_port_handles_users_paths_and_defaults() {
        assert_eq!(host_port("redis://127.0.0.1:6379", 1), "127.0.0.1:6379");
        assert_eq!(host_port("redis://:pw@h:7000/0", 1), "h:7000");
        assert_eq!(host_port("nats://h", 4222), "h:4222");
    }
}
