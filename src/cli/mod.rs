//! Modules of the `onnx-prepared` command-line tool (the binary only).

pub mod bench;
pub mod cache;
pub mod chat;
pub mod common;
pub mod demo;
pub mod generate;
pub mod inspect;
pub mod report;
pub mod run;
pub mod text_out;
pub mod tokenize;

use std::path::PathBuf;

use onnx_prepared::SessionOptions;
use onnx_prepared::cache::PreparedModelPolicy;

/// `--cache DIR` and `--cache-policy P`, shared by `run`, `bench`,
/// `generate` and `demo`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct CacheArgs {
    /// Prepared cache directory: packed weights are read from it, and written to it for the next process.
    #[arg(long = "cache", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// What to do with the cache: disabled, read-only, build-if-missing (default with --cache) or require-complete.
    #[arg(long = "cache-policy", value_name = "POLICY", value_parser = parse_policy)]
    pub policy: Option<PreparedModelPolicy>,
    /// Copy cache payloads into memory instead of mapping them (for a
    /// cache folder other programs write: a mapped payload truncated while
    /// in use would fault the process).
    #[arg(long = "cache-copy-in")]
    pub copy_in: bool,
}

fn parse_policy(s: &str) -> Result<PreparedModelPolicy, String> {
    PreparedModelPolicy::parse(s).ok_or_else(|| {
        format!(
            "`{s}` is not a cache policy: disabled, read-only, build-if-missing or require-complete"
        )
    })
}

impl CacheArgs {
    /// The policy in effect: the given one, build-if-missing with a
    /// directory, disabled without.
    pub fn policy(&self) -> PreparedModelPolicy {
        match (&self.dir, self.policy) {
            (_, Some(p)) => p,
            (Some(_), None) => PreparedModelPolicy::BuildIfMissing,
            (None, None) => PreparedModelPolicy::Disabled,
        }
    }

    /// `options` with this cache.
    pub fn apply(&self, options: SessionOptions) -> Result<SessionOptions, String> {
        let policy = self.policy();
        if self.dir.is_none() && policy != PreparedModelPolicy::Disabled {
            return Err(format!(
                "--cache-policy {} needs --cache DIR",
                policy.name()
            ));
        }
        // The directory first: setting one turns a disabled policy into
        // build-if-missing.
        let options = match &self.dir {
            Some(dir) => options.with_cache_dir(dir),
            None => options.without_cache(),
        };
        Ok(options
            .with_cache_policy(policy)
            .with_cache_copy_in(self.copy_in))
    }
}

/// `run --stats FILE`: the session's preparation counters and the time to
/// first output from process start, as JSON.
pub fn write_stats(
    path: &std::path::Path,
    session: &onnx_prepared::RuntimeSession,
    first_output: std::time::Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    let s = session.preparation_stats();
    let memory = session.memory();
    let peaks: serde_json::Map<String, serde_json::Value> = onnx_prepared::Domain::ALL
        .iter()
        .map(|&d| (d.name().to_owned(), memory.domain(d).peak.into()))
        .collect();
    let json = serde_json::json!({
        "source_bytes_read": s.source_bytes_read,
        "source_bytes_reread": s.source_bytes_reread,
        "packed_bytes_read": s.cache.packed_bytes_read,
        "packed_bytes_in_place": s.cache.bytes_in_place,
        "prepacks": s.prepacks,
        "cache_hits": s.cache.hits,
        "cache_misses": s.cache.misses,
        "cache_writes": s.cache.writes,
        "evictions": s.evictions,
        "restores": s.restores,
        "time_to_first_output_s": first_output.as_secs_f64(),
        "peak_live_bytes": peaks,
        "peak_rss_bytes": peak_rss_bytes(),
        "cache_diagnostics": session.cache().map(|c| c.diagnostics()).unwrap_or_default(),
    });
    onnx_prepared::durable::replace_file(
        path,
        (serde_json::to_string_pretty(&json)? + "\n").as_bytes(),
    )
    .map_err(|e| format!("writing the stats to {}: {e}", path.display()))?;
    Ok(())
}

/// The process's peak resident set size (`VmHWM` of `/proc/self/status`),
/// when the system reports it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `--limit DOMAIN=SIZE` (repeatable): a memory limit per domain
/// (`preparation`, `prepared`, `execution`, `io`) or for all of them
/// (`total`); sizes in bytes or with `KiB`, `MiB`, `GiB`, `kB`, `MB`, `GB`;
/// and `--resident-tables`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LimitArgs {
    /// A memory limit, e.g. `--limit preparation=4MiB` or `--limit total=64MiB` (repeatable; domains: preparation, prepared, execution, io, total).
    #[arg(long = "limit", value_name = "DOMAIN=SIZE", value_parser = parse_limit)]
    pub limits: Vec<(Option<onnx_prepared::Domain>, usize)>,
    /// Read large tables that only row gathers read (embeddings) whole and keep them in memory, instead of reading the rows each run picks from the model's data file (then a run reads no file).
    #[arg(long)]
    pub resident_tables: bool,
}

fn parse_limit(s: &str) -> Result<(Option<onnx_prepared::Domain>, usize), String> {
    let (name, size) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not DOMAIN=SIZE"))?;
    let domain = match name {
        "total" => None,
        _ => Some(
            onnx_prepared::Domain::ALL
                .into_iter()
                .find(|d| d.name() == name)
                .ok_or_else(|| {
                    format!(
                        "`{name}` is not a memory domain: preparation, prepared, execution, io or total"
                    )
                })?,
        ),
    };
    Ok((domain, parse_size(size)?))
}

/// `123`, `4KiB`, `5MiB`, `1GiB`, `10kB`, `5MB`, `1GB`.
fn parse_size(s: &str) -> Result<usize, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}` is not a size (e.g. 4096, 64KiB, 5MiB)"))?;
    let scale: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => {
            return Err(format!(
                "`{unit}` is not a size unit (KiB, MiB, GiB, kB, MB, GB)"
            ));
        }
    };
    n.checked_mul(scale)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("`{s}` is too large"))
}

impl LimitArgs {
    /// `options` with these limits.
    pub fn apply(&self, options: SessionOptions) -> SessionOptions {
        let budget =
            self.limits
                .iter()
                .fold(options.budget(), |b, &(domain, bytes)| match domain {
                    Some(d) => b.with_domain(d, bytes),
                    None => b.with_global(bytes),
                });
        let resident_tables = options.resident_tables() || self.resident_tables;
        options
            .with_budget(budget)
            .with_resident_tables(resident_tables)
    }
}

/// `--checksums strict|off`: whether declared weight digests are checked.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ChecksumArgs {
    /// Check the `sha256:` digests weights declare before using them (`strict`, the default) or not (`off`: for files already verified; ONNX Runtime checks none).
    #[arg(long, value_enum, default_value_t = Checksums::Strict)]
    pub checksums: Checksums,
}

/// The values of `--checksums`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checksums {
    /// Check every declared digest before the weight is used.
    #[default]
    Strict,
    /// Do not check declared digests.
    Off,
}

impl ChecksumArgs {
    /// `options` with this checksum policy.
    pub fn apply(&self, options: SessionOptions) -> SessionOptions {
        options.with_checksums(match self.checksums {
            Checksums::Strict => onnx_prepared::ChecksumPolicy::Strict,
            Checksums::Off => onnx_prepared::ChecksumPolicy::Off,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse() {
        assert_eq!(parse_size("5MiB"), Ok(5 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2kB"), Ok(2000));
        assert!(parse_size("5 MiB").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("99999999999999GiB").is_err());
        assert_eq!(
            parse_limit("preparation=1KiB"),
            Ok((Some(onnx_prepared::Domain::Preparation), 1024))
        );
        assert_eq!(parse_limit("total=1"), Ok((None, 1)));
        assert!(parse_limit("disk=1").is_err());
    }
}
