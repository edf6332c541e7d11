//! Tests of the public API: sessions, contexts, handles, decoder conventions, zero-copy inputs and outputs.

#[path = "../support/mod.rs"]
mod support;

mod decoder;
mod real_models;
mod send_sync;
mod session;
mod session_cancel_leak;
mod session_on_complete;
mod session_open;
mod session_prepare_resident;
mod session_wait_ready;
mod zero_copy;
