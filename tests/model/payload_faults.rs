//! The fault-injecting payload source: delays, failures, short reads and
//! gates held by the test, each on the weight it was set for only.

use crate::support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use onnx_prepared::model::{
    FaultInjectingSource, FileSource, Model, PayloadError, PayloadSource, ReadFault, read_to_vec,
};
use onnx_prepared::sync::{Arc, Latch, thread};
use support::{Init, tempdir, write_data, write_model};

/// Two external f32 [8] weights `a` and `b` in one data file.
fn two_weights() -> (tempfile::TempDir, Model) {
    let dir = tempdir();
    write_data(dir.path(), "w.bin", 64);
    let inits = [
        Init::external("a", &[8], &[("location", "w.bin")]),
        Init::external("b", &[8], &[("location", "w.bin"), ("offset", "32")]),
    ];
    let model = Model::open(write_model(dir.path(), &inits)).unwrap();
    (dir, model)
}

fn ids(
    model: &Model,
) -> (
    onnx_prepared::model::WeightId,
    onnx_prepared::model::WeightId,
) {
    (
        model.weight_by_name("a").unwrap().id(),
        model.weight_by_name("b").unwrap().id(),
    )
}

#[test]
fn fail_and_short_read_hit_only_their_weight() {
    let (_dir, model) = two_weights();
    let (a, b) = ids(&model);
    let source =
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len())
            .with_fault(a, ReadFault::Fail);
    assert!(matches!(
        read_to_vec(&source, a),
        Err(PayloadError::Injected { tensor }) if tensor == "a"
    ));
    assert_eq!(
        read_to_vec(&source, b).unwrap(),
        (32..64).collect::<Vec<u8>>()
    );
    assert_eq!(source.counters().bytes_read(a), 0);
    assert_eq!(source.counters().bytes_read(b), 32);

    let source =
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len())
            .with_fault(b, ReadFault::ShortRead { bytes: 5 });
    let mut buf = [0xffu8; 32];
    let err = source.read(b, &mut buf).unwrap_err();
    assert!(
        matches!(
            err,
            PayloadError::ShortRead {
                read: 5,
                expected: 32,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(&buf[..5], &[32, 33, 34, 35, 36]);
    assert!(
        buf[5..].iter().all(|&x| x == 0),
        "nothing past the short read"
    );
    assert_eq!(source.counters().bytes_read(b), 5);
}

#[test]
fn delay_holds_the_read_at_least_that_long() {
    let (_dir, model) = two_weights();
    let (a, _) = ids(&model);
    let delay = Duration::from_millis(30);
    let source =
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len())
            .with_fault(a, ReadFault::Delay(delay));
    let start = Instant::now();
    read_to_vec(&source, a).unwrap();
    assert!(start.elapsed() >= delay);
}

#[test]
fn gate_holds_the_read_until_the_test_opens_it() {
    let (_dir, model) = two_weights();
    let (a, b) = ids(&model);
    let gate = Arc::new(Latch::new());
    let source = Arc::new(
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len())
            .with_fault(a, ReadFault::Gate(gate.clone())),
    );
    let (done_tx, done_rx) = mpsc::channel();
    let reader = {
        let source = source.clone();
        thread::spawn(move || {
            let bytes = read_to_vec(&*source, a);
            done_tx.send(()).unwrap();
            bytes
        })
    };
    while source.reads_started(a) == 0 {
        thread::yield_now();
    }
    // The other weight is not held by `a`'s gate.
    assert_eq!(read_to_vec(&*source, b).unwrap().len(), 32);
    assert!(
        done_rx.recv_timeout(Duration::from_millis(50)).is_err(),
        "the read passed a closed gate"
    );
    assert_eq!(source.counters().bytes_read(a), 0);
    gate.open();
    assert_eq!(
        reader.join().unwrap().unwrap(),
        (0..32).collect::<Vec<u8>>()
    );
    assert_eq!(source.counters().bytes_read(a), 32);
    assert_eq!(source.inner().counters().bytes_read(a), 32);
}
