//! The wire formats weft speaks, as typed serde structs, one module per format.
//!
//! Each type is what the format's documentation and its official clients show, with the fields
//! weft reads or writes. Strings are `Cow<str>` (or `&str` where weft only ever writes borrowed
//! text): serialized from borrowed text without a copy, and deserialized borrowing from the input
//! where it has no escapes.
//!
//! Request types are what weft sends (`Serialize`). Answer types are what weft reads from a
//! provider (`Deserialize`): unknown fields are skipped, and they read through [`lenient`], so a
//! field of an unexpected type reads as absent and the driver decides what is required.

use serde::Serialize;
use serde_json::{Map, Value};

pub mod anthropic;
pub mod error;
pub mod gemini;
pub mod lenient;
pub mod ollama;
pub mod openai;
pub mod responses;

/// A caller's request fields that weft does not model, passed through into a provider's body
/// beside the fields weft writes (`#[serde(flatten)]`). Weft's own fields win: a passed-through
/// field of the same name is left out, so a body never repeats a key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Extra<'a>(pub Vec<(&'a str, &'a Value)>);

impl<'a> Extra<'a> {
    /// The fields of `map` that `owned` does not claim.
    pub fn except(map: &'a Map<String, Value>, owned: impl Fn(&str) -> bool) -> Self {
        Self(
            map.iter()
                .filter(|(k, _)| !owned(k))
                .map(|(k, v)| (k.as_str(), v))
                .collect(),
        )
    }
}

impl Serialize for Extra<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (*k, *v)))
    }
}

/// Skips a `false` flag (`#[serde(skip_serializing_if = "is_false")]`).
#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde passes a reference"
)]
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}
