//! `onnx-prepared cache inspect|verify|prune DIR`.

use std::path::PathBuf;

use onnx_prepared::cache::maintain;

/// What to do with a cache directory.
#[derive(clap::Subcommand, Debug)]
pub enum CacheCommand {
    /// List the companion models and their entries.
    Inspect {
        /// The cache directory.
        dir: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check every entry (payload present, size, checksum, decodes); exits non-zero on any problem.
    Verify {
        /// The cache directory.
        dir: PathBuf,
    },
    /// Remove temp files of writers that are gone, unreadable companion models, damaged entries and unreferenced payloads (run it while no process writes the cache).
    Prune {
        /// The cache directory.
        dir: PathBuf,
    },
}

/// Runs `command`.
pub fn main(command: CacheCommand) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        CacheCommand::Inspect { dir, json } => inspect(&dir, json),
        CacheCommand::Verify { dir } => {
            let report = maintain::verify(&dir)?;
            for p in &report.problems {
                println!("problem: {p}");
            }
            println!(
                "{} companion model(s), {} entries, {} payload bytes checked: {}",
                report.companions,
                report.entries,
                report.bytes,
                if report.problems.is_empty() {
                    "ok".to_owned()
                } else {
                    format!("{} problem(s)", report.problems.len())
                }
            );
            if report.problems.is_empty() {
                Ok(())
            } else {
                Err(format!("the cache in {} does not verify", dir.display()).into())
            }
        }
        CacheCommand::Prune { dir } => {
            let report = maintain::prune(&dir)?;
            for p in &report.removed {
                println!("removed {}", p.display());
            }
            for k in &report.kept {
                println!("{k}");
            }
            println!(
                "{} file(s) removed, {} damaged entr{} dropped",
                report.removed.len(),
                report.dropped_entries,
                if report.dropped_entries == 1 {
                    "y"
                } else {
                    "ies"
                }
            );
            Ok(())
        }
    }
}

fn inspect(dir: &std::path::Path, json: bool) -> Result<(), Box<dyn std::error::Error>> {
    let companions = maintain::companions(dir)?;
    let mut out = Vec::new();
    for c in &companions {
        match &c.manifest {
            Err(why) => out.push(serde_json::json!({
                "path": c.path.display().to_string(),
                "error": why,
            })),
            Ok(m) => out.push(serde_json::json!({
                "path": c.path.display().to_string(),
                "model_identity": m.model_identity,
                "recorded_source_digests": m.source_digests.len(),
                "rejected": m.rejected.iter().map(|(n, why)| format!("{n}: {why}")).collect::<Vec<_>>(),
                "entries": m.entries.values().map(|e| serde_json::json!({
                    "name": e.name,
                    "layout": e.key.layout,
                    "device": e.key.device,
                    "bytes": e.length,
                    "payload": e.location,
                    "kernel_abi": e.kernel_abi,
                    "source_lineage": e.source_lineage,
                })).collect::<Vec<_>>(),
            })),
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    for c in &companions {
        println!("{}", c.path.display());
        match &c.manifest {
            Err(why) => println!("  unreadable: {why}"),
            Ok(m) => {
                let bytes: u64 = m.entries.values().map(|e| e.length).sum();
                println!(
                    "  model {}: {} entries, {bytes} payload bytes, {} recorded source digests",
                    m.model_identity,
                    m.entries.len(),
                    m.source_digests.len()
                );
                for e in m.entries.values() {
                    println!("  {:>10}  {:<28} {}", e.length, e.key.layout, e.name);
                }
                for (n, why) in &m.rejected {
                    println!("  rejected {n}: {why}");
                }
            }
        }
    }
    if companions.is_empty() {
        println!("no companion model in {}", dir.display());
    }
    Ok(())
}
