//! Typed identifiers. UUID-backed ids are UUIDv7 (time-ordered) and made by the domain layer;
//! tenant ids are operator-chosen slugs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::Error;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A new time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                Uuid::parse_str(s).map(Self).map_err(|_| {
                    Error::invalid(format!(
                        "`{s}` is not a valid {} (expected a UUID)",
                        stringify!($name)
                    ))
                })
            }
        }
    };
}

uuid_id!(
    /// The id of an API token (not the secret).
    TokenId
);

uuid_id!(
    /// The id of an agent run.
    RunId
);

/// A tenant: a lowercase slug of 1–63 characters `[a-z0-9-]`, starting with a letter or digit.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct TenantId(String);

impl TenantId {
    /// Validates and wraps a tenant slug.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let ok = !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-');
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(Error::invalid(format!(
                "tenant `{s}` is not valid: use 1-63 characters of a-z, 0-9 and '-', not starting with '-'"
            ))
            .with_param("tenant"))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TenantId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Self::parse(s)
    }
}

impl<'de> Deserialize<'de> for TenantId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(|e| serde::de::Error::custom(e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_slugs_are_validated() {
        assert!(TenantId::parse("acme-1").is_ok());
        for bad in ["", "-x", "Acme", "a b", &"x".repeat(64)] {
            assert!(TenantId::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn token_ids_are_time_ordered_and_round_trip() {
        let a = TokenId::new();
        let b = TokenId::new();
        assert!(a < b);
        assert_eq!(a.to_string().parse::<TokenId>().unwrap(), a);
        assert!("nope".parse::<TokenId>().is_err());
    }
}
