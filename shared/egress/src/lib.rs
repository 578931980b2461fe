//! Outbound connections to tenant-chosen addresses (the `HTTP` tool, the MCP bridge's client for
//! tenant-defined servers, anything else that dials a URL a tenant or a model chose):
//! - a [`HostAllowlist`], narrowed from the operator's floor by the agent and the caller;
//! - an [`AddressPolicy`] refusing non-public addresses (private, loopback, link-local, CGNAT,
//!   documentation, multicast, …) except the operator's exempt ranges, checked at dial time by
//!   [`guarded_resolver`] on the addresses actually connected to, so DNS rebinding fails.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// An exempt range that is not a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "executor.http_private_exempt: {0:?} is not a CIDR; write an address and a prefix length, like \"10.20.0.0/16\""
)]
pub struct InvalidExempt(pub String);

// ---------------------------------------------------------------------------------------------
// Host allowlist

/// One allowlist entry.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    /// `*`: any host.
    Any,
    /// `*.example.com`, stored as `.example.com`: any subdomain, not the apex.
    Subdomains(String),
    /// One host name or IP address, normalized.
    Exact(String),
}

impl HostPattern {
    fn parse(raw: &str) -> Option<Self> {
        let raw = raw.trim();
        if raw == "*" {
            return Some(Self::Any);
        }
        if let Some(rest) = raw.strip_prefix("*.") {
            let rest = normalize_host(rest);
            return (!rest.is_empty()).then(|| Self::Subdomains(format!(".{rest}")));
        }
        // Anything else, a stray `*` included, is a literal that can only match itself.
        let host = normalize_host(raw);
        (!host.is_empty()).then_some(Self::Exact(host))
    }

    /// Whether this pattern matches `host` (already normalized).
    fn matches(&self, host: &str) -> bool {
        match self {
            Self::Any => true,
            // IP addresses have no subdomains (`*.1` must not match `10.0.0.1`).
            Self::Subdomains(suffix) => host.parse::<IpAddr>().is_err() && host.ends_with(suffix),
            Self::Exact(h) => h == host,
        }
    }

    /// Whether every host `other` matches is matched by `self`.
    fn covers(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Any, _) => true,
            (_, Self::Any) => false,
            (Self::Subdomains(s), Self::Subdomains(t)) => t.ends_with(s.as_str()),
            (Self::Exact(_), Self::Subdomains(_)) => false,
            (_, Self::Exact(h)) => self.matches(h),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::Subdomains(suffix) => write!(f, "*{suffix}"),
            Self::Exact(h) => f.write_str(h),
        }
    }
}

/// Lowercase, without IPv6 brackets or a trailing dot; IP addresses in canonical form.
pub fn normalize_host(host: &str) -> String {
    let host = host.trim();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let host = host.strip_suffix('.').unwrap_or(host);
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host.to_ascii_lowercase(),
    }
}

/// The hosts one run's HTTP tool may reach. Entries: `api.example.com` (exact, case-insensitive),
/// `*.example.com` (any subdomain, not the apex), `*` (any host), or an IP address. Empty = no
/// outbound HTTP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostAllowlist(Vec<HostPattern>);

impl HostAllowlist {
    /// An allowlist of exactly these patterns (empty entries are ignored).
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Self {
        let mut out = Self(Vec::new());
        for p in patterns
            .iter()
            .filter_map(|p| HostPattern::parse(p.as_ref()))
        {
            out.push(p);
        }
        out
    }

    /// The run's allowlist: the operator's `floor`, narrowed by the agent definition's list and
    /// then by the caller's. `None` inherits the outer list, `Some(&[])` allows nothing, and
    /// nothing widens: a pattern is kept only as far as every outer layer allows it (agent
    /// `api.example.com` under floor `*.example.com` stays; agent `*` under floor `a.com`
    /// becomes `a.com`).
    pub fn narrow(
        floor: &[String],
        agent: Option<&[String]>,
        caller: Option<&[String]>,
    ) -> HostAllowlist {
        let mut list = Self::new(floor);
        for layer in [agent, caller].into_iter().flatten() {
            list = list.intersect(&Self::new(layer));
        }
        list
    }

    /// Hosts allowed by both lists. Two patterns that share a host always nest (suffixes of one
    /// host are suffixes of each other), so keeping the narrower of each overlapping pair is exact.
    fn intersect(&self, inner: &HostAllowlist) -> HostAllowlist {
        let mut out = HostAllowlist(Vec::new());
        for q in &inner.0 {
            if self.0.iter().any(|o| o.covers(q)) {
                out.push(q.clone());
            } else {
                for o in self.0.iter().filter(|o| q.covers(o)) {
                    out.push(o.clone());
                }
            }
        }
        out
    }

    fn push(&mut self, p: HostPattern) {
        if !self.0.contains(&p) {
            self.0.push(p);
        }
    }

    /// Whether `host` (a name or an IP address, any case, brackets and trailing dot allowed) may
    /// be reached.
    pub fn allows(&self, host: &str) -> bool {
        let host = normalize_host(host);
        !host.is_empty() && self.0.iter().any(|p| p.matches(&host))
    }

    /// Whether nothing at all is allowed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The patterns, normalized, as they would be written in config.
    pub fn patterns(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Address policy

/// A non-public address a guarded client refused to connect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedAddress {
    /// The DNS name that resolved to `ip`; `None` for an IP-literal URL.
    pub host: Option<String>,
    pub ip: IpAddr,
    /// What kind of address it is ("loopback", "private", …).
    pub class: &'static str,
}

impl fmt::Display for BlockedAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Some(host) => write!(
                f,
                "{host} resolves to {}, a {} address",
                self.ip, self.class
            ),
            None => write!(f, "{} is a {} address", self.ip, self.class),
        }
    }
}

impl StdError for BlockedAddress {}

/// Which addresses a guarded client may connect to: public ones, plus the operator's exempt ranges.
#[derive(Clone, Debug, Default)]
pub struct AddressPolicy {
    exempt: Vec<IpNet>,
}

impl AddressPolicy {
    /// A policy exempting these CIDRs (`executor.http_private_exempt`).
    pub fn new<S: AsRef<str>>(exempt: &[S]) -> Result<Self, InvalidExempt> {
        let exempt = exempt
            .iter()
            .map(|c| {
                c.as_ref()
                    .trim()
                    .parse::<IpNet>()
                    .map_err(|_| InvalidExempt(c.as_ref().to_owned()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { exempt })
    }

    /// `Ok` if a guarded client may connect to `ip`. An IPv4-mapped IPv6 address is judged (and
    /// exempted) as the IPv4 address it is.
    pub fn check(&self, ip: IpAddr, host: Option<&str>) -> Result<(), BlockedAddress> {
        let ip = ip.to_canonical();
        if self.exempt.iter().any(|net| net.contains(&ip)) {
            return Ok(());
        }
        match non_public_class(ip) {
            None => Ok(()),
            Some(class) => Err(BlockedAddress {
                host: host.map(str::to_owned),
                ip,
                class,
            }),
        }
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)
}

const fn v6(segments: [u16; 8], len: u8) -> Ipv6Net {
    let [a, b, c, d, e, f, g, h] = segments;
    Ipv6Net::new_assert(Ipv6Addr::new(a, b, c, d, e, f, g, h), len)
}

/// IPv4 ranges that are not publicly routable (IANA special-purpose registry), most specific
/// first where they nest.
const NON_PUBLIC_V4: [(Ipv4Net, &str); 16] = [
    (v4(0, 0, 0, 0, 8), "\"this network\" (unspecified)"),
    (v4(10, 0, 0, 0, 8), "private"),
    (v4(100, 64, 0, 0, 10), "shared (CGNAT)"),
    (v4(127, 0, 0, 0, 8), "loopback"),
    (v4(169, 254, 0, 0, 16), "link-local"),
    (v4(172, 16, 0, 0, 12), "private"),
    (v4(192, 0, 0, 0, 24), "IETF protocol assignment"),
    (v4(192, 0, 2, 0, 24), "documentation"),
    (v4(192, 88, 99, 0, 24), "6to4 relay anycast"),
    (v4(192, 168, 0, 0, 16), "private"),
    (v4(198, 18, 0, 0, 15), "benchmarking"),
    (v4(198, 51, 100, 0, 24), "documentation"),
    (v4(203, 0, 113, 0, 24), "documentation"),
    (v4(224, 0, 0, 0, 4), "multicast"),
    (v4(255, 255, 255, 255, 32), "broadcast"),
    (v4(240, 0, 0, 0, 4), "reserved"),
];

/// IPv6 ranges that are not publicly routable. Everything outside 2000::/3 (global unicast)
/// is refused as well, except the NAT64 prefix, which is judged by the IPv4 address it carries.
const NON_PUBLIC_V6: [(Ipv6Net, &str); 12] = [
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 128), "unspecified"),
    (v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "loopback"),
    (
        v6([0, 0, 0, 0, 0, 0, 0, 0], 96),
        "IPv4-compatible (deprecated)",
    ),
    (v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), "local-use NAT64"),
    (v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), "discard-only"),
    (v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), "documentation"),
    (
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23),
        "IETF protocol assignment",
    ),
    (v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), "documentation"),
    (v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), "unique-local"),
    (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "link-local"),
    (
        v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),
        "site-local (deprecated)",
    ),
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "multicast"),
];

const NAT64: Ipv6Net = v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96);
const SIX_TO_FOUR: Ipv6Net = v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16);
const GLOBAL_UNICAST: Ipv6Net = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3);

/// `Some(kind)` if `ip` is not a public unicast address.
pub fn non_public_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(ip) => NON_PUBLIC_V4
            .iter()
            .find(|(net, _)| net.contains(&ip))
            .map(|(_, class)| *class),
        IpAddr::V6(ip) => {
            if let Some(v4) = ip.to_ipv4_mapped() {
                return non_public_class(IpAddr::V4(v4)).map(|_| "IPv4-mapped non-public");
            }
            let [.., a, b, c, d] = ip.octets();
            if NAT64.contains(&ip) {
                return non_public_class(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
                    .map(|_| "NAT64 of a non-public IPv4");
            }
            if SIX_TO_FOUR.contains(&ip) {
                let [_, _, a, b, c, d, ..] = ip.octets();
                if non_public_class(IpAddr::V4(Ipv4Addr::new(a, b, c, d))).is_some() {
                    return Some("6to4 of a non-public IPv4");
                }
            }
            if let Some((_, class)) = NON_PUBLIC_V6.iter().find(|(net, _)| net.contains(&ip)) {
                return Some(class);
            }
            (!GLOBAL_UNICAST.contains(&ip)).then_some("non-global IPv6")
        }
    }
}

/// Where a guarded client's names are looked up. The system's resolver ([`SystemLookup`]) in
/// production; a test puts a scripted one here to play DNS answers that change between calls.
pub trait Lookup: Send + Sync + 'static {
    /// The addresses `host` resolves to now.
    fn lookup(
        &self,
        host: String,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>;
}

/// tokio's lookup, which is the system's (`getaddrinfo`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(
        &self,
        host: String,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>> {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|a| a.ip())
                .collect())
        })
    }
}

/// A resolver for any outbound client that must keep to `policy` at dial time (the MCP
/// bridge's client for tenant-defined servers uses it too).
pub fn guarded_resolver(policy: Arc<AddressPolicy>) -> Arc<dyn Resolve> {
    guarded_resolver_over(policy, Arc::new(SystemLookup))
}

/// [`guarded_resolver`] over another [`Lookup`]. The addresses checked are the addresses the
/// client connects to: there is one lookup per connection, so an answer that changes between a
/// check and a connect cannot happen.
pub fn guarded_resolver_over(
    policy: Arc<AddressPolicy>,
    lookup: Arc<dyn Lookup>,
) -> Arc<dyn Resolve> {
    Arc::new(GuardedResolver { policy, lookup })
}

/// The client's resolver: the lookup, refusing the name outright if any of its addresses is
/// non-public, so a name cannot smuggle one in among public ones.
struct GuardedResolver {
    policy: Arc<AddressPolicy>,
    lookup: Arc<dyn Lookup>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let host = name.as_str().to_owned();
        let lookup = self.lookup.lookup(host.clone());
        Box::pin(async move {
            // A name that does not resolve is refused in the same words as one that resolves
            // to a non-public address: the difference would tell a model which internal names
            // exist. So is a name with no address at all.
            let ips = match lookup.await {
                Ok(ips) if !ips.is_empty() => ips,
                Ok(_) => return Err(Box::new(Unresolved) as Box<dyn StdError + Send + Sync>),
                Err(e) => {
                    tracing::debug!(%host, error = %e, "egress: lookup failed");
                    return Err(Box::new(Unresolved) as Box<dyn StdError + Send + Sync>);
                }
            };
            for ip in &ips {
                policy.check(*ip, Some(&host))?;
            }
            let addrs: Vec<SocketAddr> = ips.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect();
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The whole message for a refused or unresolvable address.
pub const REFUSED_ADDRESS: &str = "not an allowed address";

/// A name the resolver could not resolve.
#[derive(Debug)]
pub struct Unresolved;

impl fmt::Display for Unresolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REFUSED_ADDRESS)
    }
}

impl StdError for Unresolved {}
