//! A provider's non-streamed answer parsed into events as the driver does, and the same bytes read
//! as an error answer (the body, and as a `Retry-After` value). Input: one byte picking the
//! provider, then the body.

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(data: &[u8]) {
    let [kind, body @ ..] = data else {
        return;
    };
    let provider = crate::provider(*kind);
    if let Some(events) = weft_router::fuzzing::parse_body(provider, body) {
        let items: Vec<_> = events.into_iter().map(Ok).collect();
        crate::check_turn(&items);
    }
    let header = std::str::from_utf8(body).unwrap_or_default();
    let _ = weft_router::fuzzing::error_answer(body, header);
}
