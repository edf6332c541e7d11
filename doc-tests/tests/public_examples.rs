//! Every rustdoc example of the library compiles against its public API:
//! `cargo test --doc -p onnx-prepared` builds the library with the
//! `internals` feature (its own tests need it), so an example that named an
//! internal module would pass there and fail for a user. This test reads the
//! examples out of `src/` and refuses any that names one — the modules the
//! feature makes public, or the `internals()` accessor.

use std::path::Path;

const INTERNAL: [&str; 7] = [
    "onnx_prepared::arena",
    "onnx_prepared::exec",
    "onnx_prepared::prepare",
    "onnx_prepared::scheduler",
    "onnx_prepared::store",
    "onnx_prepared::sync",
    ".internals()",
];

/// `(file, line, text)` of every line inside a ```` ``` ```` block of a
/// doc comment under `dir`.
fn example_lines(dir: &Path, out: &mut Vec<(String, usize, String)>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            example_lines(&path, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a source file");
        // `None` outside a fenced block; `Some(true)` inside a Rust one.
        let mut block: Option<bool> = None;
        for (n, line) in text.lines().enumerate() {
            let t = line.trim_start();
            let Some(doc) = t.strip_prefix("///").or_else(|| t.strip_prefix("//!")) else {
                block = None;
                continue;
            };
            let doc = doc.trim_start();
            if let Some(lang) = doc.strip_prefix("```") {
                block = match block {
                    Some(_) => None,
                    None => Some(lang.is_empty() || lang.starts_with("rust")),
                };
                continue;
            }
            if block == Some(true) {
                out.push((path.display().to_string(), n + 1, doc.to_owned()));
            }
        }
    }
}

#[test]
fn rustdoc_examples_name_only_the_public_api() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
    let mut lines = Vec::new();
    example_lines(&src, &mut lines);
    assert!(
        lines.iter().any(|(_, _, l)| l.contains("RuntimeSession")),
        "the scan found the library's examples"
    );
    let bad: Vec<String> = lines
        .iter()
        .filter(|(_, _, l)| INTERNAL.iter().any(|i| l.contains(i)))
        .map(|(f, n, l)| format!("{f}:{n}: {l}"))
        .collect();
    assert!(
        bad.is_empty(),
        "examples naming internal modules:\n{}",
        bad.join("\n")
    );
}
