//! Every fuzz target replayed on its committed seeds (hand-written inputs and every crash found so
//! far), the local corpus of past campaigns and the fixture seeds, in the ordinary test build: a
//! regression of a fixed crash fails here, without a cargo-fuzz build.
#![expect(clippy::panic, reason = "a test reports failure by panicking")]

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};

use weft_fuzz_targets::{seeds, targets};

fn replay(target: &str) {
    let Some((_, run)) = targets::ALL.iter().find(|(name, _)| *name == target) else {
        panic!("no target {target} in weft_fuzz_targets::targets::ALL");
    };
    let inputs = match seeds::all(&weft_fuzz_targets::repo_root(), target) {
        Ok(inputs) => inputs,
        Err(e) => panic!("reading the inputs of {target}: {e}"),
    };
    assert!(
        !inputs.is_empty(),
        "{target}: no seeds, corpus or fixture seeds to replay"
    );
    let mut failed = Vec::new();
    for (name, data) in &inputs {
        if catch_unwind(AssertUnwindSafe(|| run(data))).is_err() {
            failed.push(name.as_str());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} of {} inputs broke a property (the panic above says which):\n  {}\n\
         reproduce one with `fuzz/target/x86_64-unknown-linux-gnu/release/{target} <file>` after fuzz/run.sh builds it",
        failed.len(),
        inputs.len(),
        failed.join("\n  ")
    );
}

macro_rules! replay {
    ($($target:ident),* $(,)?) => {
        $(#[test]
        fn $target() {
            replay(stringify!($target));
        })*

        /// Every target has a replay test here, a cargo-fuzz binary and nothing else: a new target
        /// cannot be left out of CI.
        #[test]
        fn every_target_is_replayed() {
            let tested: BTreeSet<&str> = [$(stringify!($target)),*].into_iter().collect();
            let listed: BTreeSet<&str> = targets::ALL.iter().map(|(name, _)| *name).collect();
            assert_eq!(tested, listed, "replay tests and targets::ALL differ");
            let root = weft_fuzz_targets::repo_root();
            let names = |dir: &str| -> BTreeSet<String> {
                match std::fs::read_dir(root.join(dir)) {
                    Ok(entries) => entries
                        .filter_map(Result::ok)
                        .map(|e| e.file_name().to_string_lossy().trim_end_matches(".rs").to_owned())
                        .collect(),
                    Err(e) => panic!("{dir}: {e}"),
                }
            };
            let bins = names("fuzz/fuzz_targets");
            let listed: BTreeSet<String> = listed.iter().map(|n| (*n).to_owned()).collect();
            assert_eq!(bins, listed, "fuzz/fuzz_targets and targets::ALL differ");
            let seeded = names("fuzz/seeds");
            assert!(seeded.is_subset(&listed), "seeds for no target: {:?}", seeded.difference(&listed));
        }
    };
}

replay!(
    a2a_rpc,
    auth_jwt,
    auth_token,
    chat_anthropic,
    chat_llm,
    chat_openai,
    chat_responses,
    def_agent,
    def_mcp_server,
    def_schedule,
    def_skill,
    def_webhook,
    mcp_face,
    provider_body,
    provider_stream,
    webhook_mapping,
    webhook_signature,
);
