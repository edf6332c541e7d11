//! `onnx-prepared cache inspect|verify|prune DIR`.

use std::path::PathBuf;

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
    /// Remove temp files, unreferenced payloads and damaged entries.
    Prune {
        /// The cache directory.
        dir: PathBuf,
    },
}

/// Runs `command`.
pub fn main(command: CacheCommand) -> Result<(), Box<dyn std::error::Error>> {
    Err(format!("not implemented yet: {command:?}").into())
}
