//! The C API's hot-path overhead: `onnxp_run` against `RuntimeSession::run`
//! on one-node (one Relu on f32[1, 16]: the fixed cost of a run), same
//! process, same options (one CPU worker, one I/O worker), both sessions
//! prepared and warmed up outside the measured loops.
//!
//! * `run`: the input stays set; each iteration is one whole run.
//! * `set_input + run`: each iteration first sets the input from caller
//!   memory (Rust: a new `Tensor` from a `Vec`; C: `onnxp_context_set_input`,
//!   a copy).
//!
//! Rounds alternate which API goes first; each round times a batch of
//! calls per API. Printed per API: the median over rounds of the per-call
//! time and the median of the per-round differences (C minus Rust); the
//! fastest round of each and their difference (the least disturbed by
//! other load on the machine).
//! Run: `cargo bench -p onnx-prepared-capi --bench run_overhead`.

use std::hint::black_box;
use std::ptr;
use std::time::Instant;

use onnx_prepared::model::proto::tensor_proto::DataType;
use onnx_prepared::model::proto::{
    GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto,
    ValueInfoProto, tensor_shape_proto, type_proto,
};
use onnx_prepared::{RuntimeContext, RuntimeSession, SessionOptions, Tensor};
use onnx_prepared_capi::OnnxpElementType;
use onnx_prepared_capi::context::{
    onnxp_context_create, onnxp_context_release, onnxp_context_set_input,
};
use onnx_prepared_capi::options::{
    onnxp_options_create, onnxp_options_release, onnxp_options_set_io_workers,
    onnxp_options_set_workers,
};
use onnx_prepared_capi::run::onnxp_run;
use onnx_prepared_capi::session::{
    onnxp_session_open, onnxp_session_prepare, onnxp_session_release,
};

const ROUNDS: usize = 31;
const BATCH: usize = 5_000;

/// A model of one Relu on `x: f32[1, 16]`, written into `dir`.
fn one_node(dir: &std::path::Path) -> std::path::PathBuf {
    let value = |name: &str| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: Some(TensorShapeProto {
                    dim: [1, 16]
                        .map(|d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                            ..Default::default()
                        })
                        .to_vec(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            name: Some("one-node".into()),
            node: vec![NodeProto {
                op_type: Some("Relu".into()),
                input: vec!["x".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            input: vec![value("x")],
            output: vec![value("y")],
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.join("one-node.onnx");
    std::fs::write(&path, model.encode_to_vec()).expect("writes");
    path
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Nanoseconds per call of `f` over one batch.
fn per_call(mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..BATCH {
        f();
    }
    start.elapsed().as_nanos() as f64 / BATCH as f64
}

fn report(name: &str, rust: &mut [f64], c: &mut [f64]) {
    let mut diff: Vec<f64> = c.iter().zip(rust.iter()).map(|(c, r)| c - r).collect();
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let (rust_min, c_min) = (min(rust), min(c));
    println!(
        "one-node {name:<16} median: Rust {:>6.0} ns  C {:>6.0} ns  C - Rust {:>+5.0} ns | min: Rust {rust_min:>6.0} ns  C {c_min:>6.0} ns  C - Rust {:>+5.0} ns",
        median(rust),
        median(c),
        median(&mut diff),
        c_min - rust_min,
    );
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = one_node(dir.path());
    let x: Vec<f32> = (0..16).map(|i| i as f32 * 0.1 - 0.8).collect();

    let options = SessionOptions::default()
        .with_cpu_workers(1)
        .with_io_workers(1);
    let session = RuntimeSession::open(&path, options).expect("opens");
    session.prepare().expect("prepares");
    let mut ctx = Some(
        RuntimeContext::new(&session)
            .with_input(
                "x",
                Tensor::from_f32(vec![1, 16], x.clone()).expect("tensor"),
            )
            .expect("input"),
    );

    let path_c = std::ffi::CString::new(path.to_str().expect("UTF-8")).expect("no NUL");
    let name = c"x";
    let dims = [1usize, 16];
    let (mut c_session, mut c_ctx, mut c_options) = (ptr::null(), ptr::null_mut(), ptr::null_mut());
    let set_c = |c_ctx| {
        // SAFETY: a live context; dims and data valid for their lengths.
        let err = unsafe {
            onnxp_context_set_input(
                c_ctx,
                name.as_ptr(),
                OnnxpElementType::Float as i32,
                dims.as_ptr(),
                2,
                x.as_ptr().cast(),
                64,
            )
        };
        assert!(err.is_null());
    };
    // SAFETY: valid out-pointers and live objects; every error is NULL
    // (asserted), every object released once at the end.
    unsafe {
        assert!(onnxp_options_create(&mut c_options).is_null());
        assert!(onnxp_options_set_workers(c_options, 1, 0).is_null());
        assert!(onnxp_options_set_io_workers(c_options, 1).is_null());
        assert!(onnxp_session_open(path_c.as_ptr(), c_options, &mut c_session).is_null());
        onnxp_options_release(c_options);
        assert!(onnxp_session_prepare(c_session).is_null());
        assert!(onnxp_context_create(c_session, &mut c_ctx).is_null());
    }
    set_c(c_ctx);

    let mut rust_run = || {
        let next = session.run(ctx.take().expect("context")).expect("runs");
        ctx = Some(black_box(next));
    };
    let c_run = || {
        // SAFETY: the live session and its own live context.
        let err = unsafe { onnxp_run(c_session, c_ctx) };
        assert!(err.is_null());
    };
    // Warm-up: lowering, buffers, caches.
    for _ in 0..BATCH {
        rust_run();
        c_run();
    }
    let (mut rust, mut c) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            rust.push(per_call(&mut rust_run));
            c.push(per_call(c_run));
        } else {
            c.push(per_call(c_run));
            rust.push(per_call(&mut rust_run));
        }
    }
    report("run", &mut rust, &mut c);

    let mut rust_set_run = || {
        let mut next = ctx.take().expect("context");
        next.set_input(
            "x",
            Tensor::from_f32(vec![1, 16], x.clone()).expect("tensor"),
        )
        .expect("input");
        ctx = Some(black_box(session.run(next).expect("runs")));
    };
    let c_set_run = || {
        set_c(c_ctx);
        c_run();
    };
    let (mut rust, mut c) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            rust.push(per_call(&mut rust_set_run));
            c.push(per_call(c_set_run));
        } else {
            c.push(per_call(c_set_run));
            rust.push(per_call(&mut rust_set_run));
        }
    }
    report("set_input + run", &mut rust, &mut c);

    // SAFETY: released once, after their last use.
    unsafe {
        onnxp_context_release(c_ctx);
        onnxp_session_release(c_session);
    }
}
