//! `MemoryBudget` and `Reservation`: lock-free byte accounting per allocation
//! domain under one global limit (hot path: every arena allocation passes
//! through `Shared::reserve` and `Shared::release`).
//!
//! Each domain has a `live` counter and a `peak`; the budget has one global `live` counter and `peak`. The reservation protocol
//! (see the module docs of [`crate::arena`]) keeps each `live` counter at or
//! below its limit at every instant.

use std::fmt;

use crate::sync::{Arc, AtomicU64, AtomicUsize, Lock, Ordering};

use super::{ArenaError, Domain};

/// A limit that never refuses.
pub const UNLIMITED: usize = usize::MAX;

/// The limits of a `MemoryBudget`, in bytes: one global limit over the live
/// bytes of all domains and one limit per domain. [`UNLIMITED`] refuses
/// nothing. Limits apply to live bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetLimits {
    global: usize,
    domains: [usize; Domain::COUNT],
}

impl BudgetLimits {
    /// No limit anywhere.
    pub const fn unlimited() -> Self {
        Self {
            global: UNLIMITED,
            domains: [UNLIMITED; Domain::COUNT],
        }
    }

    /// These limits with the global limit set to `bytes`.
    #[must_use]
    pub const fn with_global(mut self, bytes: usize) -> Self {
        self.global = bytes;
        self
    }

    /// These limits with `domain`'s limit set to `bytes`.
    #[must_use]
    pub const fn with_domain(mut self, domain: Domain, bytes: usize) -> Self {
        self.domains[domain.index()] = bytes;
        self
    }

    /// The global limit.
    pub const fn global(&self) -> usize {
        self.global
    }

    /// `domain`'s limit.
    pub const fn domain(&self, domain: Domain) -> usize {
        self.domains[domain.index()]
    }
}

impl Default for BudgetLimits {
    fn default() -> Self {
        Self::unlimited()
    }
}

/// One `live` counter with its limit and high-water mark.
struct Counter {
    live: AtomicUsize,
    peak: AtomicUsize,
    limit: usize,
}

impl Counter {
    fn new(limit: usize) -> Self {
        Self {
            live: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            limit,
        }
    }

    /// Adds `bytes` if the sum stays within the limit. Returns the new live
    /// value, or the live value that refused the addition (nothing changed).
    fn try_add(&self, bytes: usize) -> Result<usize, usize> {
        let mut live = self.live.load(Ordering::Acquire);
        loop {
            let next = match live.checked_add(bytes) {
                Some(next) if next <= self.limit => next,
                _ => return Err(live),
            };
            match self
                .live
                .compare_exchange_weak(live, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(next),
                Err(actual) => live = actual,
            }
        }
    }

    fn sub(&self, bytes: usize) {
        let before = self.live.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(before >= bytes, "released more bytes than were live");
    }

    fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    fn note_peak(&self, live: usize) {
        self.peak.fetch_max(live, Ordering::Relaxed);
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
}

/// Told after bytes were returned to a budget it watches
/// ([`MemoryBudget::watch_releases`]): e.g. an admission controller whose
/// deferred tasks wait for those bytes. Called on the releasing thread,
/// holding no lock of the budget; it must not block.
pub trait ReleaseWatcher: Send + Sync {
    /// Bytes were released (the release epoch moved first).
    fn released(&self);
}

/// The counters every handle of one budget shares.
pub(super) struct Shared {
    global: Counter,
    domains: [Counter; Domain::COUNT],
    /// Watchers registered (a budget nobody watches pays one load per
    /// release).
    watching: AtomicUsize,
    /// Bumped (SeqCst) by every release while watched, before the watchers
    /// are told.
    releases: AtomicU64,
    watchers: Lock<Vec<std::sync::Weak<dyn ReleaseWatcher>>>,
}

impl Shared {
    /// Steps 1–3 of the reservation protocol: adds `bytes` to `domain`'s and
    /// the global live counters, or refuses and changes nothing.
    pub(super) fn reserve(&self, domain: Domain, bytes: usize) -> Result<(), ArenaError> {
        if bytes == 0 {
            return Ok(());
        }
        let counter = &self.domains[domain.index()];
        let domain_live = counter
            .try_add(bytes)
            .map_err(|live| ArenaError::OverBudget {
                domain,
                requested: bytes,
                live,
                limit: counter.limit,
                global_live: self.global.live(),
                global_limit: self.global.limit,
            })?;
        match self.global.try_add(bytes) {
            Ok(global_live) => {
                counter.note_peak(domain_live);
                self.global.note_peak(global_live);
                Ok(())
            }
            Err(global_live) => {
                counter.sub(bytes);
                Err(ArenaError::OverBudget {
                    domain,
                    requested: bytes,
                    live: domain_live - bytes,
                    limit: counter.limit,
                    global_live,
                    global_limit: self.global.limit,
                })
            }
        }
    }

    /// Step 4: returns `bytes` that an earlier `reserve` of `domain` added.
    pub(super) fn release(&self, domain: Domain, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.global.sub(bytes);
        self.domains[domain.index()].sub(bytes);
        if self.watching.load(Ordering::SeqCst) != 0 {
            self.tell_watchers();
        }
    }

    /// Step 5 (watched budgets): bump the release epoch (SeqCst), then tell
    /// every watcher, one at a time outside the lock (a watcher may drop
    /// reservations of this budget).
    #[cold]
    fn tell_watchers(&self) {
        self.releases.fetch_add(1, Ordering::SeqCst);
        for i in 0.. {
            let Some(watcher) = self.watchers.with(|w| w.get(i).cloned()) else {
                break;
            };
            if let Some(watcher) = watcher.upgrade() {
                watcher.released();
            }
        }
    }
}

/// One global memory budget with a limit per [`Domain`]: the accounting every
/// arena charges. Cloning gives another handle to the same counters.
///
/// All accounting is lock-free; see the reservation protocol in the
/// [`crate::arena`] module docs.
#[derive(Clone)]
pub struct MemoryBudget {
    shared: Arc<Shared>,
}

impl MemoryBudget {
    /// A budget with `limits` and nothing live.
    pub fn new(limits: BudgetLimits) -> Self {
        Self {
            shared: Arc::new(Shared {
                global: Counter::new(limits.global),
                domains: std::array::from_fn(|i| Counter::new(limits.domains[i])),
                watching: AtomicUsize::new(0),
                releases: AtomicU64::new(0),
                watchers: Lock::new(Vec::new()),
            }),
        }
    }

    /// Registers `watcher` to be told after every release of bytes of this
    /// budget (by any reservation, arena or permit), until it is dropped.
    /// Cold path: watching makes every release bump an epoch and call the
    /// live watchers.
    pub fn watch_releases(&self, watcher: std::sync::Weak<dyn ReleaseWatcher>) {
        let shared = &self.shared;
        shared.watchers.with(|w| {
            w.retain(|w| w.strong_count() > 0);
            w.push(watcher);
            shared.watching.store(w.len(), Ordering::SeqCst);
        });
    }

    /// Changes (SeqCst) after every release of a watched budget, before its
    /// watchers are told; 0 while unwatched.
    pub fn release_epoch(&self) -> u64 {
        self.shared.releases.load(Ordering::SeqCst)
    }

    /// A budget that refuses nothing (it still accounts).
    pub fn unlimited() -> Self {
        Self::new(BudgetLimits::unlimited())
    }

    /// The limits this budget was made with.
    pub fn limits(&self) -> BudgetLimits {
        BudgetLimits {
            global: self.shared.global.limit,
            domains: std::array::from_fn(|i| self.shared.domains[i].limit),
        }
    }

    /// `domain`'s limit.
    pub fn limit(&self, domain: Domain) -> usize {
        self.shared.domains[domain.index()].limit
    }

    /// The global limit.
    pub fn global_limit(&self) -> usize {
        self.shared.global.limit
    }

    /// Reserves `bytes` in `domain`: succeeds only if both `domain`'s live
    /// bytes and all domains' live bytes stay within their limits, and then
    /// changes nothing else. Dropping the reservation returns the bytes.
    pub fn reserve(&self, domain: Domain, bytes: usize) -> Result<Reservation, ArenaError> {
        self.shared.reserve(domain, bytes)?;
        Ok(Reservation {
            shared: Arc::clone(&self.shared),
            domain,
            bytes,
        })
    }

    /// Bytes live (reserved) in `domain` now.
    pub fn live(&self, domain: Domain) -> usize {
        self.shared.domains[domain.index()].live()
    }

    /// The most bytes live in `domain` at once since the budget was made or
    /// [`MemoryBudget::reset_peaks`] ran. Never above `domain`'s limit.
    pub fn peak(&self, domain: Domain) -> usize {
        self.shared.domains[domain.index()].peak()
    }

    /// Bytes live in all domains now.
    pub fn total_live(&self) -> usize {
        self.shared.global.live()
    }

    /// The most bytes live in all domains at once. Never above the global
    /// limit.
    pub fn total_peak(&self) -> usize {
        self.shared.global.peak()
    }

    /// Lowers every peak to the bytes live now (e.g. between benchmark runs).
    pub fn reset_peaks(&self) {
        for counter in self.shared.domains.iter().chain([&self.shared.global]) {
            counter.peak.store(counter.live(), Ordering::Relaxed);
        }
    }

    /// A snapshot of every counter. Counters are read one at a time, so under
    /// concurrent use the snapshot is not one instant.
    pub fn report(&self) -> BudgetReport {
        let domains = Domain::ALL.map(|domain| DomainReport {
            domain,
            live: self.live(domain),
            peak: self.peak(domain),
            limit: self.limit(domain),
        });
        BudgetReport {
            total_live: self.total_live(),
            total_peak: self.total_peak(),
            global_limit: self.global_limit(),
            domains,
        }
    }
}

impl Default for MemoryBudget {
    fn default() -> Self {
        Self::unlimited()
    }
}

impl fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("report", &self.report())
            .finish()
    }
}

/// Bytes reserved in one domain of a [`MemoryBudget`]; dropping it returns
/// them. The basis of every arena allocation handle (and of the scheduler's
/// admission permits).
#[must_use = "dropping a reservation returns its bytes at once"]
pub struct Reservation {
    shared: Arc<Shared>,
    domain: Domain,
    bytes: usize,
}

impl Reservation {
    /// The domain the bytes are reserved in.
    pub fn domain(&self) -> Domain {
        self.domain
    }

    /// The bytes reserved.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Reserves `additional` more bytes under the same rules as
    /// [`MemoryBudget::reserve`]; on refusal the reservation is unchanged.
    pub fn grow(&mut self, additional: usize) -> Result<(), ArenaError> {
        self.shared.reserve(self.domain, additional)?;
        self.bytes += additional;
        Ok(())
    }

    /// Returns `bytes` of the reservation now (at most all of it).
    pub fn shrink(&mut self, bytes: usize) {
        debug_assert!(bytes <= self.bytes, "shrinking by more than is reserved");
        let bytes = bytes.min(self.bytes);
        self.shared.release(self.domain, bytes);
        self.bytes -= bytes;
    }

    /// Grows or shrinks the reservation to exactly `bytes`; on refusal the
    /// reservation is unchanged.
    pub fn resize(&mut self, bytes: usize) -> Result<(), ArenaError> {
        if bytes > self.bytes {
            self.grow(bytes - self.bytes)
        } else {
            self.shrink(self.bytes - bytes);
            Ok(())
        }
    }

    /// Moves `bytes` (at most all) of this reservation into a new one in the
    /// same domain; the budget's counters do not change.
    pub fn split(&mut self, bytes: usize) -> Reservation {
        debug_assert!(bytes <= self.bytes, "splitting off more than is reserved");
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        Reservation {
            shared: Arc::clone(&self.shared),
            domain: self.domain,
            bytes,
        }
    }

    /// A handle to the budget the bytes are reserved in.
    pub fn budget(&self) -> MemoryBudget {
        MemoryBudget {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.shared.release(self.domain, self.bytes);
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("domain", &self.domain)
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// One domain's counters in a [`BudgetReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DomainReport {
    /// The domain.
    pub domain: Domain,
    /// Bytes live now.
    pub live: usize,
    /// The most bytes live at once.
    pub peak: usize,
    /// The domain's limit (`usize::MAX`: unlimited).
    pub limit: usize,
}

/// A snapshot of a `MemoryBudget`'s counters; `Display` renders a table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BudgetReport {
    /// Per domain, in [`Domain::ALL`] order.
    pub domains: [DomainReport; Domain::COUNT],
    /// Bytes live in all domains.
    pub total_live: usize,
    /// The most bytes live in all domains at once.
    pub total_peak: usize,
    /// The global limit (`usize::MAX`: unlimited).
    pub global_limit: usize,
}

impl BudgetReport {
    /// `domain`'s counters.
    pub fn domain(&self, domain: Domain) -> &DomainReport {
        &self.domains[domain.index()]
    }
}

impl fmt::Display for BudgetReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = |bytes: usize| {
            if bytes == UNLIMITED {
                "unlimited".to_owned()
            } else {
                bytes.to_string()
            }
        };
        writeln!(
            f,
            "{:<12} {:>14} {:>14} {:>14}",
            "domain", "live", "peak", "limit"
        )?;
        for d in &self.domains {
            writeln!(
                f,
                "{:<12} {:>14} {:>14} {:>14}",
                d.domain.name(),
                d.live,
                d.peak,
                limit(d.limit)
            )?;
        }
        write!(
            f,
            "{:<12} {:>14} {:>14} {:>14}",
            "total",
            self.total_live,
            self.total_peak,
            limit(self.global_limit)
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn budget(global: usize, prepared: usize) -> MemoryBudget {
        MemoryBudget::new(
            BudgetLimits::unlimited()
                .with_global(global)
                .with_domain(Domain::Prepared, prepared),
        )
    }

    #[test]
    fn domain_limit_refuses_without_touching_global() {
        let budget = budget(1000, 100);
        let _held = budget.reserve(Domain::Prepared, 60).unwrap();
        let error = budget.reserve(Domain::Prepared, 41).unwrap_err();
        assert_eq!(
            error,
            ArenaError::OverBudget {
                domain: Domain::Prepared,
                requested: 41,
                live: 60,
                limit: 100,
                global_live: 60,
                global_limit: 1000,
            }
        );
        assert_eq!(budget.live(Domain::Prepared), 60);
        assert_eq!(budget.total_live(), 60);
        assert_eq!(budget.peak(Domain::Prepared), 60);
    }

    #[test]
    fn global_limit_refusal_undoes_the_domain_step() {
        let budget = budget(100, UNLIMITED);
        let _other = budget.reserve(Domain::Execution, 70).unwrap();
        let error = budget.reserve(Domain::Prepared, 31).unwrap_err();
        assert_eq!(
            error,
            ArenaError::OverBudget {
                domain: Domain::Prepared,
                requested: 31,
                live: 0,
                limit: UNLIMITED,
                global_live: 70,
                global_limit: 100,
            }
        );
        assert_eq!(budget.live(Domain::Prepared), 0);
        assert_eq!(budget.peak(Domain::Prepared), 0);
        assert_eq!(budget.total_live(), 70);
    }

    #[test]
    fn unlimited_does_not_overflow() {
        let budget = MemoryBudget::unlimited();
        let _big = budget.reserve(Domain::Io, usize::MAX - 1).unwrap();
        assert!(budget.reserve(Domain::Io, 2).is_err());
        assert_eq!(budget.live(Domain::Io), usize::MAX - 1);
    }

    #[test]
    fn split_and_resize_keep_counters_exact() {
        let budget = budget(100, 100);
        let mut whole = budget.reserve(Domain::Prepared, 80).unwrap();
        let part = whole.split(30);
        assert_eq!((whole.bytes(), part.bytes()), (50, 30));
        assert_eq!(budget.live(Domain::Prepared), 80);
        drop(part);
        assert_eq!(budget.live(Domain::Prepared), 50);
        whole.resize(100).unwrap();
        assert!(whole.resize(101).is_err());
        assert_eq!(whole.bytes(), 100);
        whole.resize(10).unwrap();
        assert_eq!(budget.total_live(), 10);
        budget.reset_peaks();
        assert_eq!(budget.peak(Domain::Prepared), 10);
        assert_eq!(budget.total_peak(), 10);
    }

    #[test]
    fn report_renders_every_domain() {
        let budget = budget(1 << 20, 1 << 10);
        let _r = budget.reserve(Domain::Prepared, 512).unwrap();
        let report = budget.report();
        assert_eq!(report.domain(Domain::Prepared).live, 512);
        assert_eq!(report.domain(Domain::Prepared).limit, 1 << 10);
        let text = report.to_string();
        for domain in Domain::ALL {
            assert!(text.contains(domain.name()), "{text}");
        }
        assert!(text.contains("unlimited"), "{text}");
        assert!(text.lines().last().unwrap().starts_with("total"), "{text}");
    }
}
