//! The intended auto traits of the public session and scheduler types: a
//! session and its handles cross threads; a context moves into a run and
//! back; scheduler handles are shared freely.

use onnx_prepared::exec::{PreparedExecutionState, SessionTasks};
use onnx_prepared::scheduler::{CancelToken, ResumeHandle, Submission, TaskGraph, WorkerPool};
use onnx_prepared::session::{
    ExecutionError, ExecutionHandle, RuntimeContext, RuntimeSession, Trace,
};

fn send<T: Send>() {}
fn sync<T: Sync>() {}

#[test]
fn session_types() {
    send::<RuntimeSession>();
    sync::<RuntimeSession>();
    send::<RuntimeContext>();
    sync::<RuntimeContext>();
    send::<ExecutionHandle<RuntimeContext>>();
    sync::<ExecutionHandle<RuntimeContext>>();
    send::<ExecutionHandle<()>>();
    send::<ExecutionError>();
    sync::<ExecutionError>();
    send::<Trace>();
    sync::<Trace>();
    send::<PreparedExecutionState>();
    sync::<PreparedExecutionState>();
    send::<SessionTasks<'static>>();
    sync::<SessionTasks<'static>>();
}

#[test]
fn scheduler_types() {
    send::<WorkerPool>();
    sync::<WorkerPool>();
    send::<Submission>();
    sync::<Submission>();
    send::<CancelToken>();
    sync::<CancelToken>();
    send::<ResumeHandle>();
    sync::<ResumeHandle>();
    send::<TaskGraph>();
    sync::<TaskGraph>();
}
