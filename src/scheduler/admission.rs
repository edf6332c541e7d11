//! `Admission`: the gate a task passes between its claim-check and its run
//! (hot path when enabled: a few CAS per task). Bytes come from a
//! [`MemoryBudget`]; a critical reserve of bytes and worker slots is kept
//! out of reach of prefetch and background work. Protocol "admit" is
//! numbered in the module docs of [`crate::scheduler`].

use std::sync::Arc;

use crate::arena::{Domain, MemoryBudget, ReleaseWatcher, Reservation, UNLIMITED};
use crate::limits::SCHEDULER_CRITICAL_RESERVE_PERCENT;
use crate::scheduler::{Priority, TaskId};
use crate::sync::{AtomicU32, AtomicUsize, Lock, Ordering, fence};

use super::queue::Lane;

/// Counter index of the global byte cap among [`Admission`]'s non-critical
/// byte counters (the domains come first, at [`Domain::index`]).
const GLOBAL: usize = Domain::COUNT;

/// Why a task was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not now: bytes or slots are taken; retry after a permit or any other
    /// reservation of the budget is released.
    Busy,
    /// Never: the estimate exceeds what this priority may ever hold.
    Never(String),
}

/// Admission control over a [`MemoryBudget`] plus worker slots.
///
/// Policy (see also protocol "admit"):
/// * Every task reserves its estimated bytes in its domain; the budget
///   refuses anything over the domain limit or the global limit.
/// * Non-critical (prefetch, background) tasks may in addition hold at most
///   `100 − reserve_percent` % of each limited domain and of the global limit
///   (a non-critical task can never take the last bytes), and at most
///   `workers − 1` of the CPU and of the I/O lane's workers (at least 1), so
///   one worker of each lane and the reserved bytes stay available to
///   critical work. Inline tasks take no slot.
/// * A task larger than what its priority may ever hold is refused with
///   [`Refusal::Never`] (the pool fails it instead of waiting forever).
#[derive(Debug)]
pub struct Admission {
    budget: MemoryBudget,
    reserve_percent: usize,
    /// Non-critical live bytes per domain, then global.
    noncritical: [AtomicUsize; Domain::COUNT + 1],
    /// Caps of `noncritical`.
    caps: [usize; Domain::COUNT + 1],
    /// Non-critical tasks running per lane `[io, cpu]`.
    running: [AtomicUsize; 2],
    /// Caps of `running`; set by the pool from its worker counts.
    slots: [AtomicUsize; 2],
    /// Bumped (SeqCst) by every permit release.
    released: AtomicU32,
    /// Tasks refused with [`Refusal::Busy`], posted again on a release: of
    /// a permit, or of any bytes of the budget (it watches the budget).
    deferred: Arc<Deferred>,
}

fn cap(limit: usize, reserve_percent: usize) -> usize {
    if limit == UNLIMITED {
        UNLIMITED
    } else {
        // At most `limit`: reserve_percent <= 100.
        limit - (limit as u128 * reserve_percent as u128 / 100) as usize
    }
}

fn slot_index(lane: Lane) -> Option<usize> {
    match lane {
        Lane::Io => Some(0),
        Lane::Cpu => Some(1),
        Lane::Inline => None,
    }
}

/// Adds `amount` to `counter` unless the sum would exceed `cap`.
fn try_add(counter: &AtomicUsize, amount: usize, cap: usize) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |live| {
            live.checked_add(amount).filter(|&sum| sum <= cap)
        })
        .is_ok()
}

impl Admission {
    /// Admission over `budget` with the default critical reserve
    /// ([`SCHEDULER_CRITICAL_RESERVE_PERCENT`]).
    pub fn new(budget: MemoryBudget) -> Self {
        Self::with_reserve_percent(budget, SCHEDULER_CRITICAL_RESERVE_PERCENT)
    }

    /// Admission over `budget`, keeping `reserve_percent` (at most 100) of
    /// every limit for critical tasks.
    pub fn with_reserve_percent(budget: MemoryBudget, reserve_percent: usize) -> Self {
        let reserve_percent = reserve_percent.min(100);
        let mut caps = [UNLIMITED; Domain::COUNT + 1];
        for d in Domain::ALL {
            caps[d.index()] = cap(budget.limit(d), reserve_percent);
        }
        caps[GLOBAL] = cap(budget.global_limit(), reserve_percent);
        // Bytes a deferred task waits for may be held by any reservation of
        // the budget (arenas, outputs, other controllers), not only by
        // permits: every release retries the deferred tasks (admit step 4).
        let deferred = Arc::new(Deferred::default());
        let watcher: Arc<dyn ReleaseWatcher> = deferred.clone();
        budget.watch_releases(Arc::downgrade(&watcher));
        Self {
            budget,
            reserve_percent,
            noncritical: std::array::from_fn(|_| AtomicUsize::new(0)),
            caps,
            running: [AtomicUsize::new(0), AtomicUsize::new(0)],
            slots: [AtomicUsize::new(usize::MAX), AtomicUsize::new(usize::MAX)],
            released: AtomicU32::new(0),
            deferred,
        }
    }

    /// Sets the slot caps from the pool's worker counts: `workers − 1`, at
    /// least one (called by each submit; submissions sharing a controller
    /// run on one pool).
    pub(super) fn set_workers(&self, io_workers: usize, cpu_workers: usize) {
        self.slots[0].store(io_workers.saturating_sub(1).max(1), Ordering::Relaxed);
        self.slots[1].store(cpu_workers.saturating_sub(1).max(1), Ordering::Relaxed);
    }

    /// The deferred tasks (admit steps 3–4).
    pub(super) fn deferred(&self) -> &Deferred {
        &self.deferred
    }

    /// The budget bytes come from.
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// The critical reserve, in percent of each limit.
    pub fn reserve_percent(&self) -> usize {
        self.reserve_percent
    }

    /// Non-critical tasks of `lane` admitted and not yet released.
    pub fn noncritical_running(&self, lane: Lane) -> usize {
        slot_index(lane).map_or(0, |i| self.running[i].load(Ordering::Acquire))
    }

    /// Whether a non-critical task of `lane` would find a free worker slot
    /// now (a racy hint for admit step 0; inline tasks take no slot).
    pub fn has_free_slot(&self, lane: Lane) -> bool {
        slot_index(lane).is_none_or(|i| {
            self.running[i].load(Ordering::Relaxed) < self.slots[i].load(Ordering::Relaxed)
        })
    }

    /// Tasks refused with [`Refusal::Busy`] and not yet posted again.
    pub fn deferred_tasks(&self) -> usize {
        self.deferred.len()
    }

    /// The release epoch (admit step 3): moves with every permit release
    /// and every release of the budget's bytes (both only grow).
    pub(super) fn epoch(&self) -> u64 {
        u64::from(self.released.load(Ordering::SeqCst)) + self.budget.release_epoch()
    }

    /// Admit step 1–2: a permit for a task of `lane` at `priority` needing
    /// `bytes` in `domain`, or why not.
    pub fn try_admit(
        &self,
        lane: Lane,
        priority: Priority,
        domain: Domain,
        bytes: usize,
    ) -> Result<AdmissionPermit<'_>, Refusal> {
        let critical = priority == Priority::Critical;
        let (domain_cap, global_cap) = if critical {
            (self.budget.limit(domain), self.budget.global_limit())
        } else {
            (self.caps[domain.index()], self.caps[GLOBAL])
        };
        if bytes > domain_cap || bytes > global_cap {
            return Err(Refusal::Never(format!(
                "admission: needs {bytes} bytes of {domain}, more than a {priority:?} task may hold \
                 (domain {domain_cap}, global {global_cap})"
            )));
        }
        let mut permit = AdmissionPermit {
            admission: self,
            reservation: None,
            slot: None,
            noncritical: None,
        };
        if !critical {
            if let Some(i) = slot_index(lane) {
                if !try_add(&self.running[i], 1, self.slots[i].load(Ordering::Relaxed)) {
                    return Err(Refusal::Busy);
                }
                permit.slot = Some(i);
            }
            if bytes > 0 {
                if !try_add(&self.noncritical[domain.index()], bytes, domain_cap) {
                    return Err(Refusal::Busy);
                }
                if !try_add(&self.noncritical[GLOBAL], bytes, global_cap) {
                    self.noncritical[domain.index()].fetch_sub(bytes, Ordering::AcqRel);
                    return Err(Refusal::Busy);
                }
                permit.noncritical = Some((domain, bytes));
            }
        }
        match self.budget.reserve(domain, bytes) {
            Ok(r) => {
                permit.reservation = Some(r);
                Ok(permit)
            }
            Err(_) => Err(Refusal::Busy),
        }
    }
}

/// Where a deferred task goes back to (admit step 4): its submission,
/// which posts it again on its own pool. Implemented by the submission, so
/// this module names nothing of it.
pub(super) trait Requeue: Send + Sync + std::fmt::Debug {
    /// Posts the deferred `task` again; it retries from admit step 1.
    fn requeue(&self, task: TaskId);
}

/// Deferred tasks of one [`Admission`], with the submissions they belong
/// to (admit step 3; cold path).
#[derive(Debug, Default)]
pub struct Deferred {
    entries: Lock<Vec<(Arc<dyn Requeue>, TaskId)>>,
    len: AtomicUsize,
}

impl Deferred {
    pub(super) fn push(&self, submission: Arc<dyn Requeue>, task: TaskId) {
        self.entries.with(|e| {
            e.push((submission, task));
            self.len.store(e.len(), Ordering::SeqCst);
        });
    }

    /// Tasks deferred now.
    pub(super) fn len(&self) -> usize {
        self.len.load(Ordering::SeqCst)
    }

    /// Admit step 4: posts every deferred task again (on its own pool).
    pub(super) fn retry_all(&self) {
        fence(Ordering::SeqCst);
        if self.len.load(Ordering::SeqCst) == 0 {
            return;
        }
        let taken = self.entries.with(|e| {
            self.len.store(0, Ordering::SeqCst);
            std::mem::take(e)
        });
        for (submission, task) in taken {
            submission.requeue(task);
        }
    }
}

/// Admit step 4 after a release of the budget's bytes by anyone.
impl ReleaseWatcher for Deferred {
    fn released(&self) {
        self.retry_all();
    }
}

/// What an admitted task holds while it runs: its reserved bytes and, for a
/// non-critical task, its worker slot. Dropping it returns both and bumps
/// the release epoch (admit step 4).
#[derive(Debug)]
#[must_use = "dropping the permit releases the admission at once"]
pub struct AdmissionPermit<'a> {
    admission: &'a Admission,
    reservation: Option<Reservation>,
    slot: Option<usize>,
    noncritical: Option<(Domain, usize)>,
}

impl AdmissionPermit<'_> {
    /// Bytes this permit holds in the budget.
    pub fn bytes(&self) -> usize {
        self.reservation.as_ref().map_or(0, Reservation::bytes)
    }

    /// Whether it holds a worker slot (a non-critical CPU or I/O task).
    pub fn holds_slot(&self) -> bool {
        self.slot.is_some()
    }
}

impl Drop for AdmissionPermit<'_> {
    fn drop(&mut self) {
        let granted = self.reservation.take().is_some();
        if let Some((domain, bytes)) = self.noncritical.take() {
            self.admission.noncritical[domain.index()].fetch_sub(bytes, Ordering::AcqRel);
            self.admission.noncritical[GLOBAL].fetch_sub(bytes, Ordering::AcqRel);
        }
        if let Some(i) = self.slot.take() {
            self.admission.running[i].fetch_sub(1, Ordering::AcqRel);
        }
        // Only a granted permit bumps the epoch (admit step 4). A refused
        // attempt's partial holds are undone silently: counters are taken in
        // one fixed order (slot, domain share, global share, budget), so a
        // task refused because of another attempt's partial hold is refused,
        // transitively, because of a granted permit, whose release comes
        // later and retries it. Bumping here would make a refused task retry
        // itself in a busy loop.
        if granted {
            self.admission.released.fetch_add(1, Ordering::SeqCst);
        }
    }
}
