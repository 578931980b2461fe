//! Boot loading: the definitions an operator ships with a deployment — agents from a folder of
//! `<name>.md` files (`substrate.agents_dir`) and from the config file (`substrate.agents`),
//! skills from a folder of `<name>/SKILL.md` folders (`substrate.skills_dir`, read by
//! [`crate::skills`]), MCP servers from the config file (`substrate.mcp_servers`) — stored in `substrate.boot_tenant` through the same put path as the API.
//! Loading is idempotent: unchanged definitions create no versions on restart. Everything is
//! parsed and validated before anything is written, so one bad file stops start-up without half
//! a load.

use std::path::{Path, PathBuf};

use serde_json::Value;
use weft_config::SubstrateConfig;
use weft_core::TenantId;
use weft_core::agent::{AgentContent, parse_agent_markdown, validate_agent_name};
use weft_core::def::{DefContent, DefKind, validate_def_name};
use weft_core::mcp::McpServerContent;
use weft_core::schedule::ScheduleContent;
use weft_core::webhook::WebhookContent;

use crate::SubstrateError;
use crate::skills::{SkillFolder, read_skills_dir};
use crate::store::DefStore;
use crate::{agents, defs};

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
    /// An agent or a skill.
    pub kind: DefKind,
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

/// Reads one definition file, validated: `<name>.md` (YAML front matter + system prompt body) or
/// `<name>.json` (an object of content fields, optionally with `name`). Errors name the file
/// and the field.
pub fn read_agent_file(path: &Path) -> Result<BootDefinition, SubstrateError> {
    let source = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| SubstrateError::Boot(format!("{source}: cannot be read: {e}")))?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let (name, content) = match path.extension().and_then(|e| e.to_str()) {
        Some("md") => parse_agent_markdown(stem, &text).map_err(|e| boot_err(&source, &e))?,
        Some("json") => {
            let value: Value = serde_json::from_str(&text)
                .map_err(|e| SubstrateError::Boot(format!("{source}: not valid JSON: {e}")))?;
            parse_named_json(stem, value).map_err(|e| boot_err(&source, &e))?
        }
        _ => {
            return Err(SubstrateError::Boot(format!(
                "{source}: an agent definition is a `.md` file (YAML front matter + prompt) or a `.json` object of content fields"
            )));
        }
    };
    Ok(BootDefinition {
        name,
        content,
        source,
    })
}

/// A JSON object of content fields that may also carry `name` (default: `name_hint`),
/// validated.
fn parse_named_json(
    name_hint: &str,
    mut value: Value,
) -> Result<(String, AgentContent), weft_core::Error> {
    let name = match &mut value {
        Value::Object(m) => match m.remove("name") {
            None => name_hint.to_owned(),
            Some(Value::String(s)) => s,
            Some(_) => {
                return Err(weft_core::Error::invalid("`name` must be a string").with_param("name"));
            }
        },
        _ => name_hint.to_owned(),
    };
    validate_agent_name(&name)?;
    let content = AgentContent::from_json(value)?;
    content.validate()?;
    Ok((name, content))
}

/// Reads the inline definitions of `substrate.agents`.
pub fn read_inline(cfg: &SubstrateConfig) -> Result<Vec<BootDefinition>, SubstrateError> {
    cfg.agents
        .iter()
        .map(|(name, value)| {
            let source = format!("substrate.agents.{name}");
            let (found, content) =
                parse_named_json(name, value.clone()).map_err(|e| boot_err(&source, &e))?;
            if &found != name {
                return Err(SubstrateError::Boot(format!(
                    "{source}: `name` is `{found}`, but the entry is named `{name}`; drop `name` or make them equal"
                )));
            }
            Ok(BootDefinition {
                name: found,
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

/// The skills of `cfg.skills_dir`, parsed and validated (none when unset).
pub fn read_boot_skills(cfg: &SubstrateConfig) -> Result<Vec<SkillFolder>, SubstrateError> {
    match &cfg.skills_dir {
        Some(dir) => read_skills_dir(dir),
        None => Ok(Vec::new()),
    }
}

/// The definitions of kind `T` in the config map `section` (`substrate.<section>.<name>`),
/// parsed and validated.
fn read_boot_map<T: DefContent>(
    map: &std::collections::BTreeMap<String, serde_json::Value>,
    section: &str,
) -> Result<Vec<(String, T)>, SubstrateError> {
    map.iter()
        .map(|(name, value)| {
            let source = format!("substrate.{section}.{name}");
            validate_def_name(T::KIND, name).map_err(|e| boot_err(&source, &e))?;
            let content = T::from_json(value.clone())
                .and_then(|c| c.validate().map(|()| c))
                .map_err(|e| boot_err(&source, &e))?;
            Ok((name.clone(), content))
        })
        .collect()
}

/// The MCP server definitions of `cfg.mcp_servers`, parsed and validated. `stdio` servers are
/// allowed here: the config file is the operator's.
pub fn read_boot_mcp_servers(
    cfg: &SubstrateConfig,
) -> Result<Vec<(String, McpServerContent)>, SubstrateError> {
    read_boot_map(&cfg.mcp_servers, "mcp_servers")
}

/// Puts each `(name, content)` of `section` into `tenant` through the API's put path.
async fn put_boot_map<T: DefContent>(
    store: &DefStore,
    tenant: &TenantId,
    section: &str,
    items: Vec<(String, T)>,
    loaded: &mut Vec<BootLoaded>,
) -> Result<(), SubstrateError> {
    for (name, content) in items {
        let source = format!("substrate.{section}.{name}");
        let out = defs::put(store, tenant, &name, &content, Some("boot"))
            .await
            .map_err(|e| boot_err(&source, &e))?;
        if T::KIND == DefKind::Schedule {
            defs::sync_schedule(store, tenant, &name)
                .await
                .map_err(|e| boot_err(&source, &e))?;
        }
        loaded.push(BootLoaded {
            kind: T::KIND,
            name,
            version: out.version.hash,
            number: out.version.number,
            created: out.created,
            source,
        });
    }
    Ok(())
}

/// Loads the boot definitions of `cfg` (agents, skills, then MCP servers) into
/// `cfg.boot_tenant`. Unchanged
/// definitions keep their version; changed ones get a new version that becomes active.
pub async fn load_boot_definitions(
    store: &DefStore,
    cfg: &SubstrateConfig,
) -> Result<Vec<BootLoaded>, SubstrateError> {
    let tenant = TenantId::parse(&cfg.boot_tenant)
        .map_err(|e| SubstrateError::Boot(format!("substrate.boot_tenant: {}", e.message)))?;
    let defs = read_boot_definitions(cfg)?;
    let skills = read_boot_skills(cfg)?;
    let servers = read_boot_mcp_servers(cfg)?;
    let mut loaded = Vec::with_capacity(defs.len() + skills.len() + servers.len());
    for d in defs {
        let out = agents::put_agent(store, &tenant, &d.name, &d.content, Some("boot"))
            .await
            .map_err(|e| boot_err(&d.source, &e))?;
        loaded.push(BootLoaded {
            kind: DefKind::Agent,
            name: d.name,
            version: out.version.hash,
            number: out.version.number,
            created: out.created,
            source: d.source,
        });
    }
    for s in skills {
        let out = defs::put(store, &tenant, &s.name, &s.content, Some("boot"))
            .await
            .map_err(|e| boot_err(&s.source, &e))?;
        loaded.push(BootLoaded {
            kind: DefKind::Skill,
            name: s.name,
            version: out.version.hash,
            number: out.version.number,
            created: out.created,
            source: s.source,
        });
    }
    put_boot_map(store, &tenant, "mcp_servers", servers, &mut loaded).await?;
    let schedules: Vec<(String, ScheduleContent)> = read_boot_map(&cfg.schedules, "schedules")?;
    put_boot_map(store, &tenant, "schedules", schedules, &mut loaded).await?;
    let webhooks: Vec<(String, WebhookContent)> = read_boot_map(&cfg.webhooks, "webhooks")?;
    put_boot_map(store, &tenant, "webhooks", webhooks, &mut loaded).await?;
    if !loaded.is_empty() {
        tracing::info!(
            tenant = %tenant,
            definitions = loaded.len(),
            skills = loaded.iter().filter(|l| l.kind == DefKind::Skill).count(),
            new_versions = loaded.iter().filter(|l| l.created).count(),
            "boot definitions loaded"
        );
    }
    Ok(loaded)
}
