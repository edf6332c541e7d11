//! The operators. Each family owns its lookup; each operator has a scalar
//! reference path that is the oracle for its fast kernels.

pub mod basic;
pub mod linalg;
