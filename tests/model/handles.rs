//! External data files are opened once, at `Model::open`, and read only
//! through those handles: a data file swapped after open (for a symlink out
//! of the model's folder, a FIFO, another file) is never read, and a data
//! file that is not a regular file is a typed error at open, not a hang.

use crate::support;

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use onnx_prepared::Error;
use onnx_prepared::model::{
    ExternalDataError as X, FileSource, MmapSource, Model, PayloadSource, read_to_vec,
};
use support::{Init, tempdir, write_data, write_model};

/// A [2, 4] f32 tensor: 32 bytes.
const DIMS: &[i64] = &[2, 4];
const BYTES: usize = 32;

/// `write_data`'s pattern for `len` bytes.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// A model in `dir` whose weight `w` is `w.bin`, opened.
fn open_model(dir: &Path) -> Model {
    write_data(dir, "w.bin", BYTES);
    let path = write_model(dir, &[Init::external("w", DIMS, &[("location", "w.bin")])]);
    Model::open(path).expect("opens")
}

/// What each payload source built after the swap reads for `w`.
fn read_with_both_sources(model: &Model) -> Vec<Vec<u8>> {
    let id = model.weight_by_name("w").unwrap().id();
    let file = FileSource::open(model).expect("file source");
    let map = MmapSource::open(model).expect("mmap source");
    vec![
        read_to_vec(&file, id).expect("file read"),
        read_to_vec(&map, id).expect("mmap read"),
    ]
}

/// Runs `f` on another thread; fails the test if it has not returned after
/// `secs` seconds (a read blocked on a FIFO), after calling `unblock`.
fn within<T: Send + 'static>(
    secs: u64,
    f: impl FnOnce() -> T + Send + 'static,
    unblock: impl FnOnce(),
) -> T {
    let (tx, rx) = mpsc::channel();
    onnx_prepared::sync::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(value) => value,
        Err(_) => {
            unblock();
            panic!("still blocked after {secs} s");
        }
    }
}

fn mkfifo(path: &Path) {
    use rustix::fs::{CWD, FileType, Mode, mknodat};
    mknodat(CWD, path, FileType::Fifo, Mode::RUSR | Mode::WUSR, 0).expect("mkfifo");
}

/// Opens the FIFO at `path` for writing without blocking and closes it, so a
/// reader blocked opening it wakes up (and sees end of file).
fn release_fifo_reader(path: &Path) {
    use rustix::fs::{Mode, OFlags, open};
    let _ = open(path, OFlags::WRONLY | OFlags::NONBLOCK, Mode::empty());
}

#[test]
fn data_file_swapped_for_a_symlink_out_of_the_folder_is_never_read() {
    let dir = tempdir();
    let model = open_model(dir.path());
    let outside = tempdir();
    let secret = outside.path().join("secret.bin");
    std::fs::write(&secret, [0xEE; BYTES]).unwrap();
    let data = dir.path().join("w.bin");
    std::fs::remove_file(&data).unwrap();
    std::os::unix::fs::symlink(&secret, &data).unwrap();

    for bytes in read_with_both_sources(&model) {
        assert_eq!(
            bytes,
            pattern(BYTES),
            "read the validated file, not the link"
        );
    }
    // A fresh open sees the link and refuses it.
    let err = Error::from(Model::open(dir.path().join("model.onnx")).unwrap_err());
    assert!(
        matches!(err, Error::ExternalData(X::SymlinkEscape { .. })),
        "{err:?}"
    );
}

#[test]
fn data_file_replaced_by_rename_is_never_read() {
    let dir = tempdir();
    let model = open_model(dir.path());
    let other = dir.path().join("other.bin");
    std::fs::write(&other, [0x11; BYTES]).unwrap();
    std::fs::rename(&other, dir.path().join("w.bin")).unwrap();
    for bytes in read_with_both_sources(&model) {
        assert_eq!(bytes, pattern(BYTES));
    }
}

#[test]
fn data_file_swapped_for_a_fifo_is_never_read_and_never_blocks() {
    let dir = tempdir();
    let model = open_model(dir.path());
    let data = dir.path().join("w.bin");
    std::fs::remove_file(&data).unwrap();
    mkfifo(&data);

    let reads = within(
        20,
        move || read_with_both_sources(&model),
        || release_fifo_reader(&data),
    );
    for bytes in reads {
        assert_eq!(bytes, pattern(BYTES));
    }
    // At open, the FIFO is a typed error, returned at once.
    let path = dir.path().join("model.onnx");
    let data = dir.path().join("w.bin");
    let err = within(
        20,
        move || Error::from(Model::open(path).unwrap_err()),
        || release_fifo_reader(&data),
    );
    assert!(
        matches!(&err, Error::ExternalData(X::NotRegularFile { tensor, .. }) if tensor == "w"),
        "{err:?}"
    );
}

#[test]
fn a_device_behind_a_symlink_is_refused_at_open() {
    let dir = tempdir();
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("w.bin")).unwrap();
    let path = write_model(
        dir.path(),
        &[Init::external("w", DIMS, &[("location", "w.bin")])],
    );
    let err = Error::from(Model::open(path).unwrap_err());
    assert!(
        matches!(&err, Error::ExternalData(X::SymlinkEscape { tensor, .. }) if tensor == "w"),
        "{err:?}"
    );
}

#[test]
fn the_size_is_the_opened_files_and_sources_share_one_handle_per_file() {
    let dir = tempdir();
    write_data(dir.path(), "w.bin", 2 * BYTES);
    let path = write_model(
        dir.path(),
        &[
            Init::external("a", DIMS, &[("location", "w.bin")]),
            Init::external("b", DIMS, &[("location", "w.bin"), ("offset", "32")]),
        ],
    );
    let model = Model::open(path).unwrap();
    assert_eq!(model.external_files().len(), 1);
    assert_eq!(model.external_files()[0].size(), 2 * BYTES as u64);
    // Both weights come from the one validated handle even once the path is gone.
    std::fs::remove_file(dir.path().join("w.bin")).unwrap();
    let source = FileSource::open(&model).unwrap();
    let all = pattern(2 * BYTES);
    for (name, range) in [("a", 0..BYTES), ("b", BYTES..2 * BYTES)] {
        let w = model.weight_by_name(name).unwrap();
        assert_eq!(read_to_vec(&source, w.id()).unwrap(), all[range]);
    }
    assert_eq!(source.counters().total(), 2 * BYTES as u64);
}
