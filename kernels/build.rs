//! Build identity of the packers: a hash of every source file of this
//! crate, exported as `ONNX_PREPARED_KERNELS_SOURCE_HASH`. The prepared
//! cache puts it in each entry's kernel ABI, so an object packed by a
//! build with other kernel sources is never taken for one of this build's
//! (a change anywhere in the kernels invalidates, which is conservative).

use std::hash::{DefaultHasher, Hasher};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(list) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in list.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let src = root.join("src");
    println!("cargo::rerun-if-changed=src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut h = DefaultHasher::new();
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap_or(f);
        h.write(rel.to_string_lossy().as_bytes());
        h.write(&std::fs::read(f).unwrap_or_default());
    }
    println!(
        "cargo::rustc-env=ONNX_PREPARED_KERNELS_SOURCE_HASH={:016x}",
        h.finish()
    );
}
