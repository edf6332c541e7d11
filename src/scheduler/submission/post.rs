//! Getting ready tasks into the queues: post-ready (steps 2–3), the
//! look-ahead window's release of gated tasks (window steps 1–4), the
//! roots of a (re)submission and the promote protocol (steps 1–3).
//! Hot path: `post`, `push` and `fire_dependents`, once per task.

use crate::scheduler::{Priority, TaskId};
use crate::sync::{Ordering, fence};

use super::{CLAIMED_ENTRY, SubmissionInner, WindowState};
use crate::scheduler::lanes::Lanes;
use crate::scheduler::local::LocalWork;
use crate::scheduler::queue::Lane;
use crate::scheduler::task_state::{DependencyDone, FireClaim, TaskSnapshot};
use crate::scheduler::window::Offer;

impl SubmissionInner {
    /// The priority `task` is queued and admitted at: critical once
    /// promoted (promote step 3), else its graph priority.
    pub(super) fn priority(&self, task: TaskId, snapshot: TaskSnapshot) -> Priority {
        if snapshot.is_promoted() {
            Priority::Critical
        } else {
            self.graph.priority(task)
        }
    }

    /// Post-ready step 2: enqueue a fired task at its priority, then wake
    /// one sleeper of its lane.
    pub(in crate::scheduler) fn post(&self, lanes: &Lanes, task: TaskId) {
        // Read after the caller's decrement of the same word (or after the
        // task's deferral): promote step 3.
        let snapshot = self.states[task.0 as usize].snapshot();
        self.push(lanes, task, self.priority(task, snapshot));
    }

    /// Enqueues `task` at `priority`, then runs sleep/wake step 2.
    pub(super) fn push(&self, lanes: &Lanes, task: TaskId, priority: Priority) {
        if !self.registered.load(Ordering::Acquire) {
            self.register_lazily();
        }
        let lane = self.graph.lane(TaskId(task.0 & !CLAIMED_ENTRY));
        self.queues
            .push(lane, priority, task)
            .expect("ready queues hold two entries per task: one from firing, one from promotion");
        // Sleep/wake step 2: the push is ordered before the sleeper check.
        fence(Ordering::SeqCst);
        lanes.wake_one(lane);
    }

    /// A quiet resubmit registers on its first queued task (once per
    /// round: kept out of `push`'s inlined body).
    #[cold]
    #[inline(never)]
    fn register_lazily(&self) {
        if let Some(me) = self.this.upgrade()
            && let Some(pool) = self.pool.upgrade()
        {
            pool.register(&me, false);
        }
    }

    /// The distance of `task` if this submission's window gates it.
    pub(super) fn gated(&self, task: TaskId) -> Option<u32> {
        self.window.as_ref().and_then(|_| self.graph.distance(task))
    }

    /// Whether a fired `task` may be queued now (window step 1): ungated,
    /// or released by the window (else it is held, or already finished
    /// through a promoted entry).
    pub(super) fn release(&self, task: TaskId) -> bool {
        match (self.gated(task), &self.window) {
            (Some(distance), Some(window)) => {
                window.offer(task, distance, self.graph.estimated_bytes(task)) == Offer::Released
            }
            _ => true,
        }
    }

    /// Post-ready for a task that just fired: through the window, then
    /// [`SubmissionInner::post`].
    pub(super) fn fire(&self, lanes: &Lanes, task: TaskId) {
        if self.release(task) {
            self.post(lanes, task);
        }
    }

    /// Window steps 2 and 4: posts the held tasks that fit now.
    pub(super) fn release_held(&self, lanes: &Lanes) {
        if let Some(window) = &self.window {
            let graph = &self.graph;
            for t in window.release_held(
                |t| graph.distance(t).unwrap_or(0),
                |t| graph.estimated_bytes(t),
            ) {
                self.post(lanes, t);
            }
        }
    }

    /// A gated task reached its terminal state: its bytes leave the
    /// window's in-flight count. Returns whether held tasks may fit now.
    pub(super) fn window_finished(&self, task: TaskId) -> bool {
        match (self.gated(task), &self.window) {
            (Some(_), Some(window)) => window.finished(task, self.graph.estimated_bytes(task)),
            _ => false,
        }
    }

    /// Whether the roots were left to the waiter, clearing the mark (a plain
    /// load first: most waits find nothing to take).
    pub(super) fn take_pending_roots(&self) -> bool {
        self.roots_pending.load(Ordering::Acquire)
            && self.roots_pending.swap(false, Ordering::AcqRel)
    }

    /// A quiet resubmit leaves the roots to the waiter.
    pub(in crate::scheduler) fn defer_roots(&self) {
        self.roots_pending.store(true, Ordering::Release);
    }

    /// Posts every task without dependencies (submit step 2; no wake-up).
    pub(in crate::scheduler) fn post_roots(&self) {
        for task in self.graph.roots() {
            if self.release(task) {
                self.queues
                    .push(self.graph.lane(task), self.graph.priority(task), task)
                    .expect("a queue holds every task of its lane twice");
            }
        }
    }

    /// Window step 2: the invocation reached `step`.
    pub(in crate::scheduler) fn advance(&self, lanes: &Lanes, step: u32) {
        if let Some(window) = &self.window {
            window.advance(step);
            self.release_held(lanes);
        }
    }

    /// Window step 3: the invocation waited on I/O.
    pub(in crate::scheduler) fn stalled(&self, lanes: &Lanes) {
        if let Some(window) = &self.window {
            window.stalled();
            self.release_held(lanes);
        }
    }

    pub(super) fn window_state(&self) -> Option<WindowState> {
        self.window.as_ref().map(|w| WindowState {
            frontier: w.frontier(),
            distance: w.distance(),
            bytes_in_flight: w.in_flight(),
        })
    }

    /// Promote protocol (steps 1–3): marks `task` and its unfinished
    /// transitive dependencies promoted and pushes each one that is ready
    /// but unclaimed into its lane's critical queue. Returns how many were
    /// pushed.
    pub(in crate::scheduler) fn promote(&self, lanes: &Lanes, task: TaskId) -> usize {
        let mut pushed = 0;
        let mut stack = vec![task];
        while let Some(t) = stack.pop() {
            let before = self.states[t.0 as usize].promote();
            if before.is_promoted() || before.is_claimed() || before.is_cancelled() {
                // Step 2: its promoter walks on from it, or it is running,
                // done or will never run (and so are all its producers).
                continue;
            }
            if before.remaining() == 0 {
                // Step 3: fired before our mark, so its poster may have
                // queued it at its own priority; queue it again as critical.
                self.push(lanes, t, Priority::Critical);
                pushed += 1;
            } else {
                stack.extend_from_slice(self.graph.dependencies(t));
            }
        }
        pushed
    }

    /// Post-ready step 2 for every dependent of the completed `task`: the
    /// first critical one this worker may run is claimed as it fires (its
    /// continuation); further ones are kept unclaimed (claimed too when the
    /// worker is alone on its lane) unless a peer is searching or the
    /// buffer is full; the rest are posted.
    pub(super) fn fire_dependents(&self, lanes: &Lanes, task: TaskId, local: &mut LocalWork) {
        // Claim-on-fire skips admission, so only without it.
        let claiming = self.admission.is_none();
        let mut continuation = None;
        for &d in self.graph.dependents(task) {
            let lane = self.graph.lane(d);
            let keep = local.accepts(lane)
                && self.graph.priority(d) == Priority::Critical
                && local.has_room()
                && self.gated(d).is_none();
            let state = &self.states[d.0 as usize];
            if keep
                && claiming
                && (continuation.is_none() || (local.exclusive && lane != Lane::Inline))
            {
                match state.dependency_done_claiming() {
                    FireClaim::FiredClaimed if continuation.is_none() => continuation = Some(d),
                    FireClaim::FiredClaimed => local.tasks.push(d.0 | CLAIMED_ENTRY),
                    FireClaim::Fired => self.fire(lanes, d),
                    FireClaim::Pending => {}
                }
                continue;
            }
            if let DependencyDone::Fired = state.dependency_done() {
                if keep && !lanes.searching(lane) {
                    local.tasks.push(d.0);
                } else {
                    self.fire(lanes, d);
                }
            }
        }
        if let Some(d) = continuation {
            // Last in, first out: the continuation runs next.
            local.tasks.push(d.0 | CLAIMED_ENTRY);
        }
    }
}
