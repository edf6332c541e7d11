//! Tests of the engine underneath the session: scheduler, plan, lowering, preparation, residency, arenas (through the `internals` feature).

#[path = "../support/mod.rs"]
mod support;

mod arena_accounting;
mod exec_lowering;
mod exec_session_tasks;
mod plan_build;
mod plan_sequential;
mod prepare_pieces;
mod prepare_residency_limit;
mod prepare_residency_stress;
mod prepare_resident_tables;
mod prepare_rows;
mod scheduler_admission;
mod scheduler_admission_retry;
mod scheduler_failure;
mod scheduler_pool;
mod scheduler_promote;
mod scheduler_suspend;
mod scheduler_window;
