//! Tests of the model layer: metadata-only loading, external data, payload sources, checksums, resolution.

#[path = "../support/mod.rs"]
mod support;

mod attributes;
mod checksums;
mod dynamic_int8;
mod external_data;
mod gelu_chain;
mod handles;
mod hostile_files;
mod outputs;
mod payload_faults;
mod qdq;
mod qdq_max_pool;
mod tiny_llm;
