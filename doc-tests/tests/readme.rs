//! The README's Rust quick start is `examples/quickstart.rs` byte for
//! byte, and it runs: on the fixture model it names, in a folder of its
//! own, it prints the output's shape.

mod quickstart {
    include!("../examples/quickstart.rs");

    pub fn run() -> Result<(), Error> {
        main()
    }
}

#[test]
fn the_readme_quick_start_is_the_example() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md beside the workspace");
    let blocks: Vec<&str> = readme
        .split("```rust\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap_or(b))
        .collect();
    assert_eq!(
        blocks.len(),
        1,
        "the README has one Rust block, the quick start"
    );
    assert_eq!(blocks[0], include_str!("../examples/quickstart.rs"));
}

#[test]
fn the_quick_start_runs_on_its_fixture() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let fixture = onnx_prepared_fixtures::fixture_by_name("gemm-chain").expect("a fixture");
    onnx_prepared_fixtures::write_fixture(
        dir.path(),
        &fixture,
        onnx_prepared_fixtures::WriteMode::Verify,
    )
    .expect("gemm-chain written");
    // The example opens `gemm-chain.onnx` from the working directory, as
    // after `cd target/fixtures`. This test binary has no other test that
    // depends on the working directory.
    std::env::set_current_dir(dir.path()).expect("into the fixture folder");
    quickstart::run().expect("the quick start runs");
}
