//! A provider's streamed answer (SSE, or NDJSON for Ollama) framed and folded into events by the
//! driver's own loop. Input: one byte picking the provider, one byte giving the size of the
//! body's chunks (0: the whole body at once), then the body. Besides the shape of the events,
//! the result must not depend on the chunking.

use weft_router::fuzzing::fold_stream;

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(data: &[u8]) {
    let [kind, chunk, body @ ..] = data else {
        return;
    };
    let provider = crate::provider(*kind);
    let items = fold_stream(provider, body, usize::from(*chunk));
    crate::check_turn(&items);
    if *chunk != 0 {
        crate::check_chunking(&items, &fold_stream(provider, body, 0));
    }
}
