//! Writes the fixture seeds of every target into `DIR/<target>/` for a cargo-fuzz campaign
//! (fuzz/run.sh): `cargo run -p weft-fuzz-targets --example write_seeds -- DIR`.

use std::path::PathBuf;
use std::process::ExitCode;

use weft_fuzz_targets::{seeds, targets};

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: write_seeds DIR");
        return ExitCode::from(2);
    };
    let root = seeds::repo_root();
    for (target, _) in targets::ALL {
        let written = seeds::from_fixtures(&root, target).and_then(|inputs| {
            let out = dir.join(target);
            std::fs::create_dir_all(&out)?;
            for (name, data) in inputs {
                let file = name.trim_start_matches("fixture:");
                std::fs::write(out.join(file), data)?;
            }
            Ok(())
        });
        if let Err(e) = written {
            eprintln!("write_seeds: {target}: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
