//! `[auth]`: the key of internal JWTs, and the identity providers whose JWTs a tenant accepts.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use weft_api::base::Scope;

use crate::Secret;
use crate::check::{Checked, invalid};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// HMAC key of internal JWTs; required for separate processes, random under `weft up`.
    pub internal_jwt_secret: Option<Secret>,
    /// Trusted OIDC issuers by name: JWTs they sign are accepted as bearer tokens of one tenant.
    pub oidc: BTreeMap<String, OidcIssuerConfig>,
    /// Seconds a fetched JWKS is used before it is fetched again.
    pub oidc_jwks_ttl_secs: u64,
    /// Least seconds between two fetches of one JWKS when a token names a key it does not list
    /// (a rotation picked up at once, a flood of unknown `kid`s still one fetch per interval).
    pub oidc_jwks_min_refresh_secs: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            internal_jwt_secret: None,
            oidc: BTreeMap::new(),
            oidc_jwks_ttl_secs: 300,
            oidc_jwks_min_refresh_secs: 10,
        }
    }
}

/// One trusted issuer, `[auth.oidc.<name>]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcIssuerConfig {
    /// The tenant every principal of this issuer belongs to (checked when the gateway starts).
    pub tenant: String,
    /// The token's `iss`, compared exactly.
    pub issuer: String,
    /// The token's `aud` must hold one of these.
    pub audiences: Vec<String>,
    /// Where the signing keys are; unset: the `jwks_uri` of `<issuer>/.well-known/openid-configuration`.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// Signature algorithms accepted; asymmetric only.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// The claim that names the principal's subject.
    #[serde(default = "default_subject_claim")]
    pub subject_claim: String,
    /// Put before the subject claim's value; unset: `<name>:`, which keeps this issuer's
    /// subjects apart from weft tokens' and from other issuers'. `""` shares them (on purpose).
    #[serde(default)]
    pub subject_prefix: Option<String>,
    /// The claim holding scopes: a space-separated string or an array of strings.
    #[serde(default = "default_scopes_claim")]
    pub scopes_claim: String,
    /// Scopes every token of this issuer holds, whatever its claim says.
    #[serde(default)]
    pub scopes: Vec<Scope>,
    /// The most a token's scope claim can grant; names that are not weft scopes are ignored.
    #[serde(default = "default_max_scopes")]
    pub max_scopes: Vec<Scope>,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
}

/// The algorithms an issuer may be configured with: signatures checked with a public key.
pub const OIDC_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

fn default_algorithms() -> Vec<String> {
    vec!["RS256".into(), "ES256".into()]
}

fn default_subject_claim() -> String {
    "sub".into()
}

fn default_scopes_claim() -> String {
    "scope".into()
}

/// Every scope but the two admin ones.
fn default_max_scopes() -> Vec<Scope> {
    Scope::RUN.to_vec()
}

fn default_leeway() -> u64 {
    30
}

impl AuthConfig {
    pub(crate) fn validate(&self) -> Checked {
        if self.oidc_jwks_ttl_secs == 0 || self.oidc_jwks_min_refresh_secs == 0 {
            return invalid(
                "auth.oidc_jwks_ttl_secs and auth.oidc_jwks_min_refresh_secs must be at least 1",
            );
        }
        let mut pairs = BTreeMap::new();
        let mut prefixes = BTreeMap::new();
        for (name, i) in &self.oidc {
            i.validate(name)?;
            let prefix = i.effective_subject_prefix(name);
            if let Some(other) = prefixes.insert((i.tenant.as_str(), prefix.clone()), name) {
                return invalid(format!(
                    "auth.oidc.{name} and auth.oidc.{other} give tenant {:?} subjects with the same prefix {prefix:?}: one issuer's user could act as the other's; give each its own subject_prefix",
                    i.tenant
                ));
            }
            for aud in &i.audiences {
                if let Some(other) = pairs.insert((i.issuer.as_str(), aud.as_str()), name) {
                    return invalid(format!(
                        "auth.oidc.{name} and auth.oidc.{other} both accept issuer {:?} with audience {aud:?}: a token would name no single tenant; give each tenant its own audience",
                        i.issuer
                    ));
                }
            }
        }
        Ok(())
    }
}

impl OidcIssuerConfig {
    /// The prefix of this issuer's subjects, for entry `name`.
    pub fn effective_subject_prefix(&self, name: &str) -> String {
        self.subject_prefix
            .clone()
            .unwrap_or_else(|| format!("{name}:"))
    }

    /// Whether keys may be fetched from `url`: `https`, or `http` to a loopback host (a test or
    /// a provider on the same machine). Anything else could have its keys swapped on the way.
    pub fn is_secure_url(url: &str) -> bool {
        if url.starts_with("https://") {
            return true;
        }
        let Some(rest) = url.strip_prefix("http://") else {
            return false;
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if authority.contains('@') {
            return false;
        }
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => authority.split(':').next().unwrap_or(""),
        };
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    fn validate(&self, name: &str) -> Checked {
        let at = format!("auth.oidc.{name}");
        if self.issuer.is_empty() {
            return invalid(format!(
                "{at}.issuer is empty; set it to the `iss` the provider's tokens carry"
            ));
        }
        if self.audiences.is_empty() || self.audiences.iter().any(String::is_empty) {
            return invalid(format!(
                "{at}.audiences must list at least one non-empty audience (the `aud` tokens for weft carry)"
            ));
        }
        if let Some(u) = &self.jwks_url
            && !Self::is_secure_url(u)
        {
            return invalid(format!(
                "{at}.jwks_url {u:?} must be an https URL (plain http only to a loopback host): keys fetched in the clear could be swapped"
            ));
        }
        if self.jwks_url.is_none() && !Self::is_secure_url(&self.issuer) {
            return invalid(format!(
                "{at}: without jwks_url the keys are found through {:?}/.well-known/openid-configuration, which must be https (plain http only to a loopback host); set jwks_url or fix the issuer",
                self.issuer
            ));
        }
        if self.algorithms.is_empty() {
            return invalid(format!("{at}.algorithms is empty"));
        }
        if let Some(a) = self
            .algorithms
            .iter()
            .find(|a| !OIDC_ALGORITHMS.contains(&a.as_str()))
        {
            return invalid(format!(
                "{at}.algorithms: {a:?} is not accepted; use asymmetric ones only ({}): `none` and shared-secret HS* would let anyone holding the public key sign",
                OIDC_ALGORITHMS.join(", ")
            ));
        }
        if self.subject_claim.is_empty() || self.scopes_claim.is_empty() {
            return invalid(format!(
                "{at}.subject_claim and {at}.scopes_claim must name a claim"
            ));
        }
        if self
            .scopes
            .iter()
            .chain(&self.max_scopes)
            .any(|s| *s == Scope::Admin)
        {
            return invalid(format!(
                "{at}: \"admin\" cannot come from an identity provider; operator admins use weft tokens"
            ));
        }
        let distinct: BTreeSet<_> = self.audiences.iter().collect();
        if distinct.len() != self.audiences.len() {
            return invalid(format!("{at}.audiences lists an audience twice"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer(tenant: &str, iss: &str, aud: &str) -> OidcIssuerConfig {
        OidcIssuerConfig {
            tenant: tenant.into(),
            issuer: iss.into(),
            audiences: vec![aud.into()],
            jwks_url: None,
            algorithms: default_algorithms(),
            subject_claim: default_subject_claim(),
            subject_prefix: None,
            scopes_claim: default_scopes_claim(),
            scopes: vec![],
            max_scopes: default_max_scopes(),
            leeway_secs: 30,
        }
    }

    #[test]
    fn issuers_are_checked() {
        let mut c = AuthConfig::default();
        c.oidc
            .insert("a".into(), issuer("acme", "https://idp.example", "weft-a"));
        c.oidc
            .insert("b".into(), issuer("beta", "https://idp.example", "weft-b"));
        c.validate().unwrap();

        let mut dup = c.clone();
        dup.oidc.get_mut("b").unwrap().audiences = vec!["weft-a".into()];
        let e = dup.validate().unwrap_err().to_string();
        assert!(e.contains("no single tenant"), "{e}");

        for (field, bad) in [
            ("algorithms", "HS256"),
            ("algorithms", "none"),
            ("scopes", "admin"),
            ("max_scopes", "admin"),
        ] {
            let mut c = c.clone();
            let i = c.oidc.get_mut("a").unwrap();
            match field {
                "algorithms" => i.algorithms = vec![bad.into()],
                "scopes" => i.scopes = vec![Scope::Admin],
                _ => i.max_scopes = vec![Scope::Admin],
            }
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("auth.oidc.a") && e.contains(bad), "{e}");
        }

        let mut same = c.clone();
        same.oidc.get_mut("b").unwrap().tenant = "acme".into();
        same.validate().unwrap();
        for p in ["a", "b"] {
            same.oidc.get_mut(p).unwrap().subject_prefix = Some("sso:".into());
        }
        let e = same.validate().unwrap_err().to_string();
        assert!(e.contains("same prefix"), "{e}");

        for (url, ok) in [
            ("https://idp.example/jwks", true),
            ("http://127.0.0.1:8080/jwks", true),
            ("http://[::1]:8080/jwks", true),
            ("http://localhost/jwks", true),
            ("http://idp.example/jwks", false),
            ("http://127.0.0.1.evil.example/jwks", false),
            ("http://user@127.0.0.1/jwks", false),
            ("ftp://127.0.0.1/jwks", false),
        ] {
            assert_eq!(OidcIssuerConfig::is_secure_url(url), ok, "{url}");
        }
        let mut plain = c.clone();
        plain.oidc.get_mut("a").unwrap().jwks_url = Some("http://idp.example/jwks".into());
        assert!(plain.validate().unwrap_err().to_string().contains("https"));

        let mut c3 = c;
        c3.oidc.get_mut("a").unwrap().issuer = "urn:idp".into();
        assert!(
            c3.validate()
                .unwrap_err()
                .to_string()
                .contains("set jwks_url")
        );
    }
}
