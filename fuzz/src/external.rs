//! The `external_data` case: a small valid model whose initializers carry
//! fuzzer-chosen `external_data` entries, beside data files of
//! fuzzer-chosen sizes (and links, a folder, a FIFO, a file outside the
//! model's folder), optionally swapped after the model was validated.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use arbitrary::Arbitrary;
use onnx_prepared::model::proto::tensor_proto::{DataLocation, DataType};
use onnx_prepared::model::proto::{
    GraphProto, Message, NodeProto, StringStringEntryProto, TensorProto,
};
use sha2::{Digest, Sha256};

/// Largest data file the case writes.
pub const MAX_FILE: usize = 4096;
/// Byte every position of `outside.data` (next to the model's folder) holds.
pub const OUTSIDE_BYTE: u8 = 0xEE;

/// The whole case.
#[derive(Arbitrary, Debug)]
pub struct ExternalCase {
    /// Sizes of `w0.data` and `w1.data` (modulo `MAX_FILE + 1`).
    pub sizes: [u16; 2],
    /// At most three initializers.
    pub tensors: Vec<TensorCase>,
    /// What happens to `w0.data` after `Model::open` validated it.
    pub swap: Option<Swap>,
}

/// One initializer.
#[derive(Arbitrary, Debug)]
pub struct TensorCase {
    pub dtype: DType,
    /// At most four dims.
    pub dims: Vec<i8>,
    /// `data_location`: `None` unset, else the raw value's choice.
    pub location: Option<LocationField>,
    /// At most six entries.
    pub entries: Vec<(Key, Value)>,
    /// Embedded bytes (at most 64).
    pub raw: Option<Vec<u8>>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum DType {
    Float,
    Int64,
    Uint8,
    Float16,
    Int4,
    String,
    Undefined,
    Other(i8),
}

impl DType {
    fn onnx(self) -> i32 {
        match self {
            DType::Float => DataType::Float as i32,
            DType::Int64 => DataType::Int64 as i32,
            DType::Uint8 => DataType::Uint8 as i32,
            DType::Float16 => DataType::Float16 as i32,
            DType::Int4 => DataType::Int4 as i32,
            DType::String => DataType::String as i32,
            DType::Undefined => 0,
            DType::Other(v) => i32::from(v),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum LocationField {
    External,
    Default,
    Other(i8),
}

#[derive(Arbitrary, Debug)]
pub enum Key {
    Location,
    Offset,
    Length,
    Checksum,
    Other(String),
}

#[derive(Arbitrary, Debug)]
pub enum Value {
    /// One of the prepared names.
    File(FileName),
    /// A small decimal number.
    Number(u16),
    /// A multiple of 64.
    Aligned(u8),
    /// Any `u64` in decimal.
    Big(u64),
    /// `sha256:` + the digest of a range of `w0.data`/`w1.data`.
    Sha256Of {
        file: bool,
        offset: u16,
        len: u16,
    },
    /// `sha256:` + text.
    Digest(String),
    /// `sha256:` + text cut or padded with `0` to exactly 64 bytes (the
    /// length a digest must have).
    Digest64(String),
    /// `sha256:` + 64 bytes of hex digits with one character at `at` (of
    /// any width) in their place.
    DigestWith {
        at: u8,
        ch: char,
    },
    Text(String),
}

/// The names a `location` can take.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileName {
    W0,
    W1,
    Missing,
    /// `link-in.data` → `w0.data`.
    LinkIn,
    /// `link-out.data` → `../outside.data`.
    LinkOut,
    /// `../outside.data`.
    Parent,
    /// The absolute path of `outside.data`.
    Absolute,
    /// `sub` (a folder).
    Folder,
    /// `zero.data` → `/dev/zero`.
    DevZero,
    /// `fifo.data`, a FIFO.
    Fifo,
    /// `./sub/../w1.data`.
    Dotted,
}

/// A replacement for `w0.data` after validation (a new inode each time).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Swap {
    LinkOutside,
    DevZero,
    Fifo,
    Truncated,
    Longer,
    Removed,
}

/// Content of data file `index` (`0`: `w0.data`, `1`: `w1.data`).
pub fn content(index: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + index * 7 + 1) % 251) as u8)
        .collect()
}

/// Lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The files of one case, laid out in a scratch folder.
#[derive(Debug)]
pub struct Layout {
    /// The model's folder (`<scratch>/m`).
    pub folder: PathBuf,
    /// `<scratch>/outside.data`.
    pub outside: PathBuf,
    /// The model file.
    pub model: PathBuf,
    /// Sizes of `w0.data` and `w1.data`.
    pub sizes: [usize; 2],
}

impl ExternalCase {
    fn file_name(&self, name: FileName, layout: &Layout) -> String {
        match name {
            FileName::W0 => "w0.data".into(),
            FileName::W1 => "w1.data".into(),
            FileName::Missing => "missing.data".into(),
            FileName::LinkIn => "link-in.data".into(),
            FileName::LinkOut => "link-out.data".into(),
            FileName::Parent => "../outside.data".into(),
            FileName::Absolute => layout.outside.display().to_string(),
            FileName::Folder => "sub".into(),
            FileName::DevZero => "zero.data".into(),
            FileName::Fifo => "fifo.data".into(),
            FileName::Dotted => "./sub/../w1.data".into(),
        }
    }

    fn value(&self, v: &Value, layout: &Layout) -> String {
        match v {
            Value::File(f) => self.file_name(*f, layout),
            Value::Number(n) => n.to_string(),
            Value::Aligned(n) => (u32::from(*n) * 64).to_string(),
            Value::Big(n) => n.to_string(),
            Value::Sha256Of { file, offset, len } => {
                let index = usize::from(*file);
                let bytes = content(index, layout.sizes[index]);
                let start = usize::from(*offset).min(bytes.len());
                let end = start.saturating_add(usize::from(*len)).min(bytes.len());
                format!("sha256:{}", hex(&Sha256::digest(&bytes[start..end])))
            }
            Value::Digest(s) => format!("sha256:{s}"),
            Value::Digest64(s) => {
                let mut cut = s.len().min(64);
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                format!("sha256:{}{}", &s[..cut], "0".repeat(64 - cut))
            }
            Value::DigestWith { at, ch } => {
                let at = usize::from(*at % 64);
                let rest = 64usize.saturating_sub(at + ch.len_utf8());
                format!("sha256:{}{ch}{}", "a".repeat(at), "c".repeat(rest))
            }
            Value::Text(s) => s.clone(),
        }
    }

    /// The `checksum` values initializer `w{index}` declares.
    pub fn checksums(&self, index: usize, layout: &Layout) -> Vec<String> {
        self.tensors.get(index).map_or_else(Vec::new, |t| {
            t.entries
                .iter()
                .take(6)
                .filter(|(k, _)| matches!(k, Key::Checksum))
                .map(|(_, v)| self.value(v, layout))
                .collect()
        })
    }

    /// Writes the model, its data files and whatever else its entries
    /// name under `root` (a scratch folder).
    pub fn write(&self, root: &Path) -> std::io::Result<Layout> {
        let folder = root.join("m");
        fs::create_dir(&folder)?;
        let layout = Layout {
            model: folder.join("model.onnx"),
            outside: root.join("outside.data"),
            sizes: self.sizes.map(|s| usize::from(s) % (MAX_FILE + 1)),
            folder,
        };
        fs::write(&layout.outside, vec![OUTSIDE_BYTE; MAX_FILE])?;
        for (i, &size) in layout.sizes.iter().enumerate() {
            fs::write(layout.folder.join(format!("w{i}.data")), content(i, size))?;
        }
        fs::create_dir(layout.folder.join("sub"))?;
        let used = |f: FileName| {
            self.tensors.iter().take(3).any(|t| {
                t.entries
                    .iter()
                    .any(|(_, v)| matches!(v, Value::File(x) if *x == f))
            })
        };
        let symlink = std::os::unix::fs::symlink;
        if used(FileName::LinkIn) {
            symlink("w0.data", layout.folder.join("link-in.data"))?;
        }
        if used(FileName::LinkOut) {
            symlink("../outside.data", layout.folder.join("link-out.data"))?;
        }
        if used(FileName::DevZero) {
            symlink("/dev/zero", layout.folder.join("zero.data"))?;
        }
        if used(FileName::Fifo) {
            mkfifo(&layout.folder.join("fifo.data"))?;
        }
        fs::write(&layout.model, self.model_bytes(&layout))?;
        Ok(layout)
    }

    fn model_bytes(&self, layout: &Layout) -> Vec<u8> {
        let initializer: Vec<TensorProto> = self
            .tensors
            .iter()
            .take(3)
            .enumerate()
            .map(|(i, t)| TensorProto {
                name: Some(format!("w{i}")),
                data_type: Some(t.dtype.onnx()),
                dims: t.dims.iter().take(4).map(|&d| i64::from(d)).collect(),
                data_location: t.location.map(|l| match l {
                    LocationField::External => DataLocation::External as i32,
                    LocationField::Default => DataLocation::Default as i32,
                    LocationField::Other(v) => i32::from(v),
                }),
                raw_data: t
                    .raw
                    .as_ref()
                    .map(|r| r.iter().take(64).copied().collect::<Vec<u8>>().into()),
                external_data: t
                    .entries
                    .iter()
                    .take(6)
                    .map(|(k, v)| StringStringEntryProto {
                        key: Some(match k {
                            Key::Location => "location".into(),
                            Key::Offset => "offset".into(),
                            Key::Length => "length".into(),
                            Key::Checksum => "checksum".into(),
                            Key::Other(s) => s.clone(),
                        }),
                        value: Some(self.value(v, layout)),
                    })
                    .collect(),
                ..Default::default()
            })
            .collect();
        let node = initializer
            .iter()
            .map(|t| NodeProto {
                op_type: Some("Identity".into()),
                input: vec![t.name.clone().unwrap_or_default()],
                output: vec![format!("{}.out", t.name.as_deref().unwrap_or_default())],
                ..Default::default()
            })
            .collect();
        let graph = GraphProto {
            name: Some("external".into()),
            initializer,
            node,
            ..Default::default()
        };
        crate::model(graph, 23).encode_to_vec()
    }
}

impl Swap {
    /// Replaces `w0.data` in `layout` (removing it first: a new inode).
    pub fn apply(self, layout: &Layout) -> std::io::Result<()> {
        let path = layout.folder.join("w0.data");
        fs::remove_file(&path)?;
        match self {
            Swap::LinkOutside => std::os::unix::fs::symlink("../outside.data", &path),
            Swap::DevZero => std::os::unix::fs::symlink("/dev/zero", &path),
            Swap::Fifo => mkfifo(&path),
            Swap::Truncated => fs::write(&path, content(0, layout.sizes[0] / 2)),
            Swap::Longer => fs::write(&path, content(0, layout.sizes[0] + 64)),
            Swap::Removed => Ok(()),
        }
    }
}

fn mkfifo(path: &Path) -> std::io::Result<()> {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .map_err(std::io::Error::from)
}
