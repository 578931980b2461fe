//! The error answer a provider sends with a non-2xx status, as the router reads it for the
//! message it may quote and the delay it may honour: `{"error": {"message": …}}` (OpenAI,
//! Anthropic, DeepSeek), Gemini's `{"error": {"message", "status", "details": [{"@type":
//! "…RetryInfo", "retryDelay": "7s"}]}}` (sometimes inside an array), or Ollama's
//! `{"error": "…"}`.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::lenient::{self, Obj};

/// An error answer; [`ErrorAnswer::Other`] for any JSON that is neither shape.
#[derive(Clone, Debug, Default)]
pub enum ErrorAnswer<'a> {
    /// `{"error": …}`.
    Object(Envelope<'a>),
    /// `[{"error": …}, …]`: the first element, when it is an object.
    Array(Option<Envelope<'a>>),
    #[default]
    Other,
}

/// `{"error": …}`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Envelope<'a> {
    #[serde(default, borrow)]
    pub error: Option<ErrorField<'a>>,
}

/// The `error` field: an object, or (Ollama) the message itself; anything else reads as nothing.
#[derive(Clone, Debug)]
pub enum ErrorField<'a> {
    Object(ErrorObject<'a>),
    Text(Cow<'a, str>),
    Other,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ErrorObject<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::string")]
    pub message: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::array")]
    pub details: Option<Vec<Obj<Detail<'a>>>>,
}

/// One of Google's error details; only `RetryInfo` has a `retryDelay`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Detail<'a> {
    #[serde(
        default,
        borrow,
        rename = "retryDelay",
        deserialize_with = "lenient::string"
    )]
    pub retry_delay: Option<Cow<'a, str>>,
}

impl ErrorAnswer<'_> {
    fn object(&self) -> Option<&ErrorObject<'_>> {
        let envelope = match self {
            Self::Object(e) | Self::Array(Some(e)) => e,
            Self::Array(None) | Self::Other => return None,
        };
        match &envelope.error {
            Some(ErrorField::Object(o)) => Some(o),
            _ => None,
        }
    }

    /// The human-readable message: `error.message`, a bare `error` string, or the first array
    /// element's `error.message`.
    pub fn message(&self) -> Option<&str> {
        if let Self::Object(Envelope {
            error: Some(ErrorField::Text(t)),
        }) = self
        {
            return Some(t);
        }
        self.object()?.message.as_deref()
    }

    /// Google's error details (`error.details`), when there are any.
    pub fn details(&self) -> Option<&[Obj<Detail<'_>>]> {
        self.object()?.details.as_deref()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ErrorField<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = ErrorField<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                ErrorObject::deserialize(MapAccessDeserializer::new(map)).map(ErrorField::Object)
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(ErrorField::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ErrorField::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ErrorField::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(ErrorField::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(ErrorField::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(ErrorField::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(ErrorField::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(ErrorField::Other)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ErrorAnswer<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = ErrorAnswer<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                Envelope::deserialize(MapAccessDeserializer::new(map)).map(ErrorAnswer::Object)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<Obj<Envelope<'a>>>()?.and_then(|o| o.0);
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ErrorAnswer::Array(first))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(ErrorAnswer::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(ErrorAnswer::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(ErrorAnswer::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(ErrorAnswer::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(ErrorAnswer::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(ErrorAnswer::Other)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> ErrorAnswer<'_> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn every_shape_gives_its_message() {
        assert_eq!(read(r#"{"error": {"message": "a"}}"#).message(), Some("a"));
        assert_eq!(read(r#"{"error": "b"}"#).message(), Some("b"));
        assert_eq!(
            read(r#"[{"error": {"message": "c"}}]"#).message(),
            Some("c")
        );
        assert_eq!(read(r#"[{"error": "d"}]"#).message(), None);
        assert_eq!(read(r#"{"error": 1}"#).message(), None);
        assert_eq!(read("3").message(), None);
    }

    #[test]
    fn details_come_from_the_object_or_the_first_element() {
        let a = read(r#"[{"error": {"details": [{"retryDelay": "7s"}, 1]}}, 2]"#);
        let d = a.details().unwrap();
        assert_eq!(d[0].0.as_ref().unwrap().retry_delay.as_deref(), Some("7s"));
        assert!(d[1].0.is_none());
        assert!(read(r#"{"error": {"details": {}}}"#).details().is_none());
    }
}
