//! Checks several sections share, and the shape of a validation failure.

use crate::ConfigError;

/// What a section's `validate` returns: the first thing wrong, as [`ConfigError::Invalid`].
pub type Checked = Result<(), ConfigError>;

/// A validation failure with message `m`.
pub(crate) fn invalid(m: impl Into<String>) -> Checked {
    Err(ConfigError::Invalid(m.into()))
}

/// Refuses the first of `fields` (of `section`) that is 0.
pub(crate) fn at_least_one<const N: usize>(section: &str, fields: [(&str, u64); N]) -> Checked {
    match fields.iter().find(|(_, v)| *v == 0) {
        Some((field, _)) => invalid(format!("{section}.{field} must be at least 1, got 0")),
        None => Ok(()),
    }
}

/// Refuses the first entry of `section.field` that is not a CIDR.
pub(crate) fn cidrs(section: &str, field: &str, entries: &[String]) -> Checked {
    match entries.iter().find(|c| !is_cidr(c)) {
        Some(cidr) => invalid(format!(
            "{section}.{field}: {cidr:?} is not a CIDR; write an address and a prefix length, like \"10.20.0.0/16\" or \"127.0.0.1/32\""
        )),
        None => Ok(()),
    }
}

/// Refuses a NATS or Redis prefix that is empty or holds more than letters, digits, '-' and '_'.
pub(crate) fn name_prefix(section: &str, prefix: &str) -> Checked {
    if prefix.is_empty()
        || !prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return invalid(format!(
            "{section}.prefix must be non-empty letters, digits, '-' or '_', got {prefix:?}"
        ));
    }
    Ok(())
}

/// Whether `s` is an IP address with a prefix length in range, as `ipnet` accepts.
fn is_cidr(s: &str) -> bool {
    let Some((addr, len)) = s.split_once('/') else {
        return false;
    };
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let Ok(len) = len.parse::<u8>() else {
        return false;
    };
    match addr.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => len <= 32,
        Ok(std::net::IpAddr::V6(_)) => len <= 128,
        Err(_) => false,
    }
}
