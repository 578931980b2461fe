//! POST /v1/llm/chat (native): a body decoded as the gateway's handler decodes it,
//! then checked by [`weft_fuzz::check_decoded`].
#![no_main]

libfuzzer_sys::fuzz_target!(|body: &[u8]| {
    weft_fuzz::check_decoded(weft_gateway::fuzzing::llm_chat(body));
});
