//! The memory this process may use, as the allocation ceiling sees it (cold
//! path: read once per process): the machine's physical memory, the limit
//! of the process's cgroup (v2 `memory.max` or v1
//! `memory.limit_in_bytes`, the smallest along its path) and the
//! address-space limit (`RLIMIT_AS`).
//!
//! The files are read under [`SystemRoots`], so tests point them at
//! folders of their own holding fake `meminfo`, `self/cgroup` and cgroup
//! files.

use std::path::{Path, PathBuf};

use super::FALLBACK_PHYSICAL_MEMORY_BYTES;

/// Where the system describes its memory: `/proc` (`meminfo`,
/// `self/cgroup`) and the cgroup file systems' mount point (the v2 unified
/// hierarchy's files, or one folder per v1 controller: `memory/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemRoots {
    /// `/proc`, or a folder laid out like it.
    pub proc: PathBuf,
    /// `/sys/fs/cgroup`, or a folder laid out like it.
    pub cgroup: PathBuf,
}

impl SystemRoots {
    /// The running system's: `/proc` and `/sys/fs/cgroup`.
    pub fn system() -> Self {
        Self {
            proc: PathBuf::from("/proc"),
            cgroup: PathBuf::from("/sys/fs/cgroup"),
        }
    }
}

/// A cgroup limit this large or larger is "no limit" (cgroup v1 writes
/// `PAGE_COUNTER_MAX` pages, about 2^63 bytes, for an unlimited group).
const NO_LIMIT_FROM: u64 = 1 << 62;

/// What bounds the memory of this process; `None` where the system reports
/// nothing or sets no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryLimits {
    /// Physical memory: `MemTotal` in `/proc/meminfo`.
    pub physical: Option<u64>,
    /// The smallest memory limit of the process's cgroup and its ancestors
    /// (v2 `memory.max`, v1 `memory.limit_in_bytes`).
    pub cgroup: Option<u64>,
    /// The soft address-space limit (`RLIMIT_AS`).
    pub address_space: Option<u64>,
}

impl MemoryLimits {
    /// The limits read under `roots`, with `address_space` as the
    /// address-space limit.
    pub fn read(roots: &SystemRoots, address_space: Option<u64>) -> Self {
        Self {
            physical: mem_total(&roots.proc),
            cgroup: cgroup_limit(roots),
            address_space,
        }
    }

    /// This process's limits: the running system's files and its own
    /// `RLIMIT_AS`.
    pub fn of_this_process() -> Self {
        Self::read(&SystemRoots::system(), address_space_limit())
    }

    /// The least of the three; physical memory counts as
    /// [`FALLBACK_PHYSICAL_MEMORY_BYTES`] where it is not reported.
    pub fn smallest(&self) -> u64 {
        let physical = self.physical.unwrap_or(FALLBACK_PHYSICAL_MEMORY_BYTES);
        [Some(physical), self.cgroup, self.address_space]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(physical)
    }

    /// The allocation ceiling these limits give: half of
    /// [`smallest`](Self::smallest) (the other half is left to the code,
    /// the mapped model files, the page cache and the rest of the system).
    pub fn ceiling(&self) -> usize {
        usize::try_from(self.smallest() / 2).unwrap_or(usize::MAX)
    }
}

/// The soft `RLIMIT_AS` of this process; `None` when unlimited.
fn address_space_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::As).current
}

/// `MemTotal` of `meminfo` under `proc`, in bytes.
fn mem_total(proc: &Path) -> Option<u64> {
    let info = std::fs::read_to_string(proc.join("meminfo")).ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line
        .trim_start_matches("MemTotal:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The smallest memory limit on the path of every hierarchy this process
/// belongs to (`self/cgroup`): a v2 line (`0::/path`) reads `memory.max`
/// under the cgroup root, a v1 line naming the `memory` controller reads
/// `memory/…/memory.limit_in_bytes`. Each folder from the process's group
/// up to the root counts (a parent's limit binds its children too; inside a
/// cgroup namespace or a container the mount shows only the root, which is
/// the process's own group).
fn cgroup_limit(roots: &SystemRoots) -> Option<u64> {
    let groups = std::fs::read_to_string(roots.proc.join("self/cgroup")).ok()?;
    let mut least: Option<u64> = None;
    for line in groups.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (base, file) = if id == "0" && controllers.is_empty() {
            (roots.cgroup.clone(), "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            (roots.cgroup.join("memory"), "memory.limit_in_bytes")
        } else {
            continue;
        };
        if let Some(limit) = least_on_path(&base, path, file) {
            least = Some(least.map_or(limit, |l| l.min(limit)));
        }
    }
    least
}

/// The least limit in `file` of the folders from `base/path` up to `base`
/// (`max`, a missing file or a value from [`NO_LIMIT_FROM`] up: no limit).
fn least_on_path(base: &Path, path: &str, file: &str) -> Option<u64> {
    // The kernel writes plain absolute paths; anything that could leave
    // `base` is skipped.
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != "." && *p != "..")
        .collect();
    (0..=parts.len())
        .filter_map(|depth| {
            let mut folder = base.to_path_buf();
            folder.extend(&parts[..depth]);
            let text = std::fs::read_to_string(folder.join(file)).ok()?;
            let value: u64 = text.trim().parse().ok()?;
            (value < NO_LIMIT_FROM).then_some(value)
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake system: `proc/meminfo`, `proc/self/cgroup` and cgroup files.
    struct Fake {
        dir: tempfile::TempDir,
    }

    impl Fake {
        fn new(mem_total_kib: Option<u64>, cgroup: &str) -> Self {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("proc/self")).unwrap();
            std::fs::create_dir_all(dir.path().join("cgroup")).unwrap();
            if let Some(kib) = mem_total_kib {
                let info = format!("MemTotal:       {kib} kB\nMemFree:        1 kB\n");
                std::fs::write(dir.path().join("proc/meminfo"), info).unwrap();
            }
            std::fs::write(dir.path().join("proc/self/cgroup"), cgroup).unwrap();
            Self { dir }
        }

        fn file(&self, under_cgroup: &str, text: &str) -> &Self {
            let path = self.dir.path().join("cgroup").join(under_cgroup);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
            self
        }

        fn roots(&self) -> SystemRoots {
            SystemRoots {
                proc: self.dir.path().join("proc"),
                cgroup: self.dir.path().join("cgroup"),
            }
        }

        fn limits(&self, address_space: Option<u64>) -> MemoryLimits {
            MemoryLimits::read(&self.roots(), address_space)
        }
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn physical_memory_alone_gives_half_of_it() {
        let fake = Fake::new(Some(16 << 20), "0::/\n");
        let limits = fake.limits(None);
        assert_eq!(limits.physical, Some(16 * GIB));
        assert_eq!(limits.cgroup, None);
        assert_eq!(limits.ceiling(), (8 * GIB) as usize);
    }

    #[test]
    fn unreported_memory_falls_back() {
        let fake = Fake::new(None, "");
        let limits = fake.limits(None);
        assert_eq!(limits, MemoryLimits::default());
        assert_eq!(limits.ceiling() as u64, FALLBACK_PHYSICAL_MEMORY_BYTES / 2);
    }

    #[test]
    fn cgroup_v2_memory_max_number_and_max() {
        let fake = Fake::new(Some(16 << 20), "0::/user.slice/job\n");
        fake.file("user.slice/job/memory.max", "max\n");
        assert_eq!(fake.limits(None).cgroup, None);
        assert_eq!(fake.limits(None).ceiling(), (8 * GIB) as usize);
        fake.file("user.slice/job/memory.max", &format!("{}\n", 2 * GIB));
        assert_eq!(fake.limits(None).cgroup, Some(2 * GIB));
        assert_eq!(fake.limits(None).ceiling(), GIB as usize);
        // A parent's smaller limit binds the child.
        fake.file("user.slice/memory.max", &format!("{GIB}\n"));
        assert_eq!(fake.limits(None).cgroup, Some(GIB));
    }

    #[test]
    fn cgroup_v2_root_of_a_namespace() {
        // Inside a container the process's group is the mount's root.
        let fake = Fake::new(Some(16 << 20), "0::/\n");
        fake.file("memory.max", &format!("{}\n", 4 * GIB));
        assert_eq!(fake.limits(None).ceiling(), (2 * GIB) as usize);
    }

    #[test]
    fn cgroup_v1_limit_in_bytes_and_its_unlimited_value() {
        let cgroup = "5:cpu,cpuacct:/a\n4:memory:/docker/abc\n0::/\n";
        let fake = Fake::new(Some(16 << 20), cgroup);
        fake.file(
            "memory/docker/abc/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        assert_eq!(fake.limits(None).cgroup, None);
        fake.file(
            "memory/docker/abc/memory.limit_in_bytes",
            &format!("{}\n", 3 * GIB),
        );
        assert_eq!(fake.limits(None).cgroup, Some(3 * GIB));
        assert_eq!(fake.limits(None).ceiling(), (3 * GIB / 2) as usize);
    }

    #[test]
    fn cgroup_v1_group_not_under_the_mount_uses_its_root() {
        // The group's path names the host's hierarchy; the container's
        // mount shows that group as its root.
        let fake = Fake::new(Some(16 << 20), "4:memory:/process_api/abc\n");
        fake.file("memory/memory.limit_in_bytes", &format!("{}\n", 6 * GIB));
        assert_eq!(fake.limits(None).cgroup, Some(6 * GIB));
    }

    #[test]
    fn hybrid_v1_and_v2_take_the_least() {
        let fake = Fake::new(Some(16 << 20), "4:memory:/g\n0::/g\n");
        fake.file("memory/g/memory.limit_in_bytes", &format!("{}\n", 6 * GIB));
        fake.file("g/memory.max", &format!("{}\n", 5 * GIB));
        assert_eq!(fake.limits(None).cgroup, Some(5 * GIB));
    }

    #[test]
    fn address_space_limit_binds_when_least() {
        let fake = Fake::new(Some(16 << 20), "0::/\n");
        fake.file("memory.max", &format!("{}\n", 4 * GIB));
        assert_eq!(fake.limits(Some(2 * GIB)).ceiling(), GIB as usize);
        assert_eq!(fake.limits(Some(64 * GIB)).ceiling(), (2 * GIB) as usize);
    }

    #[test]
    fn paths_cannot_leave_the_cgroup_root() {
        let fake = Fake::new(Some(16 << 20), "0::/../../etc\n");
        assert_eq!(fake.limits(None).cgroup, None);
    }

    #[test]
    fn this_process_has_a_ceiling() {
        let limits = MemoryLimits::of_this_process();
        assert!(limits.ceiling() > 0);
        assert!(limits.ceiling() as u64 <= limits.smallest());
    }
}
