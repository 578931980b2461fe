//! MCP server definitions: a `PUT /v1/mcp-servers/{name}` body (first byte even), or text for
//! the credential-reference and glob helpers (odd). Beyond "no panic" ([`crate::defs`]):
//! refusals are 4xx naming the field, the gateway hop changes nothing, accepted content is
//! storable and has a stable content address; only `stdio` is operator-only; every header of an
//! accepted `http` server, with its credentials substituted, is a header the bridge can send;
//! `credential_refs` and `substitute_credentials` agree; `glob_matches` agrees with the textbook
//! dynamic programme.
#![expect(
    clippy::panic,
    reason = "fuzz targets are test code: a panic is how they report a broken property"
)]

use std::collections::BTreeMap;

use crate::defs;
use weft_core::def::DefContent as _;
use weft_core::mcp::{
    McpServerContent, McpTransport, credential_refs, glob_matches, is_credential_name,
    substitute_credentials,
};

/// `*` matches any run of bytes: the textbook dynamic programme over (pattern, tool) prefixes.
fn glob_reference(p: &[u8], t: &[u8]) -> bool {
    // row[j]: the pattern so far matches t[..j].
    let mut row = vec![false; t.len() + 1];
    row[0] = true;
    for &c in p {
        let mut next = vec![false; t.len() + 1];
        if c == b'*' {
            let mut any = false;
            for (j, cell) in next.iter_mut().enumerate() {
                any |= row[j];
                *cell = any;
            }
        } else {
            for j in 1..=t.len() {
                next[j] = row[j - 1] && t[j - 1] == c;
            }
        }
        row = next;
    }
    row[t.len()]
}

fn check_glob(pattern: &str, tool: &str) {
    if pattern.len() <= 256 && tool.len() <= 256 {
        assert_eq!(
            glob_matches(pattern, tool),
            glob_reference(pattern.as_bytes(), tool.as_bytes()),
            "glob {pattern:?} on {tool:?}"
        );
    }
}

/// Every reference resolves when its credentials are given, and the value then holds none.
fn check_refs(value: &str) {
    let Ok(names) = credential_refs(value) else {
        return;
    };
    assert!(names.iter().all(|n| is_credential_name(n)));
    let creds: BTreeMap<String, String> = names
        .iter()
        .map(|n| ((*n).to_owned(), "s3cret".to_owned()))
        .collect();
    match substitute_credentials(value, &creds) {
        Ok(out) => {
            assert!(
                !out.contains("${run.credentials."),
                "a reference survived: {out:?}"
            );
            if let Some(first) = names.first() {
                let mut fewer = creds.clone();
                fewer.remove(*first);
                assert!(
                    substitute_credentials(value, &fewer).is_err(),
                    "a missing credential was not noticed"
                );
            }
        }
        Err(e) => panic!("references {names:?} were accepted but do not substitute: {e}"),
    }
}

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(data: &[u8]) {
    let [selector, rest @ ..] = data else {
        return;
    };
    if selector & 1 == 1 {
        let Ok(text) = std::str::from_utf8(rest) else {
            return;
        };
        check_refs(text);
        let (pattern, tool) = text.split_once('\n').unwrap_or((text, "get_issue"));
        check_glob(pattern, tool);
        return;
    }
    let Some(c) = defs::check_body::<McpServerContent>(rest) else {
        return;
    };
    assert_eq!(
        c.operator_only().is_some(),
        c.transport == McpTransport::Stdio,
        "only a stdio server is operator-only"
    );
    if c.transport == McpTransport::Http {
        assert!(c.url.is_some() && c.command.is_none() && c.args.is_empty() && c.env.is_empty());
        for (name, value) in &c.headers {
            let names = match credential_refs(value) {
                Ok(n) => n,
                Err(e) => panic!("an accepted header holds a bad reference: {e}"),
            };
            let creds: BTreeMap<String, String> = names
                .iter()
                .map(|n| ((*n).to_owned(), "tok-123".to_owned()))
                .collect();
            let sent = match substitute_credentials(value, &creds) {
                Ok(s) => s,
                Err(e) => panic!("an accepted header does not substitute: {e}"),
            };
            assert!(
                http::HeaderName::from_bytes(name.as_bytes()).is_ok()
                    && http::HeaderValue::from_str(&sent).is_ok(),
                "accepted header {name:?}: {sent:?} cannot be sent"
            );
        }
    } else {
        assert!(c.command.as_deref().is_some_and(|s| !s.trim().is_empty()));
        assert!(c.url.is_none() && c.headers.is_empty());
    }
    for pattern in &c.tools {
        check_glob(pattern, &c.description);
        check_glob(pattern, &pattern.replace('*', ""));
        assert!(c.offers(&pattern.replace('*', "x")));
    }
}
