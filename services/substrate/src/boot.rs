//! Boot loading: the agent definitions an operator ships with a deployment, from a folder of
//! `<name>.md` files (`substrate.agents_dir`) and from the config file (`substrate.agents`),
//! stored in `substrate.boot_tenant` through the same put path as the API. Loading is
//! idempotent: unchanged definitions create no versions on restart. Everything is parsed and
//! validated before anything is written, so one bad file stops start-up without half a load.

use std::path::{Path, PathBuf};

use serde_json::Value;
use weft_config::SubstrateConfig;
use weft_core::TenantId;
use weft_core::agent::{AgentContent, parse_agent_markdown, validate_agent_name};

use crate::SubstrateError;
use crate::agents;
use crate::store::DefStore;

/// One definition found at boot.
#[derive(Clone, Debug, PartialEq)]
pub struct BootDefinition {
    pub name: String,
    pub content: AgentContent,
    /// Where it came from: a file path or `substrate.agents.<name>`.
    pub source: String,
}

/// What loading did with one definition.
#[derive(Clone, Debug, PartialEq)]
pub struct BootLoaded {
    pub name: String,
    pub version: String,
    pub number: u32,
    /// Whether this start wrote a new version.
    pub created: bool,
    pub source: String,
}

fn boot_err(source: &str, e: &weft_core::Error) -> SubstrateError {
    SubstrateError::Boot(format!("{source}: {}", e.message))
}

/// Reads every `*.md` in `dir` (sorted by file name; other files are ignored).
pub fn read_agents_dir(dir: &Path) -> Result<Vec<BootDefinition>, SubstrateError> {
    let unreadable = |e: std::io::Error| {
        SubstrateError::Boot(format!(
            "substrate.agents_dir {} cannot be read: {e}",
            dir.display()
        ))
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(unreadable)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(unreadable)?;
    paths.retain(|p| p.is_file() && p.extension().is_some_and(|e| e == "md"));
    paths.sort();
    paths.iter().map(|p| read_agent_file(p)).collect()
}

/// Reads one `<name>.md` definition; errors name the file and the field.
pub fn read_agent_file(path: &Path) -> Result<BootDefinition, SubstrateError> {
    let source = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| SubstrateError::Boot(format!("{source}: cannot be read: {e}")))?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let (name, content) = parse_agent_markdown(stem, &text).map_err(|e| boot_err(&source, &e))?;
    Ok(BootDefinition {
        name,
        content,
        source,
    })
}

/// Reads the inline definitions of `substrate.agents`.
pub fn read_inline(cfg: &SubstrateConfig) -> Result<Vec<BootDefinition>, SubstrateError> {
    cfg.agents
        .iter()
        .map(|(name, value)| {
            let source = format!("substrate.agents.{name}");
            validate_agent_name(name).map_err(|e| boot_err(&source, &e))?;
            let mut value = value.clone();
            if let Value::Object(m) = &mut value
                && let Some(n) = m.remove("name")
                && n.as_str() != Some(name.as_str())
            {
                return Err(SubstrateError::Boot(format!(
                    "{source}: `name` is {n}, but the entry is named `{name}`; drop `name` or make them equal"
                )));
            }
            let content = AgentContent::from_json(value).map_err(|e| boot_err(&source, &e))?;
            content.validate().map_err(|e| boot_err(&source, &e))?;
            Ok(BootDefinition {
                name: name.clone(),
                content,
                source,
            })
        })
        .collect()
}

/// Every boot definition of `cfg`, parsed and validated; a name defined twice is an error.
pub fn read_boot_definitions(cfg: &SubstrateConfig) -> Result<Vec<BootDefinition>, SubstrateError> {
    let mut defs = match &cfg.agents_dir {
        Some(dir) => read_agents_dir(dir)?,
        None => Vec::new(),
    };
    defs.extend(read_inline(cfg)?);
    for (i, d) in defs.iter().enumerate() {
        if let Some(first) = defs[..i].iter().find(|o| o.name == d.name) {
            return Err(SubstrateError::Boot(format!(
                "agent `{}` is defined twice: in {} and in {}; keep one",
                d.name, first.source, d.source
            )));
        }
    }
    Ok(defs)
}

/// Loads the boot definitions of `cfg` into `cfg.boot_tenant`. Unchanged definitions keep their
/// version; changed ones get a new version that becomes active.
pub async fn load_boot_definitions(
    store: &DefStore,
    cfg: &SubstrateConfig,
) -> Result<Vec<BootLoaded>, SubstrateError> {
    let tenant = TenantId::parse(&cfg.boot_tenant)
        .map_err(|e| SubstrateError::Boot(format!("substrate.boot_tenant: {}", e.message)))?;
    let defs = read_boot_definitions(cfg)?;
    let mut loaded = Vec::with_capacity(defs.len());
    for d in defs {
        let out = agents::put_agent(store, &tenant, &d.name, &d.content, Some("boot"))
            .await
            .map_err(|e| boot_err(&d.source, &e))?;
        loaded.push(BootLoaded {
            name: d.name,
            version: out.version.hash,
            number: out.version.number,
            created: out.created,
            source: d.source,
        });
    }
    if !loaded.is_empty() {
        tracing::info!(
            tenant = %tenant,
            definitions = loaded.len(),
            new_versions = loaded.iter().filter(|l| l.created).count(),
            "boot agent definitions loaded"
        );
    }
    Ok(loaded)
}
