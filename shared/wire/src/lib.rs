//! The wire formats weft speaks, as typed serde structs, one module per format.
//!
//! Each type is what the format's documentation and its official clients show, with the fields
//! weft reads or writes. Strings are `Cow<str>`: serialized from borrowed text without a copy, and
//! deserialized borrowing from the input where it has no escapes.

pub mod openai;
