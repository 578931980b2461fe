//! Reading a provider's answer leniently: a field of an unexpected JSON type reads as absent
//! instead of failing the whole body, exactly as reading it through `serde_json::Value` (`v["k"]
//! .as_str()`, `.as_u64()`, …) would. Drivers decide what is required; these helpers only make
//! the typed structs see what a `Value` would show them, without building one.
//!
//! Use with `#[serde(default, deserialize_with = "…")]`; strings borrow from the input where
//! they have no escapes. Every helper skips what it does not take without allocating
//! ([`IgnoredAny`]).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Implements every `visit_*` a visitor does not take as "not this type": the value is skipped
/// and the visitor answers `$none`.
macro_rules! otherwise {
    ($none:expr; $($skip:ident),*) => {
        $(otherwise!(@one $skip, $none);)*
    };
    (@one bool, $none:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> { Ok($none) }
    };
    (@one i64, $none:expr) => {
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> { Ok($none) }
    };
    (@one u64, $none:expr) => {
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> { Ok($none) }
    };
    (@one f64, $none:expr) => {
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> { Ok($none) }
    };
    (@one str, $none:expr) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> { Ok($none) }
    };
    (@one unit, $none:expr) => {
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> { Ok($none) }
    };
    (@one seq, $none:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($none)
        }
    };
    (@one map, $none:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($none)
        }
    };
}

/// A string, else `None` (`Value::as_str`).
pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(v)))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_owned())))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v)))
        }
        otherwise!(None; bool, i64, u64, f64, unit, seq, map);
    }
    d.deserialize_any(V)
}

/// A non-negative integer that fits in a `u64`, else `None` (`Value::as_u64`).
pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(u64::try_from(v).ok())
        }
        otherwise!(None; bool, f64, str, unit, seq, map);
    }
    d.deserialize_any(V)
}

/// A boolean, else `None` (`Value::as_bool`).
pub fn bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<bool>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        otherwise!(None; i64, u64, f64, str, unit, seq, map);
    }
    d.deserialize_any(V)
}

/// An array of numbers as `f32`s (embeddings are `f32` by design), else `None`: also when any
/// element is not a number.
pub fn f32s<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<f32>>, D::Error> {
    /// One element: a number, else `None`.
    struct Num(Option<f64>);
    impl<'de> Deserialize<'de> for Num {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Num;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("any JSON value")
                }
                #[expect(
                    clippy::cast_precision_loss,
                    reason = "as `Value::as_f64` reads an integer"
                )]
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
                    Ok(Num(Some(v as f64)))
                }
                #[expect(
                    clippy::cast_precision_loss,
                    reason = "as `Value::as_f64` reads an integer"
                )]
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
                    Ok(Num(Some(v as f64)))
                }
                fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
                    Ok(Num(Some(v)))
                }
                otherwise!(Num(None); bool, str, unit, seq, map);
            }
            d.deserialize_any(V)
        }
    }
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Vec<f32>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Some(Vec::with_capacity(seq.size_hint().unwrap_or(0)));
            while let Some(Num(n)) = seq.next_element::<Num>()? {
                match (n, out.as_mut()) {
                    #[expect(
                        clippy::cast_possible_truncation,
                        reason = "embeddings are f32 by design"
                    )]
                    (Some(n), Some(v)) => v.push(n as f32),
                    _ => out = None,
                }
            }
            Ok(out)
        }
        otherwise!(None; bool, i64, u64, f64, str, unit, map);
    }
    d.deserialize_any(V)
}

/// `T` read from a JSON object, else `None` (what indexing a non-object shows: nothing).
pub fn object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    d.deserialize_any(ObjectVisitor(PhantomData))
}

/// An array of `T`, else `None` (`Value::as_array`). Elements are read as `T`: make `T` an
/// [`Obj`] to read non-object elements as nothing.
pub fn array<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Vec<T>>, D::Error> {
    struct V<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = Option<Vec<T>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(t) = seq.next_element()? {
                out.push(t);
            }
            Ok(Some(out))
        }
        otherwise!(None; bool, i64, u64, f64, str, unit, map);
    }
    d.deserialize_any(V(PhantomData))
}

/// `T` read from the first element of an array (an [`Obj`] of it), the rest skipped; `None`
/// when the value is not an array or the array is empty (`v[0]`).
pub fn first<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    struct V<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let first = seq.next_element::<Obj<T>>()?.and_then(|o| o.0);
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(first)
        }
        otherwise!(None; bool, i64, u64, f64, str, unit, map);
    }
    d.deserialize_any(V(PhantomData))
}

/// `Some(T)` whenever the field is there, whatever its value, `null` included
/// (`Value::get(k).is_some()`): for fields whose presence alone means something. `T` is most
/// often an [`Obj`] or a `Value`.
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// The first element of an array as [`first`] reads it, for a field read with [`present`].
#[derive(Clone, Debug, PartialEq)]
pub struct First<T>(pub Option<T>);

impl<T> Default for First<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for First<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        first(d).map(First)
    }
}

/// An array of numbers as [`f32s`] reads it, for an array element.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct F32s(pub Option<Vec<f32>>);

impl<'de> Deserialize<'de> for F32s {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        f32s(d).map(F32s)
    }
}

/// `T` when the value is a JSON object, `None` for any other value: an array element, or a field
/// read with [`present`].
#[derive(Clone, Debug, PartialEq)]
pub struct Obj<T>(pub Option<T>);

impl<T> Default for Obj<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ObjectVisitor(PhantomData)).map(Obj)
    }
}

struct ObjectVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = Option<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(Some)
    }
    otherwise!(None; bool, i64, u64, f64, str, unit, seq);
}

/// A whole answer that must be a JSON object: `Ok(None)` when it is valid JSON of another type,
/// `Err` when it is not JSON.
pub fn from_str<'a, T: Deserialize<'a>>(text: &'a str) -> serde_json::Result<Option<T>> {
    serde_json::from_str::<Obj<T>>(text).map(|o| o.0)
}

/// [`from_str`] on bytes.
pub fn from_slice<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> serde_json::Result<Option<T>> {
    serde_json::from_slice::<Obj<T>>(bytes).map(|o| o.0)
}

/// [`from_str`] on a parsed `Value` (borrowing its strings).
pub fn from_value<'a, T: Deserialize<'a>>(v: &'a serde_json::Value) -> Option<T> {
    Obj::<T>::deserialize(v).ok().and_then(|o| o.0)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Default, Deserialize)]
    struct Doc<'a> {
        #[serde(default, borrow, deserialize_with = "string")]
        s: Option<Cow<'a, str>>,
        #[serde(default, deserialize_with = "u64")]
        n: Option<u64>,
        #[serde(default, deserialize_with = "bool")]
        b: Option<bool>,
        #[serde(default, borrow, deserialize_with = "object")]
        o: Option<Box<Doc<'a>>>,
        #[serde(default, borrow, deserialize_with = "array")]
        a: Option<Vec<Obj<Doc<'a>>>>,
        #[serde(default, borrow, deserialize_with = "first")]
        f: Option<Box<Doc<'a>>>,
        #[serde(default, deserialize_with = "present")]
        p: Option<serde_json::Value>,
        #[serde(default, deserialize_with = "f32s")]
        v: Option<Vec<f32>>,
    }

    #[test]
    fn fields_of_the_wrong_type_read_as_absent() {
        let d: Doc<'_> = from_str(
            r#"{"s": 1, "n": -1, "b": "x", "o": [1], "a": {"k": 1}, "f": {}, "v": [1, "x"],
                "extra": {"deep": [1, 2, {"x": null}]}}"#,
        )
        .unwrap()
        .unwrap();
        assert!(d.s.is_none() && d.n.is_none() && d.b.is_none() && d.o.is_none());
        assert!(d.a.is_none() && d.f.is_none() && d.p.is_none() && d.v.is_none());
    }

    #[test]
    fn fields_of_the_right_type_are_read_borrowing_strings() {
        let text = r#"{"s": "plain", "n": 7, "b": true, "o": {"s": "in\"ner"},
            "a": [{"n": 1}, 2, null], "f": [{"n": 3}, 4], "p": null, "v": [1, 2.5, -3]}"#;
        let d: Doc<'_> = from_str(text).unwrap().unwrap();
        assert!(matches!(d.s, Some(Cow::Borrowed("plain"))));
        assert_eq!((d.n, d.b), (Some(7), Some(true)));
        assert!(matches!(d.o.unwrap().s, Some(Cow::Owned(ref s)) if s == "in\"ner"));
        let a = d.a.unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a[0].0.as_ref().unwrap().n, Some(1));
        assert!(a[1].0.is_none() && a[2].0.is_none());
        assert_eq!(d.f.unwrap().n, Some(3));
        assert_eq!(d.p, Some(serde_json::Value::Null));
        assert_eq!(d.v, Some(vec![1.0, 2.5, -3.0]));
    }

    #[test]
    fn answers_that_are_not_objects_read_as_none_and_non_json_fails() {
        assert!(from_str::<Doc<'_>>("[1, 2]").unwrap().is_none());
        assert!(from_str::<Doc<'_>>("null").unwrap().is_none());
        assert!(from_str::<Doc<'_>>("{").is_err());
        let v = serde_json::json!({"s": "x"});
        assert_eq!(from_value::<Doc<'_>>(&v).unwrap().s.as_deref(), Some("x"));
    }
}
