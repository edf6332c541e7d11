//! ONNX models opened metadata-only (cold path).
//!
//! [`Model::open`] decodes the `.onnx` protobuf, turns every initializer into
//! a [`WeightDescriptor`] and validates every `external_data` entry against
//! the file system, opening each data file once, without reading a single
//! external payload byte. Payloads are read later, one weight at a time,
//! through a [`PayloadSource`] that reads through those handles.

mod attrs;
mod conv_chain;
mod dtype;
mod dynamic_int8;
mod error;
mod external;
mod fault;
mod fold;
mod gelu_chain;
mod inputs;
pub mod inspect;
mod payload;
mod qdq;
mod qdq_int8;
mod resolve;
mod roles;
mod weight;
mod wire;

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use onnx_prepared_proto::tensor_proto::DataLocation;
use onnx_prepared_proto::{GraphProto, Message, ModelProto, TensorProto};

pub use attrs::NodeAttributes;
pub use dtype::{ElementType, element_type_from_onnx, element_type_to_onnx, onnx_type_name};
pub use error::{
    ExternalDataError, LoadError, ModelError, PayloadError, ResolveError, UnsupportedOperator,
};
pub(crate) use external::open_no_follow;
pub use fault::{FaultInjectingSource, ReadFault};
pub use fold::KernelFailure;
pub(crate) use fold::{execute_caught, fold_node, folded_bytes, tensor_bytes};
pub(crate) use inputs::graph_input;
pub use inputs::{Dim, GraphInput};
pub use payload::{
    ChecksumPolicy, FileSource, MmapSource, PayloadSource, ReadCounters, read_to_vec,
};
pub(crate) use payload::{PieceReader, read_verified, verify, verify_in_pieces};
pub(crate) use resolve::hash_source_identity;
pub use resolve::{
    InlineId, Operand, PayloadManifest, PreparedKey, Requirement, RequirementIndex, ResolveOptions,
    ResolvedModel, ResolvedNode, SOURCE_LAYOUT, ValueId, scope_of,
};
pub use roles::{InputRole, input_role, kv_cache_pairs};
pub use weight::{
    Checksum, ExternalFile, ExternalFileId, WeightDescriptor, WeightId, WeightSource,
};

/// The ONNX protobuf types.
pub use onnx_prepared_proto as proto;

use crate::limits::MAX_MODEL_FILE_BYTES;
use external::{ExternalFiles, Roots};

/// A model whose graph is known and whose weights have not been read.
///
/// The graph keeps its nodes, inputs, outputs and value infos; its
/// initializers are moved out into [`Model::weights`].
#[derive(Debug, Clone)]
pub struct Model {
    path: PathBuf,
    /// XXH3-128 of the `.onnx` file's bytes.
    identity: u128,
    proto: ModelProto,
    weights: Arc<[WeightDescriptor]>,
    by_name: HashMap<String, WeightId>,
    external_files: Vec<ExternalFile>,
}

impl Model {
    /// Opens the model at `path`, reading only the `.onnx` file.
    ///
    /// Every initializer is described and every `external_data` entry is
    /// validated (location inside the model's folder, keys, numbers, digest
    /// syntax, bounds, length against type × dims) before anything sized by
    /// the model is allocated. Each external data file is opened once (a
    /// final symbolic link is not followed, a FIFO does not block) and must
    /// be a regular file; the model keeps the handles, and payload sources
    /// read through them for the model's lifetime, so a file swapped in at
    /// the path later is never read. No payload byte is read here.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = onnx_prepared_fixtures::default_dir();
    /// # onnx_prepared_fixtures::ensure_all(&dir)?;
    /// let model = onnx_prepared::Model::open(dir.join("gemm-transb0.onnx"))?;
    /// for w in model.weights() {
    ///     println!("{} {:?} {} bytes", w.name(), w.dims(), w.byte_len());
    /// }
    /// assert!(model.external_bytes() > 0); // described, not read
    /// # Ok(()) }
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        let path = path.as_ref().to_path_buf();
        let buffer = read_model_file(&path)?;
        let identity = xxhash_rust::xxh3::xxh3_128(&buffer);
        check_wire(&path, &buffer)?;
        let mut proto = ModelProto::decode(buffer).map_err(|source| ModelError::Decode {
            path: path.clone(),
            source,
        })?;
        check_opset_imports(&path, &proto)?;
        let roots = roots(&path)?;
        let graph = proto
            .graph
            .as_mut()
            .ok_or_else(|| ModelError::MissingGraph { path: path.clone() })?;
        if let Some(sparse) = graph.sparse_initializer.first() {
            let tensor = sparse
                .values
                .as_ref()
                .and_then(|v| v.name.clone())
                .unwrap_or_default();
            return Err(ModelError::UnsupportedStorage {
                tensor,
                feature: "sparse initializers",
            }
            .into());
        }
        let initializers = std::mem::take(&mut graph.initializer);
        let mut files = ExternalFiles::default();
        let mut weights = Vec::with_capacity(initializers.len());
        let mut by_name = HashMap::with_capacity(initializers.len());
        for (index, tensor) in initializers.into_iter().enumerate() {
            let id = WeightId(index as u32);
            let weight = describe(id, index, tensor, &roots, &mut files)?;
            if by_name.insert(weight.name.clone(), id).is_some() {
                return Err(ModelError::DuplicateInitializer {
                    tensor: weight.name,
                }
                .into());
            }
            weights.push(weight);
        }
        Ok(Self {
            path,
            identity,
            proto,
            weights: weights.into(),
            by_name,
            external_files: files.files,
        })
    }

    /// The model file's identity (XXH3-128 of its bytes): names its
    /// companion model in a prepared cache. Only partitions the cache;
    /// entries are validated by their source lineage.
    pub fn identity(&self) -> u128 {
        self.identity
    }

    /// The path the model was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The decoded model, initializers removed.
    pub fn proto(&self) -> &ModelProto {
        &self.proto
    }

    /// The main graph, initializers removed.
    pub fn graph(&self) -> &GraphProto {
        self.proto.graph.as_ref().expect("checked at open")
    }

    /// `(domain, version)` of every opset import; the default domain is `""`.
    pub fn opset_imports(&self) -> impl Iterator<Item = (&str, i64)> {
        self.proto.opset_import.iter().map(|o| {
            (
                o.domain.as_deref().unwrap_or_default(),
                o.version.unwrap_or_default(),
            )
        })
    }

    /// The imported version of `domain` (`""` or `"ai.onnx"` for the default).
    pub fn opset_version(&self, domain: &str) -> Option<i64> {
        let norm = |d: &str| if d == "ai.onnx" { "" } else { d }.to_owned();
        let want = norm(domain);
        self.opset_imports()
            .find(|(d, _)| norm(d) == want)
            .map(|(_, v)| v)
    }

    /// Every initializer, indexed by [`WeightId`].
    pub fn weights(&self) -> &[WeightDescriptor] {
        &self.weights
    }

    /// Bytes of the weights stored in external data files.
    pub fn external_bytes(&self) -> u64 {
        self.weights
            .iter()
            .filter(|w| w.is_external())
            .map(|w| w.byte_len())
            .sum()
    }

    /// One weight.
    pub fn weight(&self, id: WeightId) -> Option<&WeightDescriptor> {
        self.weights.get(id.index())
    }

    /// The weight named `name`.
    pub fn weight_by_name(&self, name: &str) -> Option<&WeightDescriptor> {
        self.by_name.get(name).map(|id| &self.weights[id.index()])
    }

    /// The weight table, shared with payload sources.
    pub(crate) fn shared_weights(&self) -> Arc<[WeightDescriptor]> {
        Arc::clone(&self.weights)
    }

    /// Every external data file, indexed by [`ExternalFileId`].
    pub fn external_files(&self) -> &[ExternalFile] {
        &self.external_files
    }
}

/// Refuses a second `opset_import` of one domain (`""` and `ai.onnx` are
/// one domain), which ONNX Runtime and this runtime would apply differently.
fn check_opset_imports(path: &Path, proto: &ModelProto) -> Result<(), ModelError> {
    let mut seen: HashMap<&str, i64> = HashMap::with_capacity(proto.opset_import.len());
    for o in &proto.opset_import {
        let domain = match o.domain.as_deref().unwrap_or_default() {
            "" | "ai.onnx" => "ai.onnx",
            d => d,
        };
        let version = o.version.unwrap_or_default();
        if let Some(&first) = seen.get(domain) {
            return Err(ModelError::DuplicateOpsetImport {
                path: path.to_path_buf(),
                domain: domain.to_owned(),
                first,
                second: version,
            });
        }
        seen.insert(domain, version);
    }
    Ok(())
}

fn read_model_file(path: &Path) -> Result<Bytes, ModelError> {
    let io = |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    // A FIFO or a device is refused before it is opened (opening a FIFO
    // blocks; a device may never end), and again on the open handle.
    let regular = |meta: std::fs::Metadata| {
        if meta.is_file() {
            Ok(meta.len())
        } else {
            Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (a FIFO, a device or a directory); give the path of an .onnx file",
            )))
        }
    };
    regular(std::fs::metadata(path).map_err(io)?)?;
    let file = std::fs::File::open(path).map_err(io)?;
    let size = regular(file.metadata().map_err(io)?)?;
    let too_large = |size| ModelError::TooLarge {
        path: path.to_path_buf(),
        size,
        limit: MAX_MODEL_FILE_BYTES,
    };
    if size > MAX_MODEL_FILE_BYTES {
        return Err(too_large(size));
    }
    // The file may grow after the stat: read one byte past the limit at most.
    // Up to 2 GiB: the system may refuse it (an error, never an abort).
    let mut buffer = Vec::new();
    buffer
        .try_reserve_exact(size as usize)
        .map_err(|_| io(std::io::ErrorKind::OutOfMemory.into()))?;
    file.take(MAX_MODEL_FILE_BYTES + 1)
        .read_to_end(&mut buffer)
        .map_err(io)?;
    if buffer.len() as u64 > MAX_MODEL_FILE_BYTES {
        return Err(too_large(buffer.len() as u64));
    }
    Ok(Bytes::from(buffer))
}

/// Refuses a model whose decoding would allocate past the limits, before
/// it is decoded.
fn check_wire(path: &Path, bytes: &[u8]) -> Result<(), ModelError> {
    let counts = wire::scan(bytes);
    let ceiling = crate::arena::Ceiling::process().limit() as u64;
    let refuse = |what, count, limit| {
        Err(ModelError::TooComplex {
            path: path.to_path_buf(),
            what,
            count,
            limit,
        })
    };
    if counts.nodes > crate::limits::MAX_GRAPH_NODES {
        return refuse("nodes", counts.nodes, crate::limits::MAX_GRAPH_NODES);
    }
    if counts.decoded_bytes > ceiling {
        return refuse("estimated decoded bytes", counts.decoded_bytes, ceiling);
    }
    Ok(())
}

fn roots(path: &Path) -> Result<Roots, ModelError> {
    let io = |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    let model_dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = std::fs::canonicalize(&model_dir).map_err(io)?;
    let real = std::fs::canonicalize(path).map_err(io)?;
    let real_dir = real
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| dir.clone());
    Ok(Roots {
        model_dir,
        allowed: [dir, real_dir],
    })
}

/// Describes one initializer, validating its type, dims and storage.
fn describe(
    id: WeightId,
    index: usize,
    tensor: TensorProto,
    roots: &Roots,
    files: &mut ExternalFiles,
) -> Result<WeightDescriptor, LoadError> {
    let name = match tensor.name.as_deref() {
        Some(n) if !n.is_empty() => n.to_owned(),
        _ => return Err(ModelError::UnnamedInitializer { index }.into()),
    };
    let data_type = tensor.data_type.unwrap_or_default();
    let element_type =
        element_type_from_onnx(data_type).ok_or_else(|| ModelError::UnsupportedElementType {
            tensor: name.clone(),
            element_type: onnx_type_name(data_type),
        })?;
    let mut dims = Vec::with_capacity(tensor.dims.len());
    for &d in &tensor.dims {
        let d = u64::try_from(d).map_err(|_| ModelError::NegativeDim {
            tensor: name.clone(),
            dim: d,
            dims: tensor.dims.clone(),
        })?;
        dims.push(d);
    }
    let overflow = || ModelError::DimsOverflow {
        tensor: name.clone(),
        dims: tensor.dims.clone(),
    };
    let elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    let byte_len = element_type.byte_len(elements).ok_or_else(overflow)?;
    if tensor.segment.is_some() {
        return Err(ModelError::UnsupportedStorage {
            tensor: name,
            feature: "segmented tensors",
        }
        .into());
    }

    let external = tensor.data_location == Some(DataLocation::External as i32);
    let (source, checksum) = if external {
        if tensor.external_data.is_empty() {
            return Err(ExternalDataError::MissingLocation { tensor: name }.into());
        }
        files.add(&name, &tensor.external_data, byte_len, roots)?
    } else {
        if !tensor.external_data.is_empty() {
            return Err(ExternalDataError::DataLocationMismatch {
                tensor: name,
                data_location: "DEFAULT",
                entries: tensor.external_data.len(),
            }
            .into());
        }
        let bytes = embedded_bytes(&name, element_type, elements, byte_len, tensor)?;
        (WeightSource::Embedded { bytes }, None)
    };
    Ok(WeightDescriptor {
        id,
        name,
        element_type,
        dims,
        byte_len,
        source,
        checksum,
        embedded_digest: crate::sync::OnceLock::new(),
    })
}

/// The payload of an embedded tensor: `raw_data` sliced without copying, or
/// the typed fields encoded little-endian after their count is checked.
fn embedded_bytes(
    name: &str,
    element_type: ElementType,
    elements: u64,
    byte_len: u64,
    tensor: TensorProto,
) -> Result<Bytes, ModelError> {
    let mismatch = |found: u64, expected: u64, unit| ModelError::EmbeddedSizeMismatch {
        tensor: name.to_owned(),
        expected,
        found,
        unit,
    };
    if let Some(raw) = tensor.raw_data {
        if raw.len() as u64 != byte_len {
            return Err(mismatch(raw.len() as u64, byte_len, "bytes"));
        }
        return Ok(raw);
    }
    use ElementType as T;
    let values = match element_type {
        T::I4 | T::U4 => elements.div_ceil(2),
        _ => elements,
    };
    let found = match element_type {
        T::F32 => tensor.float_data.len(),
        T::F64 => tensor.double_data.len(),
        T::I64 => tensor.int64_data.len(),
        T::U32 | T::U64 => tensor.uint64_data.len(),
        _ => tensor.int32_data.len(),
    } as u64;
    if found != values {
        return Err(mismatch(found, values, "values"));
    }
    let mut out = Vec::with_capacity(byte_len as usize);
    match element_type {
        T::F32 => tensor
            .float_data
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        T::F64 => tensor
            .double_data
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        T::I64 => tensor
            .int64_data
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        T::U64 => tensor
            .uint64_data
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        T::U32 => tensor
            .uint64_data
            .iter()
            .for_each(|&v| out.extend_from_slice(&(v as u32).to_le_bytes())),
        T::I32 => tensor
            .int32_data
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        T::I16 | T::U16 | T::F16 | T::BF16 => tensor
            .int32_data
            .iter()
            .for_each(|&v| out.extend_from_slice(&(v as u16).to_le_bytes())),
        T::I8 | T::U8 | T::Bool | T::I4 | T::U4 => {
            tensor.int32_data.iter().for_each(|&v| out.push(v as u8))
        }
    }
    debug_assert_eq!(out.len() as u64, byte_len);
    Ok(Bytes::from(out))
}

/// Decodes an embedded tensor (a `Constant` node's or attribute's value) into
/// a compute tensor. External data and 4-bit types are rejected.
pub(crate) fn decode_embedded_tensor(
    name: &str,
    tensor: &TensorProto,
) -> Result<onnx_prepared_kernels::Tensor, ModelError> {
    let data_type = tensor.data_type.unwrap_or_default();
    let unsupported = || ModelError::UnsupportedElementType {
        tensor: name.to_owned(),
        element_type: onnx_type_name(data_type),
    };
    let element_type = element_type_from_onnx(data_type).ok_or_else(unsupported)?;
    if tensor.data_location == Some(DataLocation::External as i32) {
        return Err(ModelError::UnsupportedStorage {
            tensor: name.to_owned(),
            feature: "external data in a node attribute",
        });
    }
    let mut dims = Vec::with_capacity(tensor.dims.len());
    for &d in &tensor.dims {
        dims.push(usize::try_from(d).map_err(|_| ModelError::NegativeDim {
            tensor: name.to_owned(),
            dim: d,
            dims: tensor.dims.clone(),
        })?);
    }
    let overflow = || ModelError::DimsOverflow {
        tensor: name.to_owned(),
        dims: tensor.dims.clone(),
    };
    let elements = onnx_prepared_kernels::element_count(&dims).ok_or_else(overflow)? as u64;
    let byte_len = element_type.byte_len(elements).ok_or_else(overflow)?;
    let bytes = embedded_bytes(name, element_type, elements, byte_len, tensor.clone())?;
    let data = onnx_prepared_kernels::TensorData::decode(element_type, &bytes, elements as usize)
        .ok_or_else(unsupported)?;
    onnx_prepared_kernels::Tensor::new(dims, data).map_err(|_| overflow())
}
