//! Request structs that accept only a JSON object.
//!
//! serde's derived `Deserialize` for a struct (and for an internally tagged enum) also accepts a
//! sequence of the fields in declaration order; every request body and nested object of the public
//! API refuses that. [`objects_only!`](crate::objects_only) wires a struct derived with
//! `#[serde(remote = "Self")]` to [`object_only`].

use std::marker::PhantomData;

use serde::Deserializer;
use serde::de::{MapAccess, Visitor};

/// A struct whose fields are read from a map by serde's derive, to be wrapped by [`object_only`].
/// [`objects_only!`](crate::objects_only) implements it (and `Serialize`/`Deserialize`) for a
/// struct derived with `#[serde(remote = "Self")]`.
pub trait FromFields<'de>: Sized {
    /// The derived deserialization (which would also accept a sequence).
    fn from_fields<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

/// Deserializes `T` from a JSON object only. serde's derived `Deserialize` for a struct (and for
/// an internally tagged enum) also accepts a sequence of the fields in declaration order, so
/// `"sampling": [null, null]` would pass for an object nobody wrote; requests refuse it with
/// "invalid type: sequence, expected a JSON object", at the field's path.
pub fn object_only<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromFields<'de>,
{
    struct ObjectVisitor<T>(PhantomData<T>);

    impl<'de, T: FromFields<'de>> Visitor<'de> for ObjectVisitor<T> {
        type Value = T;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::from_fields(serde::de::value::MapAccessDeserializer::new(map))
        }
    }

    d.deserialize_map(ObjectVisitor(PhantomData))
}

/// For each struct (or enum) given, derived with `#[serde(remote = "Self")]`: a `Deserialize`
/// that accepts only a JSON object ([`object_only`]) and a `Serialize` as derived. Without a
/// derived `Serialize`, write `objects_only!(deserialize: Type, …)`.
#[macro_export]
macro_rules! objects_only {
    (deserialize: $($t:ty),+ $(,)?) => {
        $(
            impl<'de> $crate::objects::FromFields<'de> for $t {
                fn from_fields<D: ::serde::Deserializer<'de>>(d: D) -> ::std::result::Result<Self, D::Error> {
                    // The inherent function `#[serde(remote = "Self")]` derives.
                    <$t>::deserialize(d)
                }
            }

            impl<'de> ::serde::Deserialize<'de> for $t {
                fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::std::result::Result<Self, D::Error> {
                    $crate::objects::object_only(d)
                }
            }
        )+
    };
    ($($t:ty),+ $(,)?) => {
        $crate::objects_only!(deserialize: $($t),+);
        $(
            impl ::serde::Serialize for $t {
                fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error> {
                    <$t>::serialize(self, s)
                }
            }
        )+
    };
}

/// A JSON object's fields, read through [`object_only`]: for a type that checks its fields
/// before serde's derive reads them (e.g. that an enum's tag is a string).
pub struct Fields(pub serde_json::Map<String, serde_json::Value>);

impl<'de> FromFields<'de> for Fields {
    fn from_fields<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <serde_json::Map<String, serde_json::Value> as serde::Deserialize>::deserialize(d)
            .map(Fields)
    }
}
