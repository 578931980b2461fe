//! The inputs every target starts from: the committed seeds (`fuzz/seeds/<target>`: hand-written
//! inputs and every crash found so far), the local corpus of past campaigns (`fuzz/corpus/<target>`,
//! not committed), and seeds made from the router's recorded fixtures. Plain `std`: fuzz/run.sh
//! compiles it alone, with rustc, into `examples/write_seeds.rs`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// One input: where it came from (a path, or `fixture:<name>`) and its bytes.
pub type Input = (String, Vec<u8>);

/// The targets [`from_fixtures`] makes seeds for.
pub const FIXTURE_TARGETS: [&str; 4] = [
    "chat_openai",
    "chat_anthropic",
    "provider_stream",
    "provider_body",
];

/// The five driver kinds in the order of `weft_router::fuzzing::Provider::ALL`: an input's
/// provider byte is its index here.
const PROVIDERS: [&str; 5] = ["openai", "anthropic", "gemini", "deepseek", "ollama"];

/// The files of `dir` in name order (none when it does not exist).
pub fn files_in(dir: &Path) -> io::Result<Vec<Input>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| Ok((p.display().to_string(), fs::read(&p)?)))
        .collect()
}

/// The files of `dir` whose names start with `prefix` and end with `suffix`.
fn matching(dir: &Path, prefix: &str, suffix: &str) -> io::Result<Vec<Input>> {
    Ok(files_in(dir)?
        .into_iter()
        .filter(|(path, _)| {
            Path::new(path)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix))
        })
        .collect())
}

/// Each input of `inputs` behind the bytes of `head`, named `fixture:<file>`.
fn prefixed(inputs: Vec<Input>, head: &[u8], tag: &str) -> Vec<Input> {
    inputs
        .into_iter()
        .map(|(path, body)| {
            let file = Path::new(&path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (format!("fixture:{tag}{file}"), [head, &body].concat())
        })
        .collect()
}

/// Seeds made from `services/router/tests/fixtures` for `target` (none for most targets):
/// recorded chat requests for the decoders; for `provider_stream` a provider byte, a chunk-size
/// byte (0: whole; 7: chunks that split lines and events) and a recorded stream; for
/// `provider_body` a provider byte and a recorded answer.
pub fn from_fixtures(root: &Path, target: &str) -> io::Result<Vec<Input>> {
    let fixtures = root.join("services/router/tests/fixtures");
    let real = fixtures.join("real-llm");
    let mut out = Vec::new();
    match target {
        "chat_openai" => out = prefixed(matching(&real, "openai-chat-", ".request.json")?, &[], ""),
        "chat_anthropic" => {
            out = prefixed(
                matching(&real, "anthropic-messages-", ".request.json")?,
                &[],
                "",
            );
        }
        "provider_stream" => {
            for (i, kind) in (0u8..).zip(PROVIDERS) {
                let streams = matching(&fixtures.join(kind), "", ".stream")?;
                out.extend(prefixed(
                    streams.clone(),
                    &[i, 0],
                    &format!("{kind}-whole-"),
                ));
                out.extend(prefixed(streams, &[i, 7], &format!("{kind}-chunked-")));
            }
            out.extend(prefixed(
                matching(&real, "openai-chat-", ".sse")?,
                &[0, 0],
                "real-",
            ));
            out.extend(prefixed(
                matching(&real, "anthropic-messages-", ".sse")?,
                &[1, 0],
                "real-",
            ));
        }
        "provider_body" => {
            for (i, kind) in (0u8..).zip(PROVIDERS) {
                let bodies: Vec<Input> = matching(&fixtures.join(kind), "", ".json")?
                    .into_iter()
                    .filter(|(p, _)| !p.ends_with("/manifest.json"))
                    .collect();
                out.extend(prefixed(bodies, &[i], &format!("{kind}-")));
            }
            let openai = matching(&real, "openai-chat-", ".response.json")?;
            out.extend(prefixed(openai, &[0], "real-"));
            let anthropic = matching(&real, "anthropic-messages-", ".response.json")?;
            out.extend(prefixed(anthropic, &[1], "real-"));
        }
        _ => {}
    }
    Ok(out)
}

/// Every input `target` is replayed on: committed seeds, the local corpus, the fixture seeds.
pub fn all(root: &Path, target: &str) -> io::Result<Vec<Input>> {
    let mut inputs = files_in(&root.join("fuzz/seeds").join(target))?;
    inputs.extend(files_in(&root.join("fuzz/corpus").join(target))?);
    inputs.extend(from_fixtures(root, target)?);
    Ok(inputs)
}
