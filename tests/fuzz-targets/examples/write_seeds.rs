//! Writes the fixture seeds of the targets that have them into `DIR/<target>/`, for a cargo-fuzz
//! campaign: `write_seeds ROOT DIR` (ROOT: the repository). fuzz/run.sh compiles this file alone
//! with rustc (it needs nothing but `std`), so a campaign does not wait for a build of the
//! workspace; cargo builds it as an example so it keeps compiling.

#[path = "../src/seeds.rs"]
#[expect(dead_code, reason = "this program uses the fixture seeds only")]
mod seeds;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [root, dir] = &args[..] else {
        eprintln!("usage: write_seeds ROOT DIR");
        return ExitCode::from(2);
    };
    for target in seeds::FIXTURE_TARGETS {
        let written = seeds::from_fixtures(root, target).and_then(|inputs| {
            let out = dir.join(target);
            std::fs::create_dir_all(&out)?;
            for (name, data) in inputs {
                std::fs::write(out.join(name.trim_start_matches("fixture:")), data)?;
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
