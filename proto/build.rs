//! Nothing to build: this script exists so that `syn`, a build-dependency
//! of this crate, is resolved with the features listed in Cargo.toml (see
//! the comment there).

fn main() {}
