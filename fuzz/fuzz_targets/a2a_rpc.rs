#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_fuzz_targets::targets::a2a_rpc::run(data));
