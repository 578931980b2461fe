//! Network namespaces, for partitions: some replicas run each in a namespace of its own, joined
//! to the host by a veth pair, with an address of its own. Cutting the host end of the pair
//! (`ip link set … down`) partitions that replica from everything (Postgres, Redis, NATS, its
//! peers, the balancers) while it keeps running; bringing it up heals the partition.
//!
//! Everything on the host side (Postgres, Redis, NATS, the balancers, the other replicas, the
//! echo server) then listens on one host address added to `lo`, which the namespaces reach
//! through their veth. Needs root and iproute2; without them the fleet stays on 127.0.0.1 and
//! no partition is injected (the report says so).

use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{Context as _, bail};

/// One namespace: its name, the host end of its veth pair, and its address.
pub struct Space {
    pub ns: String,
    pub veth: String,
    pub ip: Ipv4Addr,
}

/// The namespaces of a fleet and the host address they reach it on. Removed on drop.
pub struct Netns {
    pub host: Ipv4Addr,
    pub spaces: Vec<Space>,
    /// What was made, so that dropping removes exactly that (another run's resources are not
    /// ours to delete): the address on `lo`, the blackhole route.
    host_added: bool,
    blackhole: Option<String>,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("run ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Netns {
    /// `n` namespaces in a /24 of 10.213.0.0/16 that no interface here uses yet.
    pub fn create(n: usize) -> anyhow::Result<Self> {
        let addrs = Command::new("ip")
            .args(["-o", "-4", "addr", "show"])
            .output()
            .context("ip -o -4 addr show (iproute2 missing?)")?;
        if !addrs.status.success() {
            bail!("ip -o -4 addr show failed");
        }
        let addrs = String::from_utf8_lossy(&addrs.stdout).into_owned();
        if n > 60 {
            bail!("at most 60 network namespaces");
        }
        let Some(b) = (0..64)
            .map(|_| rand::random_range(1u8..=254))
            .find(|b| !addrs.contains(&format!(" 10.213.{b}.")))
        else {
            bail!("no free 10.213.x.0/24 for the namespaces");
        };
        let host = Ipv4Addr::new(10, 213, b, 1);
        let tag = format!("wc{}", std::process::id() % 100_000);
        let mut me = Self {
            host,
            spaces: Vec::new(),
            host_added: false,
            blackhole: None,
        };
        ip(&["addr", "add", &format!("{host}/32"), "dev", "lo"])?;
        me.host_added = true;
        // While a space's link is down its /30 route is gone: without this, what the host
        // sends it would follow the default route out of the machine instead of being dropped.
        let net = format!("10.213.{b}.0/24");
        ip(&["route", "add", "blackhole", &net])?;
        me.blackhole = Some(net);
        for i in 1..=n {
            let (ns, veth, peer) = (
                format!("{tag}-{b}-{i}"),
                format!("{tag}h{i}"),
                format!("{tag}n{i}"),
            );
            let (gw, addr) = (
                Ipv4Addr::new(10, 213, b, 4 * u8::try_from(i)? + 1),
                Ipv4Addr::new(10, 213, b, 4 * u8::try_from(i)? + 2),
            );
            ip(&["netns", "add", &ns])?;
            let made = ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer]);
            me.spaces.push(Space {
                ns: ns.clone(),
                // Only a veth we made is ours to delete.
                veth: if made.is_ok() {
                    veth.clone()
                } else {
                    String::new()
                },
                ip: addr,
            });
            made?;
            ip(&["link", "set", &peer, "netns", &ns])?;
            ip(&["addr", "add", &format!("{gw}/30"), "dev", &veth])?;
            ip(&["link", "set", &veth, "up"])?;
            let inside = |args: &[&str]| {
                let mut all = vec!["netns", "exec", &ns, "ip"];
                all.extend_from_slice(args);
                ip(&all)
            };
            inside(&["addr", "add", &format!("{addr}/30"), "dev", &peer])?;
            inside(&["link", "set", &peer, "up"])?;
            inside(&["link", "set", "lo", "up"])?;
            inside(&["route", "add", "default", "via", &gw.to_string()])?;
        }
        Ok(me)
    }

    /// Cuts (`false`) or restores (`true`) space `i`'s link to the host.
    pub fn link(&self, i: usize, up: bool) -> anyhow::Result<()> {
        let Some(s) = self.spaces.get(i) else {
            bail!("no network namespace {i}");
        };
        ip(&["link", "set", &s.veth, if up { "up" } else { "down" }])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and with it the host end.
        for s in &self.spaces {
            let _ = ip(&["netns", "delete", &s.ns]);
            if !s.veth.is_empty() {
                let _ = ip(&["link", "delete", &s.veth]);
            }
        }
        if let Some(net) = &self.blackhole {
            let _ = ip(&["route", "del", "blackhole", net]);
        }
        if self.host_added {
            let _ = ip(&["addr", "del", &format!("{}/32", self.host), "dev", "lo"]);
        }
    }
}
