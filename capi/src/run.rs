//! Runs: `onnxp_run` (blocking, hot path) and `onnxp_run_async` with its
//! [`OnnxpRunHandle`] (wait, readiness, cancel, status, a completion
//! callback).
//!
//! # The handle's protocol
//!
//! 1. `onnxp_run_async` lends the context to the run and registers a
//!    completion hook (`ExecutionHandle::on_complete`). The hook, on the
//!    thread that finishes the run, sets `ready`, calls the caller's
//!    callback (exactly once: the hook runs once), then sets `done` and
//!    wakes waiters: `wait` returns only after the callback returned, so
//!    the caller may free the user data then. The hook holds only that
//!    state (`Completion`), never the session: run on a worker, it must
//!    not drop the last reference to the session that owns the worker's
//!    pool.
//! 2. The Rust handle sits behind an `Arc` so that `cancel` and `status`
//!    call it with no lock held: the hook may run inside `cancel`, and a
//!    callback may call `status` on its own handle.
//! 3. `wait` blocks on `done`, then (under the `finished` lock, which
//!    serializes waiters) takes the Rust handle, waits for the last
//!    transient `Arc` clone to go, and finishes it: the context goes back
//!    to its `OnnxpContext` and the outcome is kept, so a second `wait`
//!    returns the same result.
//! 4. `release` of an unwaited handle is `wait`, its result dropped.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use onnx_prepared::RuntimeContext;
use onnx_prepared::session::{ExecutionHandle, Status};

use crate::arg;
use crate::context::{ContextState, OnnxpContext};
use crate::error::{OnnxpError, OnnxpErrorKind, Result, boundary, quiet};
use crate::out_arg;
use crate::session::OnnxpSession;

/// A completion callback: called exactly once with the `user_data` given
/// to `onnxp_run_async`, once the run has finished.
pub type OnnxpCompletionFn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// Where a run stands.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnnxpStatus {
    /// Still running (or waiting for weights).
    Running = 0,
    /// Finished; the outputs are in the context (once waited).
    Succeeded = 1,
    /// Failed; `onnxp_run_handle_wait` returns the error.
    Failed = 2,
    /// Cancelled before it finished.
    Cancelled = 3,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Checks that `context` belongs to `session`.
fn same_session(session: *const OnnxpSession, context: &OnnxpContext) -> Result<()> {
    if std::ptr::eq(Arc::as_ptr(&context.session), session) {
        Ok(())
    } else {
        Err(OnnxpError::invalid(
            "the context was made for another session",
        ))
    }
}

/// Gives a finished run's context back to `state` and turns its result
/// into the call's.
fn finish(
    state: &mut ContextState,
    session: &OnnxpSession,
    result: std::result::Result<RuntimeContext, onnx_prepared::session::ExecutionError>,
) -> Result<()> {
    match result {
        Ok(ctx) => {
            state.give_back(Some(ctx), session);
            Ok(())
        }
        Err(mut e) => {
            state.give_back(e.context.take().map(|c| *c), session);
            Err(e.into())
        }
    }
}

/// Runs the model on `context`'s inputs and returns once the outputs are
/// in `context` (read them with `onnxp_context_output`). A cold session
/// streams: the run starts while the weights load, each step once its own
/// weights are in. On failure the context keeps its inputs (after an
/// internal panic, reported as `ONNXP_ERROR_KIND_PANIC`, it comes back
/// empty).
///
/// Thread safety: any thread; runs on one session may overlap, each with
/// its own context. Calls on `context` from other threads wait for the run.
///
/// # Safety
/// `session` and `context` are NULL or live; `context` was made for
/// `session`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_run(
    session: *const OnnxpSession,
    context: *mut OnnxpContext,
) -> *mut OnnxpError {
    boundary(|| {
        // SAFETY: NULL or live (the caller's contract).
        let context = unsafe { arg(context, "context") }?;
        // SAFETY: NULL or live (the caller's contract).
        let s = unsafe { arg(session, "session") }?;
        same_session(session, context)?;
        let mut state = lock(&context.state);
        let ctx = state.lend()?;
        // A panic inside the run must not leave the context lent forever:
        // it comes back empty (its inputs are lost with the run).
        let result = match catch_unwind(AssertUnwindSafe(|| s.session.run(ctx))) {
            Ok(result) => result,
            Err(payload) => {
                state.give_back(None, s);
                return Err(OnnxpError::from_panic(&*payload));
            }
        };
        finish(&mut state, s, result)
    })
}

/// A user-data pointer carried to the thread that finishes the run.
struct UserData(*mut c_void);

// SAFETY: the pointer is only handed back to the caller's callback; the
// caller promised (onnxp_run_async) that the callback may use it on
// another thread.
unsafe impl Send for UserData {}

struct Shared {
    session: Arc<OnnxpSession>,
    state: Arc<Mutex<ContextState>>,
    /// The Rust handle until a `wait` takes it (protocol step 2).
    handle: Mutex<Option<Arc<ExecutionHandle<RuntimeContext>>>>,
    completion: Arc<Completion>,
    /// The outcome, once a `wait` finished the run (step 3).
    finished: Mutex<Option<Outcome>>,
}

/// What the completion hook touches (step 1). It holds no session: the
/// hook runs on a worker, and a worker must never drop the last reference
/// to the session whose pool it belongs to (dropping the pool joins it).
struct Completion {
    /// Set before the callback.
    ready: AtomicBool,
    /// Set once the callback returned.
    done: Mutex<bool>,
    wake: Condvar,
}

struct Outcome {
    status: OnnxpStatus,
    error: Option<OnnxpError>,
}

impl Shared {
    /// The Rust handle, while no `wait` has taken it (step 2).
    fn handle(&self) -> Option<Arc<ExecutionHandle<RuntimeContext>>> {
        lock(&self.handle).clone()
    }

    /// Step 3: blocks until the run finished; gives the context back once.
    fn wait(&self) -> Result<()> {
        let mut finished = lock(&self.finished);
        if finished.is_none() {
            let c = &self.completion;
            let mut done = lock(&c.done);
            while !*done {
                done = c.wake.wait(done).unwrap_or_else(|p| p.into_inner());
            }
            drop(done);
            let mut handle = lock(&self.handle)
                .take()
                .expect("taken only under `finished`, which records the outcome");
            // Transient clones (a `cancel` or `status` still returning)
            // go away quickly: the run is over.
            let handle = loop {
                match Arc::try_unwrap(handle) {
                    Ok(h) => break h,
                    Err(h) => {
                        handle = h;
                        std::thread::yield_now();
                    }
                }
            };
            let status = match handle.status() {
                Status::Succeeded => OnnxpStatus::Succeeded,
                Status::Cancelled => OnnxpStatus::Cancelled,
                Status::Failed(_) | Status::Running => OnnxpStatus::Failed,
            };
            let result = handle.wait();
            let result = finish(&mut lock(&self.state), &self.session, result);
            let status = match &result {
                Err(e) if e.kind() == OnnxpErrorKind::Cancelled => OnnxpStatus::Cancelled,
                Err(_) if status == OnnxpStatus::Succeeded => OnnxpStatus::Failed,
                _ => status,
            };
            *finished = Some(Outcome {
                status,
                error: result.err(),
            });
        }
        match finished.as_ref().and_then(|o| o.error.clone()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// An asynchronous run (`onnxp_run_async`): wait for it, poll it, cancel
/// it, read its status. Free it with `onnxp_run_handle_release`.
pub struct OnnxpRunHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for OnnxpRunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxpRunHandle")
            .field(
                "ready",
                &self.shared.completion.ready.load(Ordering::Acquire),
            )
            .finish_non_exhaustive()
    }
}

/// Starts a run on `context`'s inputs and writes its handle to `*out` at
/// once; the context is lent to the run until the handle is waited or
/// released (calls on it answer `ONNXP_ERROR_KIND_BUSY` meanwhile). Never
/// waits for weights: a cold session streams them in as the run goes.
///
/// When `callback` is not NULL it is called exactly once with `user_data`
/// when the run finishes (succeeded, failed or cancelled), on the thread
/// that finishes it: a runtime worker thread; or the thread calling this
/// function when the run finished before it returned; or one calling
/// `onnxp_run_handle_cancel` that cancelled the run before it started.
/// When it is called, `onnxp_run_handle_is_ready` reads true;
/// `onnxp_run_handle_wait` (and `onnxp_run_handle_release`) return only
/// after it has returned, so `user_data` may be freed then. It runs inside
/// the runtime's completion path: it must not block (no wait on this or
/// another run: signal a condition variable, post to a queue), must not
/// release a session, context or run handle (the last release of a
/// session joins the runtime's threads, possibly the one calling back),
/// and `user_data` must be usable on that thread. `*out` is written
/// before the callback can run: a callback may read the handle from
/// where `out` pointed (e.g. to call `onnxp_run_handle_status`).
///
/// Thread safety: as `onnxp_run`.
///
/// # Safety
/// `session` and `context` are NULL or live; `context` was made for
/// `session`; `out` is NULL or valid for a write; `callback`, when not
/// NULL, may be called with `user_data` on any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_run_async(
    session: *const OnnxpSession,
    context: *mut OnnxpContext,
    callback: OnnxpCompletionFn,
    user_data: *mut c_void,
    out: *mut *mut OnnxpRunHandle,
) -> *mut OnnxpError {
    boundary(|| {
        out_arg(out, "out")?;
        // SAFETY: NULL or live (the caller's contract).
        let context = unsafe { arg(context, "context") }?;
        // SAFETY: NULL or live (the caller's contract).
        let s = unsafe { arg(session, "session") }?;
        same_session(session, context)?;
        let ctx = lock(&context.state).lend()?;
        let handle = Arc::new(s.session.run_async(ctx));
        let completion = Arc::new(Completion {
            ready: AtomicBool::new(false),
            done: Mutex::new(false),
            wake: Condvar::new(),
        });
        let shared = Arc::new(Shared {
            session: context.session.clone(),
            state: context.state.clone(),
            handle: Mutex::new(Some(handle.clone())),
            completion: completion.clone(),
            finished: Mutex::new(None),
        });
        // The handle reaches the caller before the callback can run (it
        // may run at once, here, when the run finished already): a
        // callback that reads `*out` finds it written.
        let boxed = Box::new(OnnxpRunHandle { shared });
        // SAFETY: checked non-NULL; valid for a write (the caller's contract).
        unsafe { out.write(Box::into_raw(boxed)) };
        let hook = completion;
        let user_data = UserData(user_data);
        handle.on_complete(move || {
            let user_data = user_data;
            hook.ready.store(true, Ordering::Release);
            if let Some(callback) = callback {
                // SAFETY: the caller's callback with its user data, called
                // once (the hook runs once); a C function cannot unwind.
                unsafe { callback(user_data.0) };
            }
            // Only now may `wait` return: the caller may free the user data
            // once it has.
            *lock(&hook.done) = true;
            hook.wake.notify_all();
        });
        drop(handle);
        Ok(())
    })
}

/// # Safety
/// `handle` is NULL or live.
unsafe fn handle_arg<'a>(handle: *const OnnxpRunHandle) -> Result<&'a Shared> {
    // SAFETY: the caller's contract.
    Ok(&unsafe { arg(handle, "handle") }?.shared)
}

/// Blocks until the run finished and gives the context its state back:
/// NULL when the run succeeded (the outputs are in the context), else the
/// run's error (`ONNXP_ERROR_KIND_CANCELLED` when cancelled), the context
/// keeping its inputs. Waiting again returns the same result.
///
/// Thread safety: any thread; concurrent waits on one handle all return
/// the result.
///
/// # Safety
/// `handle` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_run_handle_wait(handle: *mut OnnxpRunHandle) -> *mut OnnxpError {
    boundary(|| {
        // SAFETY: NULL or live (the caller's contract).
        unsafe { handle_arg(handle) }?.wait()
    })
}

/// Writes whether the run has finished to `*ready` (`onnxp_run_handle_wait`
/// then blocks at most until the completion callback returns).
///
/// Thread safety: any thread, at any time, the completion callback
/// included.
///
/// # Safety
/// `handle` is NULL or live; `ready` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_run_handle_is_ready(
    handle: *const OnnxpRunHandle,
    ready: *mut bool,
) -> *mut OnnxpError {
    boundary(|| {
        out_arg(ready, "ready")?;
        // SAFETY: NULL or live (the caller's contract).
        let shared = unsafe { handle_arg(handle) }?;
        // SAFETY: checked non-NULL; valid for a write (the caller's contract).
        unsafe { ready.write(shared.completion.ready.load(Ordering::Acquire)) };
        Ok(())
    })
}

/// Cancels the run: steps that have not started never run, a run waiting
/// for weights ends at once; `onnxp_run_handle_wait` then returns an
/// `ONNXP_ERROR_KIND_CANCELLED` error (or the run's result, when it
/// finished first). Weight loading shared with other runs goes on for
/// them. Idempotent.
///
/// Thread safety: any thread, at any time, concurrently with `wait`.
///
/// # Safety
/// `handle` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_run_handle_cancel(handle: *mut OnnxpRunHandle) -> *mut OnnxpError {
    boundary(|| {
        // SAFETY: NULL or live (the caller's contract).
        let shared = unsafe { handle_arg(handle) }?;
        if let Some(h) = shared.handle() {
            h.cancel();
        }
        Ok(())
    })
}

/// Writes where the run stands to `*status`.
///
/// Thread safety: any thread, at any time, the completion callback
/// included.
///
/// # Safety
/// `handle` is NULL or live; `status` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_run_handle_status(
    handle: *const OnnxpRunHandle,
    status: *mut OnnxpStatus,
) -> *mut OnnxpError {
    boundary(|| {
        out_arg(status, "status")?;
        // SAFETY: NULL or live (the caller's contract).
        let shared = unsafe { handle_arg(handle) }?;
        let now = match shared.handle() {
            Some(h) => match h.status() {
                Status::Running => OnnxpStatus::Running,
                Status::Succeeded => OnnxpStatus::Succeeded,
                Status::Failed(_) => OnnxpStatus::Failed,
                Status::Cancelled => OnnxpStatus::Cancelled,
            },
            // Taken by a wait, which records the outcome before it lets go
            // of `finished`.
            None => lock(&shared.finished)
                .as_ref()
                .map_or(OnnxpStatus::Running, |o| o.status),
        };
        // SAFETY: checked non-NULL; valid for a write (the caller's contract).
        unsafe { status.write(now) };
        Ok(())
    })
}

/// Frees `handle`. NULL is a no-op. A run not waited yet is waited first
/// (this blocks until it finishes: cancel it first to end it sooner), and
/// its context gets its state back.
///
/// Thread safety: once per handle, when no other call on it is running.
///
/// # Safety
/// `handle` is NULL or made by `onnxp_run_async` and not released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_run_handle_release(handle: *mut OnnxpRunHandle) {
    quiet(|| {
        if !handle.is_null() {
            // SAFETY: made by `Box::into_raw` in `onnxp_run_async`, released
            // once (the caller's contract).
            let handle = unsafe { Box::from_raw(handle) };
            let _ = handle.shared.wait();
        }
    });
}
