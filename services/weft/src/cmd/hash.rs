//! `weft hash <kind> <path>`: the content hash a deployment will report for a definition. Needs
//! no config or database. A new kind is one variant of [`HashCmd`] and one arm of [`run`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use super::fail;

#[derive(Subcommand, Debug)]
pub enum HashCmd {
    /// Print the `sha256:` version hash of an agent definition: a `<name>.md` file (YAML front
    /// matter + system prompt body) or a `.json` object of content fields. Needs no config or
    /// database; an invalid file exits 1 naming the field.
    Agent {
        /// The definition file.
        file: PathBuf,
    },
    /// Print the `sha256:` version hash of a skill folder (`<name>/SKILL.md` plus its text
    /// files), as a deployment loading it from substrate.skills_dir reports it. Needs no config
    /// or database; an invalid folder exits 1 naming the file and the field.
    Skill {
        /// The skill's folder.
        dir: PathBuf,
    },
}

/// Prints the hash, or why the definition is invalid (exit 1).
pub fn run(cmd: &HashCmd) -> ExitCode {
    let hash = match cmd {
        HashCmd::Agent { file } => {
            weft_substrate::boot::read_agent_file(file).map(|def| def.content.hash())
        }
        HashCmd::Skill { dir } => weft_substrate::hash_skill_dir(dir),
    };
    match hash {
        Ok(h) => {
            println!("{h}");
            ExitCode::SUCCESS
        }
        Err(weft_substrate::SubstrateError::Boot(msg)) => fail(msg),
        Err(e) => fail(e),
    }
}
