//! Who is calling: the principal a bearer token resolves to, and the scopes it holds.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Error, TenantId};

/// A permission. `admin` holds every scope in every tenant; `tenant:admin` every scope in its
/// own tenant. The type is the public contract's ([`weft_api::base::Scope`]), written once.
pub use weft_api::base::{Scope, UnknownScope};

impl From<UnknownScope> for Error {
    fn from(e: UnknownScope) -> Self {
        Error::invalid(e.to_string()).with_param("scopes")
    }
}

/// A sorted, de-duplicated set of scopes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "Vec<Scope>", into = "Vec<Scope>")]
pub struct Scopes(Vec<Scope>);

impl Scopes {
    pub fn new(scopes: impl IntoIterator<Item = Scope>) -> Self {
        let mut v: Vec<_> = scopes.into_iter().collect();
        v.sort();
        v.dedup();
        Self(v)
    }

    /// Parses a comma-separated list such as `llm:call,runs:create`.
    pub fn parse_list(s: &str) -> Result<Self, Error> {
        s.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<Scope>().map_err(Error::from))
            .collect::<Result<Vec<_>, _>>()
            .map(Self::new)
    }

    pub fn contains(&self, scope: Scope) -> bool {
        self.0.binary_search(&scope).is_ok()
    }

    pub fn iter(&self) -> impl Iterator<Item = Scope> + '_ {
        self.0.iter().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn to_strings(&self) -> Vec<String> {
        self.0.iter().map(|s| s.as_str().to_owned()).collect()
    }
}

impl From<Vec<Scope>> for Scopes {
    fn from(v: Vec<Scope>) -> Self {
        Self::new(v)
    }
}

impl From<Scopes> for Vec<Scope> {
    fn from(s: Scopes) -> Self {
        s.0
    }
}

impl fmt::Display for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_strings().join(","))
    }
}

/// The caller, as resolved from its bearer token. Never taken from a request body.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Principal {
    pub tenant: TenantId,
    pub subject: String,
    pub scopes: Scopes,
    /// The id of the token presented, when the caller came with one (per-token quotas and
    /// usage); `None` for work started by weft itself (runs carry their creator's tenant and
    /// subject).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    /// The agent a run acts as, set only by the executor on its run's calls (carried in the
    /// internal JWT, which only weft's services can sign); never from a token. What belongs to
    /// the agent (its channel consumer, its publish op keys) answers to this, not to a subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

impl Principal {
    /// Whether the principal is an operator admin (all tenants).
    pub fn is_admin(&self) -> bool {
        self.scopes.contains(Scope::Admin)
    }

    /// Whether the principal administers `tenant` (operator admins administer every tenant).
    pub fn administers(&self, tenant: &TenantId) -> bool {
        self.is_admin() || (self.scopes.contains(Scope::TenantAdmin) && &self.tenant == tenant)
    }

    /// Whether the principal holds `scope` in its own tenant; admins hold everything.
    pub fn has(&self, scope: Scope) -> bool {
        self.is_admin()
            || self.scopes.contains(scope)
            || (self.scopes.contains(Scope::TenantAdmin) && scope != Scope::Admin)
    }

    /// `Ok` when the principal holds `scope`, otherwise a 403 naming the missing scope.
    pub fn require(&self, scope: Scope) -> Result<(), Error> {
        if self.has(scope) {
            Ok(())
        } else {
            Err(Error::forbidden(format!(
                "this token lacks the `{scope}` scope; ask a tenant admin for a token that has it"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(tenant: &str, scopes: &str) -> Principal {
        Principal {
            tenant: TenantId::parse(tenant).unwrap(),
            subject: "s".into(),
            scopes: Scopes::parse_list(scopes).unwrap(),
            token_id: None,
            agent: None,
        }
    }

    #[test]
    fn scope_lists_parse_sort_and_dedupe() {
        let s = Scopes::parse_list("llm:call, runs:create,llm:call").unwrap();
        assert_eq!(s.to_string(), "runs:create,llm:call");
        assert!(Scopes::parse_list("llm:call,bogus").is_err());
    }

    #[test]
    fn admin_and_tenant_admin_imply_scopes() {
        assert!(p("a", "admin").has(Scope::LlmCall));
        assert!(p("a", "tenant:admin").has(Scope::LlmCall));
        assert!(!p("a", "tenant:admin").has(Scope::Admin));
        assert!(!p("a", "llm:call").has(Scope::RunsCreate));
        assert!(p("a", "llm:call").require(Scope::RunsCreate).is_err());
    }

    #[test]
    fn tenant_admins_administer_only_their_tenant() {
        let ta = p("a", "tenant:admin");
        assert!(ta.administers(&TenantId::parse("a").unwrap()));
        assert!(!ta.administers(&TenantId::parse("b").unwrap()));
        assert!(p("a", "admin").administers(&TenantId::parse("b").unwrap()));
    }
}
