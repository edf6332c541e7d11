//! Tests of the prepared cache: reuse by a second session, corruption of every kind, real exported models.

#[path = "../support/mod.rs"]
mod support;

mod corruption;
mod real_models;
mod reuse;
mod trust;
