//! The rules of channels that need no database: names, scopes, bounds, partitions and cursors.
//! Every check answers with a 400 naming the field at fault and saying how to fix it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};
use weft_core::{Error, Principal};

/// Longest channel name.
pub const MAX_NAME_LEN: usize = 128;
/// Largest payload, as JSON text.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// Most messages one read or peek returns.
pub const MAX_READ: u32 = 1000;
/// Messages a read returns when `max` is not given.
pub const DEFAULT_READ: u32 = 100;
/// Messages a peek returns when `max` is not given.
pub const DEFAULT_PEEK: u32 = 10;
/// Longest long-poll.
pub const MAX_WAIT_MS: u32 = 30_000;
/// Most channels one `await` watches.
pub const MAX_AWAIT_CHANNELS: usize = 64;
/// A message's lifetime when the channel does not say.
pub const DEFAULT_TTL_SECONDS: u64 = 86_400;
/// Longest message lifetime (30 days).
pub const MAX_TTL_SECONDS: u64 = 30 * 86_400;
/// Messages kept per partition when the channel does not say.
pub const DEFAULT_MAX_MESSAGES: u64 = 1000;
/// Most messages a partition may keep.
pub const MAX_MAX_MESSAGES: u64 = 100_000;
/// Most channels one tenant may have.
pub const MAX_CHANNELS_PER_TENANT: i64 = 1000;
/// Longest `op_key`, `consumer` or `user`.
pub const MAX_KEY_LEN: usize = 256;
/// Longest agent name (as agent definitions).
pub const MAX_AGENT_LEN: usize = 64;

/// A name that is a route (`/v1/channels/await`), so no channel may have it.
pub const RESERVED_NAME: &str = "await";

fn bad(field: &str, message: String) -> Error {
    Error::invalid(message).with_param(field)
}

/// Checks a channel name: 1-128 characters of `A-Z a-z 0-9 _ - .`, where dots separate
/// non-empty segments (agents' ACLs match `prefix.*`).
pub fn validate_name(field: &str, name: &str) -> Result<(), Error> {
    let chars_ok = name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
    let segments_ok = name.split('.').all(|s| !s.is_empty());
    if name == RESERVED_NAME {
        Err(bad(
            field,
            format!(
                "`{field}`: channel name `{RESERVED_NAME}` is reserved (it is the route POST /v1/channels/await); choose another name"
            ),
        ))
    } else if !name.is_empty() && name.len() <= MAX_NAME_LEN && chars_ok && segments_ok {
        Ok(())
    } else {
        let shown: String = name.chars().take(MAX_NAME_LEN).collect();
        Err(bad(
            field,
            format!(
                "`{field}`: channel name `{}` is not valid; use 1-{MAX_NAME_LEN} characters of A-Z, a-z, 0-9, '_', '-' and '.', with dots between non-empty segments (`jobs.eu`)",
                shown.escape_default()
            ),
        ))
    }
}

/// Checks a caller-given key (`op_key`, `consumer`, `user`): 1-256 characters, no control
/// characters (so no NUL).
pub fn validate_key(field: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() || value.len() > MAX_KEY_LEN || value.chars().any(char::is_control) {
        return Err(bad(
            field,
            format!("`{field}` must be 1-{MAX_KEY_LEN} characters without control characters"),
        ));
    }
    Ok(())
}

/// Checks an agent name as agent definitions spell them: 1-64 characters of a-z, 0-9, '_'
/// and '-', starting with a letter or digit.
pub fn validate_agent(agent: &str) -> Result<(), Error> {
    let ok = !agent.is_empty()
        && agent.len() <= MAX_AGENT_LEN
        && agent
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-'))
        && agent
            .bytes()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(bad(
            "agent",
            format!(
                "`agent` must be an agent name: 1-{MAX_AGENT_LEN} characters of a-z, 0-9, '_' and '-', starting with a letter or digit"
            ),
        ))
    }
}

/// How a channel is partitioned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelScope {
    /// One stream per agent name.
    Agent,
    /// One stream per subject.
    User,
    /// One stream for the tenant.
    Tenant,
}

impl ChannelScope {
    /// Parses `agent`, `user` or `tenant` given in `field`.
    pub fn parse(field: &str, s: &str) -> Result<Self, Error> {
        match s {
            "agent" => Ok(Self::Agent),
            "user" => Ok(Self::User),
            "tenant" => Ok(Self::Tenant),
            _ => Err(bad(
                field,
                format!(
                    "`{field}` must be `agent`, `user` or `tenant`, got `{}`",
                    s.chars().take(32).collect::<String>().escape_default()
                ),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::User => "user",
            Self::Tenant => "tenant",
        }
    }
}

/// A channel's bounds, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub ttl_seconds: u64,
    pub max_messages: u64,
}

/// Checks `ttl_seconds` and `max_messages`, filling in the defaults. `prefix` is put before the
/// field names in messages (`substrate.channels.jobs.` for config).
pub fn bounds(
    prefix: &str,
    ttl_seconds: Option<u64>,
    max_messages: Option<u64>,
) -> Result<Bounds, Error> {
    let ttl = ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS);
    if !(1..=MAX_TTL_SECONDS).contains(&ttl) {
        return Err(bad(
            "ttl_seconds",
            format!(
                "`{prefix}ttl_seconds` must be between 1 and {MAX_TTL_SECONDS} (30 days), got {ttl}"
            ),
        ));
    }
    let max = max_messages.unwrap_or(DEFAULT_MAX_MESSAGES);
    if !(1..=MAX_MAX_MESSAGES).contains(&max) {
        return Err(bad(
            "max_messages",
            format!("`{prefix}max_messages` must be between 1 and {MAX_MAX_MESSAGES}, got {max}"),
        ));
    }
    Ok(Bounds {
        ttl_seconds: ttl,
        max_messages: max,
    })
}

/// `max` of a read or peek: 1-1000, `default` when absent.
pub fn max_count(max: Option<u32>, default: u32) -> Result<u32, Error> {
    match max {
        None => Ok(default),
        Some(m) if (1..=MAX_READ).contains(&m) => Ok(m),
        Some(m) => Err(bad(
            "max",
            format!("`max` must be between 1 and {MAX_READ}, got {m}"),
        )),
    }
}

/// `wait_ms` of a read or await: at most 30000.
pub fn wait_ms(wait: Option<u32>) -> Result<u32, Error> {
    match wait.unwrap_or(0) {
        w if w <= MAX_WAIT_MS => Ok(w),
        w => Err(bad(
            "wait_ms",
            format!(
                "`wait_ms` must be at most {MAX_WAIT_MS} (a long-poll is bounded), got {w}; read again after it returns"
            ),
        )),
    }
}

/// A payload: JSON text of at most 64 KiB with no NUL in its strings, returned compact.
pub fn payload(json: &str) -> Result<String, Error> {
    if json.len() > MAX_PAYLOAD_BYTES {
        return Err(bad(
            "payload",
            format!(
                "`payload` is {} bytes as JSON; the limit is {MAX_PAYLOAD_BYTES} (64 KiB): store large data elsewhere and publish a reference",
                json.len()
            ),
        ));
    }
    let v: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| bad("payload", format!("`payload` is not valid JSON: {e}")))?;
    if weft_core::storable::nul_path(&v).is_some() {
        return Err(bad(
            "payload",
            "`payload` contains a NUL character (U+0000), which weft does not store; remove it"
                .into(),
        ));
    }
    Ok(v.to_string())
}

/// The partition of a channel a request addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// `''` (tenant), `user:<subject>` or `agent:<name>`.
    pub key: String,
    /// The key's hash: in cursors and in the wake-up subject.
    pub hash: u64,
}

impl Partition {
    fn new(key: String) -> Self {
        let digest = Sha256::digest(key.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        Self {
            key,
            hash: u64::from_be_bytes(first),
        }
    }
}

/// Which partition of a `scope` channel the caller addresses: the tenant's, the caller's own
/// (or, for a tenant admin, the named `user`'s), or the named `agent`'s. `agent` and `user` are
/// ignored on channels of other scopes.
pub fn partition(
    scope: ChannelScope,
    p: &Principal,
    agent: Option<&str>,
    user: Option<&str>,
) -> Result<Partition, Error> {
    match scope {
        ChannelScope::Tenant => Ok(Partition::new(String::new())),
        ChannelScope::User => {
            let subject = match user {
                None => p.subject.as_str(),
                Some(u) => {
                    validate_key("user", u)?;
                    if u != p.subject && !p.administers(&p.tenant) {
                        return Err(Error::forbidden(
                            "naming another subject's stream of a user channel (`user`) needs the `tenant:admin` scope; leave `user` out for your own",
                        ));
                    }
                    u
                }
            };
            Ok(Partition::new(format!("user:{subject}")))
        }
        ChannelScope::Agent => {
            let agent = agent.ok_or_else(|| {
                bad(
                    "agent",
                    "this channel has scope `agent`: give `agent`, the agent whose stream to use"
                        .into(),
                )
            })?;
            validate_agent(agent)?;
            Ok(Partition::new(format!("agent:{agent}")))
        }
    }
}

const CURSOR_VERSION: u8 = 1;
const CURSOR_BYTES: usize = 25;

/// A position in one partition of one channel: after message `seq` (0 = the beginning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub channel: i64,
    pub partition: u64,
    pub seq: i64,
}

impl Cursor {
    /// The opaque text form: base64url of a version byte, the channel id, the partition hash and
    /// the seq.
    pub fn encode(self) -> String {
        let mut b = Vec::with_capacity(CURSOR_BYTES);
        b.push(CURSOR_VERSION);
        b.extend_from_slice(&self.channel.to_be_bytes());
        b.extend_from_slice(&self.partition.to_be_bytes());
        b.extend_from_slice(&self.seq.to_be_bytes());
        URL_SAFE_NO_PAD.encode(b)
    }

    /// Parses a cursor given in `field`; anything that is not one weft made is a 400.
    pub fn decode(field: &str, s: &str) -> Result<Self, Error> {
        let invalid = || {
            bad(
                field,
                format!(
                    "`{field}` is not a cursor weft gave out; pass back the `cursor` of a read, or leave it out to read after your committed cursor"
                ),
            )
        };
        if s.len() > 64 {
            return Err(invalid());
        }
        let b = URL_SAFE_NO_PAD.decode(s).map_err(|_| invalid())?;
        if b.len() != CURSOR_BYTES || b[0] != CURSOR_VERSION {
            return Err(invalid());
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            w
        };
        let c = Self {
            channel: i64::from_be_bytes(word(1)),
            partition: u64::from_be_bytes(word(9)),
            seq: i64::from_be_bytes(word(17)),
        };
        if c.channel < 1 || c.seq < 0 {
            return Err(invalid());
        }
        Ok(c)
    }

    /// `Ok` when the cursor is of `channel`'s `partition`; otherwise a 400 naming `field`.
    pub fn check(self, field: &str, channel: i64, partition: u64, name: &str) -> Result<(), Error> {
        if self.channel == channel && self.partition == partition {
            Ok(())
        } else {
            Err(bad(
                field,
                format!(
                    "`{field}` belongs to another channel or stream, not to `{name}` here; use a cursor returned by a read of this channel"
                ),
            ))
        }
    }
}

/// How many of an `await`'s channels must be ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AwaitMode {
    Any,
    All,
    AtLeast(usize),
}

impl AwaitMode {
    /// Parses `mode` and `n` for `count` channels.
    pub fn parse(mode: &str, n: Option<u32>, count: usize) -> Result<Self, Error> {
        let mode = match mode {
            "any" => Self::Any,
            "all" => Self::All,
            "at_least" => {
                let n = n.ok_or_else(|| {
                    bad(
                        "n",
                        "mode `at_least` needs `n`, how many channels must have messages".into(),
                    )
                })?;
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                if n == 0 || n > count {
                    return Err(bad(
                        "n",
                        format!("`n` must be between 1 and the number of channels ({count})"),
                    ));
                }
                return Ok(Self::AtLeast(n));
            }
            other => {
                return Err(bad(
                    "mode",
                    format!(
                        "`mode` must be `any`, `all` or `at_least`, got `{}`",
                        other.chars().take(32).collect::<String>().escape_default()
                    ),
                ));
            }
        };
        if n.is_some() {
            return Err(bad(
                "n",
                "`n` applies to mode `at_least` only; leave it out or use `at_least`".into(),
            ));
        }
        Ok(mode)
    }

    /// How many ready channels satisfy the mode, of `count`.
    pub fn needed(self, count: usize) -> usize {
        match self {
            Self::Any => 1,
            Self::All => count,
            Self::AtLeast(n) => n,
        }
    }
}

/// Checks an `await`'s channel list: 1-64 distinct valid names.
pub fn await_channels(channels: &[String]) -> Result<(), Error> {
    if channels.is_empty() || channels.len() > MAX_AWAIT_CHANNELS {
        return Err(bad(
            "channels",
            format!(
                "`channels` must list 1-{MAX_AWAIT_CHANNELS} channels, got {}",
                channels.len()
            ),
        ));
    }
    for (i, c) in channels.iter().enumerate() {
        let field = format!("channels[{i}]");
        validate_name(&field, c)?;
        if channels[..i].contains(c) {
            return Err(bad(
                &field,
                format!("`channels` lists `{c}` twice; list each channel once"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "unit tests")]
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "jobs.eu", "A-b_c.9", &"x".repeat(128)] {
            validate_name("name", ok).unwrap();
        }
        for bad in [
            "",
            ".a",
            "a.",
            "a..b",
            "a b",
            "a*",
            "a\0",
            &"x".repeat(129),
            "é",
        ] {
            let e = validate_name("name", bad).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("name"), "{bad}");
        }
    }

    #[test]
    fn cursors_round_trip_and_refuse_forgeries() {
        let c = Cursor {
            channel: 7,
            partition: u64::MAX,
            seq: 42,
        };
        let s = c.encode();
        assert_eq!(Cursor::decode("cursor", &s).unwrap(), c);
        c.check("cursor", 7, u64::MAX, "x").unwrap();
        assert!(c.check("cursor", 8, u64::MAX, "x").is_err());
        assert!(c.check("cursor", 7, 1, "x").is_err());
        for forged in ["", "abc", "!!!!", &"A".repeat(34), &"A".repeat(100)] {
            let e = Cursor::decode("cursor", forged).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("cursor"));
        }
        let neg = Cursor {
            channel: 7,
            partition: 1,
            seq: -1,
        }
        .encode();
        assert!(Cursor::decode("cursor", &neg).is_err());
    }

    #[test]
    fn await_modes() {
        assert_eq!(AwaitMode::parse("any", None, 3).unwrap().needed(3), 1);
        assert_eq!(AwaitMode::parse("all", None, 3).unwrap().needed(3), 3);
        assert_eq!(
            AwaitMode::parse("at_least", Some(2), 3).unwrap().needed(3),
            2
        );
        for (mode, n, field) in [
            ("at_least", None, "n"),
            ("at_least", Some(0), "n"),
            ("at_least", Some(4), "n"),
            ("any", Some(1), "n"),
            ("some", None, "mode"),
        ] {
            let e = AwaitMode::parse(mode, n, 3).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{mode} {n:?}");
        }
    }

    #[test]
    fn payloads_and_bounds() {
        assert_eq!(payload(r#"{ "a" : 1 }"#).unwrap(), r#"{"a":1}"#);
        assert_eq!(
            payload("nope").unwrap_err().param.as_deref(),
            Some("payload")
        );
        assert_eq!(
            payload(r#""\u0000""#).unwrap_err().param.as_deref(),
            Some("payload")
        );
        let big = format!("\"{}\"", "x".repeat(MAX_PAYLOAD_BYTES));
        assert_eq!(payload(&big).unwrap_err().param.as_deref(), Some("payload"));
        assert_eq!(
            bounds("", Some(0), None).unwrap_err().param.as_deref(),
            Some("ttl_seconds")
        );
        assert_eq!(
            bounds("", None, Some(0)).unwrap_err().param.as_deref(),
            Some("max_messages")
        );
        assert_eq!(
            wait_ms(Some(30_001)).unwrap_err().param.as_deref(),
            Some("wait_ms")
        );
        assert_eq!(
            max_count(Some(0), 1).unwrap_err().param.as_deref(),
            Some("max")
        );
    }
}
