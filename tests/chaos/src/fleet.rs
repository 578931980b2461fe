//! The fleet under test, as separate processes: a Postgres cluster, Redis and NATS of its own
//! (so that restarting them disturbs nothing else on the machine), and N replicas of each of
//! the six services, the gRPC ones and the gateway behind a [`Balancer`] each.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::process::{Child, Command};

use crate::lb::Balancer;
use crate::netns::Netns;

/// The services, in start order.
pub const SERVICES: [&str; 6] = [
    "router",
    "substrate",
    "mcp-bridge",
    "ingress",
    "executor",
    "gateway",
];

/// One process the harness starts, kills and restarts.
pub struct Proc {
    /// `gateway-1`, `postgres`, …
    pub name: String,
    /// The service (`gateway`), or `postgres` / `redis` / `nats`.
    pub service: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    /// Its port, where it listens on one.
    pub port: Option<u16>,
    /// The address it listens on (the host address, or its namespace's).
    pub ip: IpAddr,
    /// The network namespace it runs in (`netns` index), if any.
    pub space: Option<(usize, String)>,
    child: Option<Child>,
    /// Times it was killed (-9), stopped, restarted.
    pub kills: u32,
}

impl Proc {
    /// Starts it (again), appending to its log.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("log {}", self.log.display()))?;
        let err = log.try_clone()?;
        let mut cmd = match &self.space {
            // `ip netns exec` execs the program: the pid is the program's own.
            Some((_, ns)) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.program);
                c
            }
            None => Command::new(&self.program),
        };
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .with_context(|| format!("start {} ({})", self.name, self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// `kill -9`, and waits for it to be gone.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
            self.kills += 1;
        }
    }

    /// Sends a signal by name (`STOP`, `CONT`, `TERM`).
    pub async fn signal(&self, sig: &str) -> anyhow::Result<()> {
        let Some(pid) = self.pid() else {
            bail!("{} is not running", self.name);
        };
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .await?;
        if !status.success() {
            bail!("kill -{sig} {} failed", self.name);
        }
        Ok(())
    }

    /// `Some(status)` if it exited on its own.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn log(&self) -> &Path {
        &self.log
    }
}

/// Waits until something accepts connections on `ip`:`port`.
pub async fn wait_port(name: &str, ip: IpAddr, port: u16, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        if tokio::net::TcpStream::connect((ip, port)).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name} did not listen on {port} within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `GET <url>/readyz` answers 200.
pub async fn wait_ready(url: &str, within: Duration) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let deadline = Instant::now() + within;
    loop {
        let status = http
            .get(format!("{url}/readyz"))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .ok();
        if status == Some(200) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{url} was not ready within {within:?} (last: {status:?})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A free port on `ip` (bound, then released).
pub fn free_port(ip: IpAddr) -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind((ip, 0))?;
    Ok(l.local_addr()?.port())
}

/// Where Postgres's programs are (`/usr/lib/postgresql/<v>/bin`).
fn pg_bin() -> anyhow::Result<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .context("no /usr/lib/postgresql (install postgresql; deploy/local/deps.sh does)")?
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    found.sort();
    found
        .pop()
        .context("no initdb under /usr/lib/postgresql/*/bin")
}

pub fn is_root() -> bool {
    std::env::var("USER").is_ok_and(|u| u == "root")
        || std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// What the fleet is made of.
pub struct Spec {
    pub replicas: usize,
    pub bin_dir: PathBuf,
    pub work: PathBuf,
    pub lease_ttl_ms: u64,
}

/// The running fleet.
pub struct Fleet {
    pub procs: Vec<Proc>,
    pub balancers: BTreeMap<String, Balancer>,
    pub database_url: String,
    pub admin_token: String,
    pub gateway_url: String,
    /// Each gateway replica's own URL (to read through a given replica).
    pub gateway_replicas: Vec<String>,
    /// Where everything on the host side listens (127.0.0.1 without namespaces).
    pub host: IpAddr,
    /// The namespaces of the partitionable replicas (the last replica of `executor` and of
    /// `gateway`), when the machine allows them.
    pub netns: Option<Netns>,
    pg_data: PathBuf,
    pg_port: u16,
    pg_bin: PathBuf,
    as_postgres: bool,
}

impl Fleet {
    /// Starts the fleet; with `netns`, the last replica of the executor and of the gateway run
    /// in namespaces 0 and 1, and the host side listens on `netns.host`.
    pub async fn start(spec: &Spec, netns: Option<Netns>) -> anyhow::Result<Self> {
        let host = netns
            .as_ref()
            .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |n| IpAddr::V4(n.host));
        std::fs::create_dir_all(&spec.work)?;
        let logs = spec.work.join("logs");
        std::fs::create_dir_all(&logs)?;
        let secret = hex::encode(rand::random::<[u8; 32]>());

        // Postgres: a cluster of our own, owned by `postgres` when we are root (initdb refuses
        // to run as root).
        let pg_bin = pg_bin()?;
        let as_postgres = is_root();
        let pg_data = spec.work.join("pg");
        let pg_port = free_port(host)?;
        std::fs::create_dir_all(&pg_data)?;
        if as_postgres {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&spec.work))
            .await?;
        }
        let initdb = pg_bin.join("initdb");
        let mut init = pg_cmd(as_postgres, &initdb);
        init.arg("-D").arg(&pg_data).args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        ]);
        run(&mut init).await.context("initdb")?;
        if let IpAddr::V4(v4) = host
            && !v4.is_loopback()
        {
            // initdb trusts loopback only; the namespaces connect from 10.213.x.y.
            use std::io::Write as _;
            let mut hba = std::fs::OpenOptions::new()
                .append(true)
                .open(pg_data.join("pg_hba.conf"))?;
            writeln!(hba, "host all all 10.213.0.0/16 trust")?;
        }
        let mut fleet = Self {
            procs: Vec::new(),
            balancers: BTreeMap::new(),
            database_url: format!("postgres://postgres@{host}:{pg_port}/weft"),
            admin_token: String::new(),
            gateway_url: String::new(),
            gateway_replicas: Vec::new(),
            host,
            netns,
            pg_data,
            pg_port,
            pg_bin,
            as_postgres,
        };
        fleet.postgres("start").await?;
        let mut create = Command::new(fleet.pg_bin.join("psql"));
        create
            .args(["-h", &host.to_string(), "-U", "postgres", "-p"])
            .arg(pg_port.to_string())
            .args(["-d", "postgres", "-qc", "CREATE DATABASE weft"]);
        run(&mut create).await.context("create database")?;

        // Redis and NATS, as children of ours.
        let redis_port = free_port(host)?;
        fleet.procs.push(Proc {
            name: "redis".into(),
            service: "redis".into(),
            program: "redis-server".into(),
            args: [
                "--port",
                &redis_port.to_string(),
                "--bind",
                &host.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
                // Bound to the namespaces' host address, which is not loopback.
                "--protected-mode",
                "no",
            ]
            .map(str::to_owned)
            .to_vec(),
            env: Vec::new(),
            log: logs.join("redis.log"),
            port: Some(redis_port),
            ip: host,
            space: None,
            child: None,
            kills: 0,
        });
        let nats_port = free_port(host)?;
        let nats_store = spec.work.join("nats");
        std::fs::create_dir_all(&nats_store)?;
        fleet.procs.push(Proc {
            name: "nats".into(),
            service: "nats".into(),
            program: "nats-server".into(),
            args: vec![
                "-a".into(),
                host.to_string(),
                "-p".into(),
                nats_port.to_string(),
                "-js".into(),
                "-sd".into(),
                nats_store.display().to_string(),
            ],
            env: Vec::new(),
            log: logs.join("nats.log"),
            port: Some(nats_port),
            ip: host,
            space: None,
            child: None,
            kills: 0,
        });
        for p in fleet.procs.iter_mut() {
            p.start().await?;
        }
        wait_port("redis", host, redis_port, Duration::from_secs(10)).await?;
        wait_port("nats", host, nats_port, Duration::from_secs(10)).await?;

        // The migrations and the admin token.
        let weft = spec.bin_dir.join("weft");
        let mut migrate = Command::new(&weft);
        migrate
            .args(["migrate", "--database-url"])
            .arg(&fleet.database_url);
        run(&mut migrate).await.context("weft migrate")?;
        let out = Command::new(&weft)
            .args([
                "token",
                "create",
                "--admin",
                "--name",
                "chaos",
                "--database-url",
            ])
            .arg(&fleet.database_url)
            .output()
            .await?;
        fleet.admin_token = String::from_utf8(out.stdout)?.trim().to_owned();
        if !fleet.admin_token.starts_with("wft_") {
            bail!(
                "weft token create printed no token: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }

        // Ports for every replica, and a balancer in front of each service that has one.
        let mut ports: BTreeMap<&str, Vec<u16>> = BTreeMap::new();
        for s in SERVICES {
            if s == "executor" {
                continue;
            }
            let list = (0..spec.replicas)
                .map(|_| free_port(host))
                .collect::<anyhow::Result<Vec<_>>>()?;
            ports.insert(s, list);
        }
        // The namespace a replica runs in, if any, and the address it listens on.
        let spaces: Vec<(String, IpAddr)> = fleet.netns.as_ref().map_or_else(Vec::new, |n| {
            n.spaces
                .iter()
                .map(|sp| (sp.ns.clone(), IpAddr::V4(sp.ip)))
                .collect()
        });
        let space = |s: &str, i: usize| -> Option<(usize, String, IpAddr)> {
            let k = match s {
                "executor" => 0,
                "gateway" => 1,
                _ => return None,
            };
            if spec.replicas < 2 || i + 1 != spec.replicas {
                return None;
            }
            let (ns, ip) = spaces.get(k)?;
            Some((k, ns.clone(), *ip))
        };
        let addr_of = |s: &str, i: usize| space(s, i).map_or(host, |(_, _, ip)| ip);
        let mut balancers = BTreeMap::new();
        for s in ["router", "substrate", "mcp-bridge", "gateway"] {
            let backends = ports[s]
                .iter()
                .enumerate()
                .map(|(i, p)| SocketAddr::new(addr_of(s, i), *p))
                .collect();
            balancers.insert(s.to_owned(), Balancer::start(host, backends).await?);
        }
        fleet.balancers = balancers;
        let lb = |s: &str| fleet.balancers[s].url();
        let config = format!(
            r#"# written by weft-chaos
[gateway]
router_url = "{router}"
substrate_url = "{substrate}"
tenant_max_concurrent_runs = 64
[executor]
router_url = "{router}"
substrate_url = "{substrate}"
mcp_bridge_url = "{bridge}"
lease_ttl_ms = {lease}
heartbeat_ms = {heartbeat}
sweep_interval_ms = 1000
sweep_after_ms = {sweep_after}
allowed_hosts = ["{host}"]
http_private_exempt = ["{host}/32"]
http_timeout_ms = 10000
max_deliver = 50
[router]
usage_spool_dir = "{spool}"
[router.tenants.{quota_tenant}.limits]
requests_per_minute = {quota_rpm}
[substrate]
router_url = "{router}"
[mcp_bridge]
substrate_url = "{substrate}"
[ingress]
substrate_url = "{substrate}"
[telemetry]
log_format = "text"
"#,
            router = lb("router"),
            substrate = lb("substrate"),
            bridge = lb("mcp-bridge"),
            lease = spec.lease_ttl_ms,
            heartbeat = (spec.lease_ttl_ms / 4).max(100),
            sweep_after = spec.lease_ttl_ms * 2,
            quota_tenant = crate::load::TENANT_Q,
            host = host,
            quota_rpm = crate::load::QUOTA_RPM,
            spool = spec.work.join("usage-spool").display(),
        );
        let config_file = spec.work.join("chaos.toml");
        std::fs::write(&config_file, config)?;
        let env = vec![
            ("WEFT_CONFIG".to_owned(), config_file.display().to_string()),
            ("WEFT_DATABASE__URL".to_owned(), fleet.database_url.clone()),
            (
                "WEFT_REDIS__URL".to_owned(),
                format!("redis://{host}:{redis_port}"),
            ),
            (
                "WEFT_NATS__URL".to_owned(),
                format!("nats://{host}:{nats_port}"),
            ),
            ("WEFT_AUTH__INTERNAL_JWT_SECRET".to_owned(), secret),
            (
                crate::load::WEBHOOK_SECRET_ENV.to_owned(),
                crate::load::WEBHOOK_SECRET.to_owned(),
            ),
            (
                "RUST_LOG".to_owned(),
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            ),
        ];
        for s in SERVICES {
            for i in 0..spec.replicas {
                let name = format!("{s}-{}", i + 1);
                let port = ports.get(s).and_then(|p| p.get(i)).copied();
                let mut args = Vec::new();
                let ip = addr_of(s, i);
                if let Some(port) = port {
                    args.push("--listen".to_owned());
                    args.push(SocketAddr::new(ip, port).to_string());
                }
                let mut p = Proc {
                    name: name.clone(),
                    service: s.to_owned(),
                    program: spec.bin_dir.join(format!("weft-{s}")),
                    args,
                    env: env.clone(),
                    log: logs.join(format!("{name}.log")),
                    port,
                    ip,
                    space: space(s, i).map(|(k, ns, _)| (k, ns)),
                    child: None,
                    kills: 0,
                };
                p.start().await?;
                fleet.procs.push(p);
            }
            // Each service's replicas listen before the next service starts.
            for p in fleet.procs.iter().filter(|p| p.service == s) {
                if let Some(port) = p.port {
                    wait_port(&p.name, p.ip, port, Duration::from_secs(60)).await?;
                }
            }
        }
        fleet.gateway_url = fleet.balancers["gateway"].url();
        fleet.gateway_replicas = ports["gateway"]
            .iter()
            .enumerate()
            .map(|(i, p)| format!("http://{}", SocketAddr::new(addr_of("gateway", i), *p)))
            .collect();
        // A replica listens before it has connected (it answers 503 meanwhile): the fleet is up
        // once every gateway replica says it is ready.
        for url in &fleet.gateway_replicas {
            wait_ready(url, Duration::from_secs(60)).await?;
        }
        Ok(fleet)
    }

    /// `pg_ctl start|stop|restart` on our cluster (`restart` is a crash: immediate mode).
    pub async fn postgres(&self, action: &str) -> anyhow::Result<()> {
        let mut cmd = pg_cmd(self.as_postgres, &self.pg_bin.join("pg_ctl"));
        cmd.arg("-D").arg(&self.pg_data).args(["-w", "-t", "60"]);
        match action {
            "start" | "restart" => {
                if action == "restart" {
                    let mut stop = pg_cmd(self.as_postgres, &self.pg_bin.join("pg_ctl"));
                    stop.arg("-D")
                        .arg(&self.pg_data)
                        .args(["-w", "-m", "immediate", "stop"]);
                    run(&mut stop).await.context("pg_ctl stop -m immediate")?;
                }
                cmd.arg("-l")
                    .arg(self.pg_data.join("server.log"))
                    .arg("-o")
                    .arg(format!(
                        "-p {} -c listen_addresses={} -c unix_socket_directories={} -c max_connections=400",
                        self.pg_port,
                        self.host,
                        self.pg_data.display()
                    ))
                    .arg("start");
            }
            "stop" => {
                cmd.args(["-m", "fast", "stop"]);
            }
            other => bail!("postgres {other}?"),
        }
        run(&mut cmd)
            .await
            .with_context(|| format!("pg_ctl {action}"))
    }

    pub fn find(&mut self, name: &str) -> Option<&mut Proc> {
        self.procs.iter_mut().find(|p| p.name == name)
    }

    /// Kills every process and stops Postgres.
    pub async fn stop(&mut self) {
        for p in self.procs.iter_mut().rev() {
            p.kill().await;
        }
        let _ = self.postgres("stop").await;
    }
}

fn pg_cmd(as_postgres: bool, program: &Path) -> Command {
    if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

async fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd.stdin(Stdio::null()).output().await?;
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}{}",
            cmd.as_std().get_program(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
