//! onnx-prepared: an ONNX runtime whose first inference starts before the model
//! has finished loading.
//!
//! Modules and their dependency directions (data flows top to bottom):
//!
//! * [`sync`] — the only place that names atomics, cells, locks and threads
//!   (`std` normally, `loom` under `cfg(loom)`); depends on nothing.
//! * [`model`] — ONNX protobuf, metadata-only loading, external-data
//!   validation and payload reading; depends on `sync` and `error`.
//! * [`error`], [`limits`] — the public error type and every capacity.
//!
//! Later modules (`plan`, `state`, `scheduler`, `store`, `arena`, `cache`,
//! `session`) follow ARCHITECTURE.md: the scheduler knows tasks only as ids and
//! never ONNX; `session` depends on everything.
//!
//! ```no_run
//! use onnx_prepared::model::{FileSource, Model, PayloadSource};
//!
//! let model = Model::open("target/fixtures/tiny-llm.onnx")?; // reads no weight bytes
//! let source = FileSource::open(&model)?;
//! let weight = model.weight_by_name("layer0.qkv.weight").expect("present");
//! let mut buf = vec![0u8; weight.byte_len() as usize];
//! source.read(weight.id(), &mut buf)?;
//! weight.verify_checksum(&buf)?;
//! # Ok::<(), onnx_prepared::Error>(())
//! ```

pub mod arena;
pub mod decoder;
pub mod error;
pub mod limits;
pub mod model;
pub mod npz;
pub mod plan;
pub mod scheduler;
pub mod session;
pub mod state;
pub mod store;
pub mod sync;

pub use error::{Error, ErrorKind};
