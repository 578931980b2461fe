//! The SSRF suite: every outbound path that fetches a URL a tenant or a model chose — the `HTTP`
//! tool and the MCP client pool's streamable-HTTP servers — refuses every spelling of a
//! non-public address, before connecting: IPv4 in decimal, octal and hex, short forms (`127.1`),
//! IPv4-mapped and -compatible IPv6, NAT64 and 6to4 wrappers, unspecified, link-local,
//! unique-local, CGNAT, metadata, names that resolve there, DNS answers that change between two
//! lookups, answers mixing public and private addresses, and redirects to any of these.
//!
//! The router's provider URLs are the operator's configuration, not a tenant's, and are not on
//! this list; nothing else in weft fetches.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use weft_config::{ExecutorConfig, McpBridgeConfig};
use weft_core::mcp::{McpServerContent, McpTransport};
use weft_executor::tools::http::{HostAllowlist, HttpTool, Lookup, SystemLookup};
use weft_mcp_bridge::pool::{Pool, ServerRef};

const REFUSED: &str = "refused: not an allowed address";

/// A DNS of the test's own: each scripted name answers its list of answers in turn (the last one
/// again once they run out); any other name goes to the system's resolver.
#[derive(Default)]
struct ScriptedDns {
    answers: Mutex<HashMap<String, Vec<Vec<IpAddr>>>>,
    lookups: AtomicUsize,
}

impl ScriptedDns {
    fn with(names: &[(&str, &[&[&str]])]) -> Arc<Self> {
        let dns = Self::default();
        {
            let mut answers = dns.answers.lock().unwrap();
            for (name, seq) in names {
                let seq = seq
                    .iter()
                    .map(|ips| ips.iter().map(|ip| ip.parse().unwrap()).collect())
                    .collect();
                answers.insert((*name).to_owned(), seq);
            }
        }
        Arc::new(dns)
    }

    fn lookups(&self) -> usize {
        self.lookups.load(Ordering::SeqCst)
    }
}

impl Lookup for ScriptedDns {
    fn lookup(
        &self,
        host: String,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let scripted = self.answers.lock().unwrap().get_mut(&host).map(|seq| {
            if seq.len() > 1 {
                seq.remove(0)
            } else {
                seq[0].clone()
            }
        });
        match scripted {
            Some(ips) => Box::pin(async move { Ok(ips) }),
            None => SystemLookup.lookup(host),
        }
    }
}

/// A plain HTTP server on `ip` that counts the connections it accepts. `GET /to/<url>` answers
/// `302 Location: <url>` (the rest of the path, percent-decoded); anything else answers 200.
struct Listener {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl Listener {
    async fn on(ip: &str) -> Self {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let Ok(n) = sock.read(&mut buf).await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                    let reply = match path.strip_prefix("/to/") {
                        Some(to) => format!(
                            "HTTP/1.1 302 Found\r\nlocation: {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                            decode(to)
                        ),
                        None => "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok".to_owned(),
                    };
                    let _ = sock.write_all(reply.as_bytes()).await;
                });
            }
        });
        Self { addr, connections }
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Scripted names: each resolves to a non-public address, or turns into one.
const NAMES: &[(&str, &[&[&str]])] = &[
    ("loopback.weft.test", &[&["127.0.0.1"]]),
    ("metadata.weft.test", &[&["169.254.169.254"]]),
    ("private.weft.test", &[&["10.1.2.3"]]),
    ("ula.weft.test", &[&["fd00::1"]]),
    ("mapped.weft.test", &[&["::ffff:127.0.0.1"]]),
    // Public and private in one answer: the name is refused outright.
    ("mixed.weft.test", &[&["93.184.216.34", "127.0.0.1"]]),
    ("mixed6.weft.test", &[&["2606:4700::1111", "::1"]]),
    // A name that is public at the first lookup and private from then on (DNS rebinding).
    ("rebind.weft.test", &[&["93.184.216.34"], &["127.0.0.1"]]),
    // A name with no address at all.
    ("empty.weft.test", &[&[]]),
];

/// Every form, with `{port}` standing for the loopback listener's port. Each one is a URL whose
/// host is, or resolves to, a non-public address.
const FORMS: &[&str] = &[
    "http://127.0.0.1:{port}/",
    "http://127.1:{port}/",
    "http://127.0.1:{port}/",
    "http://2130706433:{port}/",
    "http://0x7f000001:{port}/",
    "http://0x7f.0.0.1:{port}/",
    "http://0x7f.1:{port}/",
    "http://0177.0.0.1:{port}/",
    "http://017700000001:{port}/",
    "http://127.000.000.001:{port}/",
    "http://0:{port}/",
    "http://0.0.0.0:{port}/",
    "http://[::1]:{port}/",
    "http://[::]:{port}/",
    "http://[0:0:0:0:0:0:0:1]:{port}/",
    "http://[::ffff:127.0.0.1]:{port}/",
    "http://[::ffff:7f00:1]:{port}/",
    "http://[::127.0.0.1]:{port}/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[64:ff9b::7f00:1]:{port}/",
    "http://[2002:7f00:1::]:{port}/",
    "http://[::ffff:0:7f00:1]:{port}/",
    "http://169.254.169.254/latest/meta-data/",
    "http://0xa9fea9fe/",
    "http://[fe80::1]/",
    "http://[fc00::1]/",
    "http://[fd12:3456:789a::1]/",
    "http://10.0.0.1/",
    "http://0x0a.0.0.1/",
    "http://172.16.0.1/",
    "http://192.168.0.1/",
    "http://100.64.0.1/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://localhost:{port}/",
    "http://LOCALHOST.:{port}/",
    "https://127.0.0.1:{port}/",
    "http://loopback.weft.test:{port}/",
    "http://metadata.weft.test/",
    "http://private.weft.test/",
    "http://ula.weft.test/",
    "http://mapped.weft.test:{port}/",
    "http://mixed.weft.test:{port}/",
    "http://mixed6.weft.test:{port}/",
    "http://empty.weft.test/",
    "http://no-such-host.invalid/",
];

fn forms(port: u16) -> Vec<String> {
    FORMS
        .iter()
        .map(|f| f.replace("{port}", &port.to_string()))
        .collect()
}

fn executor_cfg(exempt: &[&str]) -> ExecutorConfig {
    ExecutorConfig {
        http_private_exempt: exempt.iter().map(|s| (*s).to_owned()).collect(),
        http_timeout_ms: 5_000,
        ..ExecutorConfig::default()
    }
}

fn bridge_cfg(exempt: &[&str]) -> McpBridgeConfig {
    McpBridgeConfig {
        private_exempt: exempt.iter().map(|s| (*s).to_owned()).collect(),
        connect_timeout_ms: 5_000,
        ..McpBridgeConfig::default()
    }
}

fn every_host() -> HostAllowlist {
    HostAllowlist::new(&["*"])
}

async fn http_get(tool: &HttpTool, url: &str) -> (bool, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        tool.call(&json!({"method": "GET", "url": url}), &every_host()),
    )
    .await
    .expect("the HTTP tool answers within its time cap");
    (out.is_error, out.text)
}

fn mcp_server(url: &str) -> McpServerContent {
    McpServerContent {
        transport: McpTransport::Http,
        url: Some(url.to_owned()),
        ..McpServerContent::default()
    }
}

async fn mcp_list(pool: &Pool, name: &str, url: &str) -> Result<usize, String> {
    let content = mcp_server(url);
    let server = ServerRef {
        tenant: "t-ssrf",
        name,
        version: "v1",
        content: &content,
    };
    tokio::time::timeout(
        Duration::from_secs(20),
        pool.list_tools(&server, &BTreeMap::new()),
    )
    .await
    .expect("the pool answers within its connect timeout")
    .map(|tools| tools.len())
    .map_err(|e| e.to_string())
}

#[tokio::test]
async fn the_http_tool_refuses_every_form_before_connecting() {
    let listener = Listener::on("127.0.0.1").await;
    let dns = ScriptedDns::with(NAMES);
    let tool = HttpTool::with_lookup(&executor_cfg(&[]), dns.clone()).unwrap();
    let all = forms(listener.port());
    assert!(all.len() >= 30, "the suite holds {} forms", all.len());
    for url in &all {
        let (is_error, text) = http_get(&tool, url).await;
        assert!(is_error, "{url} was fetched: {text}");
        assert_eq!(text, REFUSED, "{url}");
    }
    // The rebinding name: public at its first lookup (nothing listens there; the call fails
    // whichever way it goes), private at the second, and refused then.
    let _ = http_get(&tool, "http://rebind.weft.test:9/").await;
    let (is_error, text) = http_get(
        &tool,
        &format!("http://rebind.weft.test:{}/", listener.port()),
    )
    .await;
    assert!(is_error);
    assert_eq!(text, REFUSED);
    assert_eq!(
        listener.connections(),
        0,
        "a refused form reached the server"
    );
    assert!(dns.lookups() > 0, "the scripted names were looked up");
    eprintln!("http tool: {} forms refused", all.len() + 1);
}

#[tokio::test]
async fn the_http_tool_refuses_redirects_to_every_form() {
    // The redirecting server is on an exempt address of its own (127.0.0.3); every target is
    // not exempt, and the loopback ones point at the counting listener on 127.0.0.1.
    let origin = Listener::on("127.0.0.3").await;
    let target = Listener::on("127.0.0.1").await;
    let dns = ScriptedDns::with(NAMES);
    let tool = HttpTool::with_lookup(&executor_cfg(&["127.0.0.3/32"]), dns).unwrap();
    let targets = forms(target.port());
    for to in &targets {
        let url = format!("http://127.0.0.3:{}/to/{}", origin.port(), encode(to));
        let (is_error, text) = http_get(&tool, &url).await;
        assert!(is_error, "a redirect to {to} was followed: {text}");
        // A literal address is refused as the redirect is read ("redirect from … refused"), a
        // name when its lookup is checked: the same words either way.
        assert!(text.contains(REFUSED), "{to}: {text}");
    }
    assert_eq!(origin.connections(), targets.len());
    assert_eq!(
        target.connections(),
        0,
        "a redirect reached a private address"
    );
    eprintln!("http tool: {} redirect targets refused", targets.len());
}

#[tokio::test]
async fn a_name_is_looked_up_once_per_connection_so_it_cannot_rebind_in_between() {
    // The exempt listener stands for a public address; 127.0.0.2 for the private one the name
    // turns into after its first answer.
    let public = Listener::on("127.0.0.1").await;
    let private = Listener::on("127.0.0.2").await;
    let dns = ScriptedDns::with(&[("flip.weft.test", &[&["127.0.0.1"], &["127.0.0.2"]])]);
    let tool = HttpTool::with_lookup(&executor_cfg(&["127.0.0.1/32"]), dns.clone()).unwrap();
    let (is_error, text) =
        http_get(&tool, &format!("http://flip.weft.test:{}/", public.port())).await;
    assert!(!is_error, "the public answer is fetched: {text}");
    assert_eq!(dns.lookups(), 1, "one lookup for one connection");
    assert_eq!(public.connections(), 1);
    // The next connection looks the name up again and is refused: the answer the check saw is
    // the answer the connection uses.
    let (is_error, text) =
        http_get(&tool, &format!("http://flip.weft.test:{}/", private.port())).await;
    assert!(is_error);
    assert_eq!(text, REFUSED);
    assert_eq!(private.connections(), 0);
}

#[tokio::test]
async fn the_mcp_pool_refuses_every_form_before_connecting() {
    let listener = Listener::on("127.0.0.1").await;
    let dns = ScriptedDns::with(NAMES);
    let pool = Pool::with_lookup(bridge_cfg(&[]), dns).unwrap();
    let mut all: Vec<String> = forms(listener.port())
        .into_iter()
        .map(|u| format!("{u}mcp"))
        .collect();
    all.push(format!("http://rebind.weft.test:{}/mcp", listener.port()));
    // User info in the URL is refused too, whatever the host.
    all.push(format!("http://user:pw@127.0.0.1:{}/mcp", listener.port()));
    for (i, url) in all.iter().enumerate() {
        let got = mcp_list(&pool, &format!("s{i}"), url).await;
        let err = got.expect_err(&format!("{url} was reached"));
        assert!(err.contains(REFUSED), "{url}: {err}");
    }
    assert_eq!(
        listener.connections(),
        0,
        "a refused form reached the server"
    );
    eprintln!("mcp pool: {} forms refused", all.len());
}

#[tokio::test]
async fn the_mcp_pool_follows_no_redirect() {
    let origin = Listener::on("127.0.0.1").await;
    let target = Listener::on("127.0.0.2").await;
    let pool = Pool::with_lookup(bridge_cfg(&["127.0.0.1/32"]), Arc::new(SystemLookup)).unwrap();
    for (i, to) in [
        format!("http://127.0.0.2:{}/mcp", target.port()),
        "http://169.254.169.254/mcp".to_owned(),
        format!("http://[::1]:{}/mcp", target.port()),
    ]
    .iter()
    .enumerate()
    {
        let url = format!("http://127.0.0.1:{}/to/{}", origin.port(), encode(to));
        let got = mcp_list(&pool, &format!("r{i}"), &url).await;
        assert!(got.is_err(), "{to}: {got:?}");
    }
    assert!(origin.connections() >= 3);
    assert_eq!(target.connections(), 0, "a redirect was followed");
}
