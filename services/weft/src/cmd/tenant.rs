//! `weft tenant export | import`: a tenant's archive (docs/operations.md, "Tenant export and
//! import"), straight against the database of `--database-url` / the config.

use std::future::Future;
use std::io::Write as _;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;

use clap::Subcommand;
use weft_core::TenantId;
use weft_store::tenant_archive::{self, Archive, ExportOptions, ExternalBlobs};
use weft_substrate::volumes::blobs::Blobs;

use super::fail;

#[derive(Subcommand, Debug)]
pub enum TenantCmd {
    /// Write a tenant's archive (a tar: manifest.json, one JSONL file per section, blobs) to
    /// standard output: definitions with every version, memory with TTLs and embeddings,
    /// channels with retained messages and cursors, named volumes with blobs, changelog and
    /// snapshots, evaluations (and the runs they name). Read in one consistent snapshot.
    Export {
        /// The tenant to export.
        tenant: String,
        /// Also every run with its events and tool ledger.
        #[arg(long)]
        runs: bool,
    },
    /// Import an archive written by `weft tenant export` into the database (migrated first), in
    /// one transaction. Prints a JSON report (per section: added, unchanged, skipped; and every
    /// conflict). An item that exists with other content is a conflict: nothing is written and
    /// the exit code is 1. Importing the same archive again adds nothing. An archive whose
    /// checksums do not match, or with a section newer than this weft reads, is refused with a
    /// message that names the section (exit code 2).
    Import {
        /// The archive file (`-` for standard input).
        file: PathBuf,
        /// Import under this tenant name instead of the archive's.
        #[arg(long = "as", value_name = "TENANT")]
        as_tenant: Option<String>,
    },
}

/// Reads blobs the substrate keeps outside Postgres through its configured store.
struct SubstrateBlobs(Blobs);

impl ExternalBlobs for SubstrateBlobs {
    fn get<'a>(
        &'a self,
        store: &'a str,
        tenant: &'a str,
        sha256: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, String>> + Send + 'a>> {
        Box::pin(async move {
            let ext = self.0.external_named(store).ok_or_else(|| {
                format!(
                    "it is kept in the `{store}` blob store; give the volumes.blobs config of the fleet"
                )
            })?;
            ext.get(tenant, sha256)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("the `{store}` blob store does not have it"))
        })
    }
}

/// Runs one tenant subcommand.
pub async fn run(config: &weft_config::Config, cmd: TenantCmd) -> ExitCode {
    let url = config.database.url.expose();
    let pool = match weft_store::connect_existing(url, 4).await {
        Ok(p) => p,
        Err(e) if weft_store::is_missing_database(&e) => {
            return fail(format!(
                "the database {} does not exist; create it with `weft migrate` (same --database-url) first",
                super::token::shown_url(url)
            ));
        }
        Err(e) => return fail(e),
    };
    match cmd {
        TenantCmd::Export { tenant, runs } => {
            let tenant = match TenantId::parse(&tenant) {
                Ok(t) => t,
                Err(e) => return fail(e.message),
            };
            let blobs = match Blobs::from_config(pool.clone(), &config.volumes.blobs) {
                Ok(b) => SubstrateBlobs(b),
                Err(e) => return fail(e),
            };
            let out = tokio::io::BufWriter::new(tokio::io::stdout());
            let opts = ExportOptions { runs };
            match tenant_archive::export_tenant(&pool, &tenant, opts, Some(&blobs), out).await {
                Ok(summary) => {
                    let counts: Vec<String> = summary
                        .sections
                        .iter()
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect();
                    eprintln!("exported tenant {}: {}", summary.tenant, counts.join(", "));
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
        TenantCmd::Import { file, as_tenant } => {
            let read = if file.as_os_str() == "-" {
                Archive::read(std::io::stdin().lock())
            } else {
                match std::fs::File::open(&file) {
                    Ok(f) => Archive::read(std::io::BufReader::new(f)),
                    Err(e) => return fail(format!("cannot open {}: {e}", file.display())),
                }
            };
            let archive = match read {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("weft: the archive is refused: {e}");
                    return ExitCode::from(2);
                }
            };
            let name = as_tenant.unwrap_or_else(|| archive.manifest.tenant.clone());
            let tenant = match TenantId::parse(&name) {
                Ok(t) => t,
                Err(e) => return fail(e.message),
            };
            if let Err(e) = weft_store::migrate(&pool).await {
                return fail(e);
            }
            match tenant_archive::import_tenant(&pool, &archive, &tenant).await {
                Ok(report) => {
                    let mut out = std::io::stdout().lock();
                    let json = serde_json::to_string_pretty(&report).unwrap_or_default();
                    let _ = writeln!(out, "{json}");
                    if report.applied {
                        ExitCode::SUCCESS
                    } else {
                        eprintln!(
                            "weft: {} conflicts; nothing was imported (the report lists them)",
                            report.conflicts.len()
                        );
                        ExitCode::FAILURE
                    }
                }
                Err(e @ tenant_archive::ArchiveError::Section { .. }) => {
                    eprintln!("weft: the archive is refused: {e}");
                    ExitCode::from(2)
                }
                Err(e) => fail(e),
            }
        }
    }
}
