//! POST /v1/responses (OpenAI's Responses API): a body decoded as the gateway's handler decodes
//! it, then checked by [`crate::check_decoded`].

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(body: &[u8]) {
    crate::check_decoded(weft_gateway::fuzzing::openai_responses(body));
}
