//! DirectReplay: typed input errors, re-lowering on new shapes, shared
//! weights packed per layout, and a hot path that allocates nothing per node.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;

use onnx_prepared::error::{ResolveError, RunError};
use onnx_prepared::exec::{DirectReplay, DirectReplayOptions};
use onnx_prepared::model::{FileSource, Model, PayloadSource};
use onnx_prepared::{Error, ErrorKind};
use onnx_prepared_kernels::{CpuFeatures, Tensor};
use support::fixture;

/// Counts allocations made by the current thread (other test threads do not
/// disturb the count).
struct CountingAlloc;

thread_local! {
    // A plain thread-local counter; the loom seam is irrelevant to a test allocator.
    #[allow(clippy::disallowed_types)]
    static ALLOCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a thread-local Cell, touched without allocating.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(|c| c.get());
    f();
    ALLOCS.with(|c| c.get()) - before
}

fn replay(name: &str, threads: usize) -> DirectReplay {
    let model = Model::open(fixture(name)).unwrap();
    let source = FileSource::open(&model).unwrap();
    DirectReplay::new(
        &model,
        Arc::new(source),
        DirectReplayOptions {
            threads,
            cpu: CpuFeatures::detect(),
            ..DirectReplayOptions::default()
        },
    )
    .unwrap()
}

fn ramp(shape: Vec<usize>) -> Tensor {
    let n = shape.iter().product::<usize>();
    Tensor::from_f32(
        shape,
        (0..n).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect(),
    )
    .unwrap()
}

/// Allocations of one hot run, after checking every hot run allocates the same.
fn allocations_per_hot_run(name: &str, input: &str, x: &Tensor) -> u64 {
    let mut r = replay(name, 1);
    let inputs = [(input, x)];
    r.run(&inputs).unwrap(); // lowers
    let one = allocations_during(|| drop(r.run(&inputs).unwrap()));
    let hundred = allocations_during(|| {
        for _ in 0..100 {
            drop(r.run(&inputs).unwrap());
        }
    });
    assert_eq!(
        hundred,
        100 * one,
        "{name}: a hot run allocates the same every time"
    );
    one
}

#[test]
fn hot_runs_allocate_nothing_per_node() {
    // 256 nodes and 1 node, one output each: the same allocations per run
    // (the returned output and the per-run input check), none per node.
    let chain = allocations_per_hot_run("many-small-nodes", "x", &ramp(vec![1, 16]));
    let single = allocations_per_hot_run("gemm-transb1", "A", &ramp(vec![1, 256]));
    assert_eq!(chain, single);
    assert!(chain <= 5, "{chain} allocations per run");
}

#[test]
fn input_errors_name_the_input() {
    let mut r = replay("gemm-transb1", 1);
    let good = ramp(vec![2, 256]);
    let err = Error::from(r.run(&[]).unwrap_err());
    assert!(
        matches!(&err, Error::Run(RunError::MissingInput { input }) if input == "A"),
        "{err}"
    );
    let err = Error::from(r.run(&[("A", &good), ("B", &good)]).unwrap_err());
    assert!(
        matches!(&err, Error::Run(RunError::UnknownInput { input }) if input == "B"),
        "{err}"
    );
    let ints = Tensor::from_i64(vec![2, 256], vec![0; 512]).unwrap();
    let err = Error::from(r.run(&[("A", &ints)]).unwrap_err());
    assert!(
        matches!(&err, Error::Run(RunError::InputType { input, .. }) if input == "A"),
        "{err}"
    );
    let wrong = ramp(vec![2, 255]);
    let err = Error::from(r.run(&[("A", &wrong)]).unwrap_err());
    assert!(
        matches!(&err, Error::Run(RunError::InputShape { input, .. }) if input == "A"),
        "{err}"
    );
    assert_eq!(err.kind(), ErrorKind::Input);
    assert!(err.to_string().contains("`A`"));
}

#[test]
fn new_shapes_are_lowered_again_and_agree_row_by_row() {
    let mut r = replay("gemm-chain", 1);
    let four = ramp(vec![4, 256]);
    let y4 = r.run(&[("A", &four)]).unwrap().remove(0).1;
    assert_eq!(y4.shape(), &[4, 256]);
    // Row 0 alone (batch 1) equals row 0 of the batch of four.
    let one = Tensor::from_f32(vec![1, 256], four.as_f32().unwrap()[..256].to_vec()).unwrap();
    let y1 = r.run(&[("A", &one)]).unwrap().remove(0).1;
    assert_eq!(y1.shape(), &[1, 256]);
    let (a, b) = (&y4.as_f32().unwrap()[..256], y1.as_f32().unwrap());
    let scale = a.iter().fold(0f32, |m, x| m.max(x.abs()));
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-5 * scale.max(1.0), "{x} vs {y}");
    }
}

#[test]
fn one_weight_read_by_two_layouts_packs_twice() {
    let mut r = replay("gemm-shared-weight", 1);
    let a = ramp(vec![2, 256]);
    let out = r.run(&[("A", &a)]).unwrap();
    assert_eq!(out.len(), 2);
    let layouts = r.packed_layouts();
    assert_eq!(layouts.len(), 2, "{layouts:?}");
    assert_ne!(
        layouts[0].1, layouts[1].1,
        "transB=0 and transB=1 pack differently"
    );
}

/// The load goes through the one producer of prepared objects: the weight
/// both packed layouts are built from is read once, not once per layout.
#[test]
fn a_weight_two_requirements_share_is_read_once() {
    let model = Model::open(fixture("gemm-shared-weight")).unwrap();
    let source: Arc<dyn PayloadSource> = Arc::new(FileSource::open(&model).unwrap());
    let r = DirectReplay::new(&model, source.clone(), DirectReplayOptions::default()).unwrap();
    assert_eq!(r.packed_layouts().len(), 2);
    let external = model.external_bytes();
    assert!(external > 0);
    assert_eq!(source.counters().total(), external, "each weight read once");
}

#[test]
fn threads_do_not_change_results() {
    let a = ramp(vec![3, 256]);
    let one = replay("gemm-chain", 1).run(&[("A", &a)]).unwrap();
    let two = replay("gemm-chain", 2).run(&[("A", &a)]).unwrap();
    assert_eq!(one, two);
}

#[test]
fn unsupported_operators_are_listed_together() {
    use onnx_prepared::model::proto::{
        GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TypeProto, ValueInfoProto,
        type_proto,
    };
    let value = |name: &str| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(1),
                shape: None,
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let node = |name: &str, domain: &str, op: &str, input: &str, output: &str| NodeProto {
        name: Some(name.into()),
        domain: Some(domain.into()),
        op_type: Some(op.into()),
        input: vec![input.into()],
        output: vec![output.into()],
        ..Default::default()
    };
    let opset = |domain: &str, version| OperatorSetIdProto {
        domain: Some(domain.into()),
        version: Some(version),
    };
    // Two DFT nodes, a supported Neg between them, and a
    // custom-domain operator: every unsupported one is reported, with counts.
    let model = ModelProto {
        ir_version: Some(11),
        opset_import: vec![opset("", 23), opset("com.example", 1)],
        graph: Some(GraphProto {
            node: vec![
                node("fft0", "", "DFT", "x", "a"),
                node("neg", "", "Neg", "a", "b"),
                node("fft1", "", "DFT", "b", "c"),
                node("custom", "com.example", "Frobnicate", "c", "y"),
            ],
            input: vec![value("x")],
            output: vec![value("y")],
            ..Default::default()
        }),
        ..Default::default()
    };
    let dir = support::tempdir();
    let path = dir.path().join("dft.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let model = Model::open(&path).unwrap();
    let source = FileSource::open(&model).unwrap();
    let err = Error::from(
        DirectReplay::new(&model, Arc::new(source), DirectReplayOptions::default()).unwrap_err(),
    );
    let Error::Resolve(ResolveError::UnsupportedOperators(ops)) = &err else {
        panic!("expected UnsupportedOperators, got {err}");
    };
    let listed: Vec<(&str, &str, i64, usize, &str)> = ops
        .iter()
        .map(|o| {
            (
                o.domain.as_str(),
                o.op_type.as_str(),
                o.opset,
                o.nodes,
                o.first_node.as_str(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("ai.onnx", "DFT", 23, 2, "fft0"),
            ("com.example", "Frobnicate", 1, 1, "custom")
        ]
    );
    let message = err.to_string();
    assert!(
        message.contains("ai.onnx::DFT (opset 23): 2 nodes"),
        "{message}"
    );
    assert!(
        message.contains("com.example::Frobnicate (opset 1): 1 node"),
        "{message}"
    );
}
