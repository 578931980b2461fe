//! Authentication for weft.
//!
//! - API tokens (`wft_…`): minted from 32 random bytes, stored as SHA-256 hashes, resolved to a
//!   [`Principal`] through a short-lived cache so revocation takes effect within the cache TTL.
//! - OIDC JWTs ([`OidcVerifier`]): tokens a tenant's identity provider signs, accepted beside
//!   weft tokens when an operator trusts the issuer (`[auth.oidc]`).
//! - Internal JWTs: the gateway signs the principal into a short-lived HS256 token; every
//!   internal service verifies it before doing anything.
//! - Layers: an axum middleware that resolves bearer tokens, and a tonic interceptor that
//!   verifies internal JWTs.
//! - [`rpc`]: a request carrying its caller, the caller of a request, a failed call named after
//!   the service that failed.

mod jwt;
mod layers;
mod oidc;
mod resolver;
pub mod rpc;
pub mod session;
mod token;

pub use jwt::{INTERNAL_JWT_TTL, InternalJwt, JWT_AUDIENCE};
pub use layers::{BearerAuth, JwtInterceptor, bearer_token};
pub use oidc::OidcVerifier;
pub use resolver::TokenResolver;
pub use token::{MintedToken, TOKEN_PREFIX, hash_token, mint_token};

pub use weft_core::Principal;
