//! Sessions (cold path): [`OnnxpSession`] opens a model and describes its
//! inputs and outputs ([`OnnxpValueInfo`]).

use std::ffi::{CString, c_char};
use std::path::Path;
use std::ptr;
use std::sync::Arc;

use onnx_prepared::decoder::{self, KvCache};
use onnx_prepared::model::proto::{ValueInfoProto, tensor_shape_proto, type_proto};
use onnx_prepared::model::{Dim, element_type_from_onnx};
use onnx_prepared::{ElementType, RuntimeSession};

use crate::error::{OnnxpError, boundary, quiet};
use crate::options::{OnnxpOptions, session_options};
use crate::{arg, out_arg, str_arg};

/// An element type, by its ONNX `TensorProto.DataType` code.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnnxpElementType {
    /// Not a type the runtime knows.
    Undefined = 0,
    /// 32-bit float.
    Float = 1,
    /// 8-bit unsigned integer.
    Uint8 = 2,
    /// 8-bit signed integer.
    Int8 = 3,
    /// 16-bit unsigned integer.
    Uint16 = 4,
    /// 16-bit signed integer.
    Int16 = 5,
    /// 32-bit signed integer.
    Int32 = 6,
    /// 64-bit signed integer.
    Int64 = 7,
    /// One byte per element, 0 or 1.
    Bool = 9,
    /// IEEE half precision.
    Float16 = 10,
    /// 64-bit float.
    Double = 11,
    /// 32-bit unsigned integer.
    Uint32 = 12,
    /// 64-bit unsigned integer.
    Uint64 = 13,
    /// bfloat16.
    Bfloat16 = 16,
    /// Unsigned 4-bit integers (weights only; never an input or output).
    Uint4 = 21,
    /// Signed 4-bit integers (weights only; never an input or output).
    Int4 = 22,
}

impl From<ElementType> for OnnxpElementType {
    fn from(t: ElementType) -> Self {
        use ElementType as T;
        match t {
            T::F32 => Self::Float,
            T::F64 => Self::Double,
            T::F16 => Self::Float16,
            T::BF16 => Self::Bfloat16,
            T::I8 => Self::Int8,
            T::I16 => Self::Int16,
            T::I32 => Self::Int32,
            T::I64 => Self::Int64,
            T::U8 => Self::Uint8,
            T::U16 => Self::Uint16,
            T::U32 => Self::Uint32,
            T::U64 => Self::Uint64,
            T::Bool => Self::Bool,
            T::I4 => Self::Int4,
            T::U4 => Self::Uint4,
        }
    }
}

/// An open model: its plan, weights as they load, and its worker pool.
/// Shared by the contexts made from it, so releasing it while they live is
/// allowed (the last of them frees it).
#[derive(Debug)]
pub struct OnnxpSession {
    pub(crate) session: RuntimeSession,
    inputs: Box<[ValueInfo]>,
    outputs: Box<[ValueInfo]>,
    /// The KV-cache form `onnxp_generate` decodes with.
    pub(crate) kv_cache: KvCache,
}

/// A graph input or output as `onnxp_session_input` and
/// `onnxp_session_output` describe it. Every pointer is owned by the
/// session and valid until it is freed (its last reference released).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct OnnxpValueInfo {
    /// The name, NUL-terminated UTF-8.
    pub name: *const c_char,
    /// The declared element type (`ONNXP_ELEMENT_TYPE_UNDEFINED` when the
    /// model declares none the runtime knows).
    pub dtype: OnnxpElementType,
    /// Whether the model declares a shape; `rank` is 0 when it does not.
    pub has_shape: bool,
    /// Number of dims.
    pub rank: usize,
    /// `rank` sizes: the fixed size, or -1 for a symbolic or unknown dim.
    pub dims: *const i64,
    /// `rank` names: the symbolic dim's name (`"T"`, `"batch"`), or NULL
    /// for a fixed or unnamed dim.
    pub dim_names: *const *const c_char,
}

/// The owned storage behind an [`OnnxpValueInfo`].
#[derive(Debug)]
struct ValueInfo {
    name: CString,
    dtype: OnnxpElementType,
    has_shape: bool,
    dims: Box<[i64]>,
    /// Owns what `dim_ptrs` points at.
    _dim_names: Box<[Option<CString>]>,
    dim_ptrs: DimNamePtrs,
}

/// Pointers into `ValueInfo::_dim_names` (NULL for none).
#[derive(Debug)]
struct DimNamePtrs(Box<[*const c_char]>);

// SAFETY: the pointers address the heap buffers of CStrings owned by the
// same `ValueInfo`, which are never mutated or moved (boxed) while it lives;
// sharing or sending them is sharing read-only bytes.
unsafe impl Send for DimNamePtrs {}
// SAFETY: as for `Send`: read-only bytes.
unsafe impl Sync for DimNamePtrs {}

impl ValueInfo {
    fn new(name: &str, dtype: Option<ElementType>, dims: Option<&[Dim]>) -> Self {
        let names: Box<[Option<CString>]> = dims
            .unwrap_or_default()
            .iter()
            .map(|d| match d {
                Dim::Symbolic(s) => CString::new(s.as_str()).ok(),
                _ => None,
            })
            .collect();
        let dim_ptrs = DimNamePtrs(
            names
                .iter()
                .map(|n| n.as_ref().map_or(ptr::null(), |n| n.as_ptr()))
                .collect(),
        );
        Self {
            name: CString::new(name).unwrap_or_default(),
            dtype: dtype.map_or(OnnxpElementType::Undefined, OnnxpElementType::from),
            has_shape: dims.is_some(),
            dims: dims
                .unwrap_or_default()
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => i64::try_from(*n).unwrap_or(-1),
                    _ => -1,
                })
                .collect(),
            _dim_names: names,
            dim_ptrs,
        }
    }

    fn view(&self) -> OnnxpValueInfo {
        OnnxpValueInfo {
            name: self.name.as_ptr(),
            dtype: self.dtype,
            has_shape: self.has_shape,
            rank: self.dims.len(),
            dims: self.dims.as_ptr(),
            dim_names: self.dim_ptrs.0.as_ptr(),
        }
    }
}

/// A graph output's declared type and dims, read from its `ValueInfoProto`.
fn output_info(v: &ValueInfoProto) -> ValueInfo {
    let name = v.name.as_deref().unwrap_or_default();
    let tensor = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => Some(t),
        _ => None,
    };
    let dtype = tensor
        .and_then(|t| t.elem_type)
        .and_then(element_type_from_onnx);
    let dims: Option<Vec<Dim>> = tensor.and_then(|t| t.shape.as_ref()).map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(tensor_shape_proto::dimension::Value::DimValue(n)) if *n >= 0 => {
                    Dim::Fixed(*n as usize)
                }
                Some(tensor_shape_proto::dimension::Value::DimParam(p)) if !p.is_empty() => {
                    Dim::Symbolic(p.clone())
                }
                _ => Dim::Unknown,
            })
            .collect()
    });
    ValueInfo::new(name, dtype, dims.as_deref())
}

impl OnnxpSession {
    fn new(session: RuntimeSession, path: &Path) -> Self {
        let resolved = session.plan().resolved();
        let inputs = resolved
            .inputs()
            .iter()
            .map(|i| ValueInfo::new(&i.name, Some(i.dtype), i.dims.as_deref()))
            .collect();
        let graph = resolved.model().graph();
        let outputs = resolved
            .outputs()
            .iter()
            .map(|(name, _)| {
                graph
                    .output
                    .iter()
                    .find(|o| o.name.as_deref() == Some(name.as_str()))
                    .map_or_else(|| ValueInfo::new(name, None, None), output_info)
            })
            .collect();
        Self {
            kv_cache: decoder::genai_kv_cache(path).unwrap_or(KvCache::Growing),
            session,
            inputs,
            outputs,
        }
    }

    /// The session's graph output names, in graph order.
    pub(crate) fn output_names(&self) -> impl Iterator<Item = &str> {
        self.outputs.iter().map(|o| o.name.to_str().unwrap_or(""))
    }
}

/// Opens the model at `path` (UTF-8) with `options` (NULL: defaults) and
/// writes the session to `*out`. Reads the model's metadata only: weights
/// load while the first run streams, or with `onnxp_session_prepare`.
/// `options` is read, not kept.
///
/// Thread safety: any thread; sessions are independent.
///
/// # Safety
/// `path` is NULL or NUL-terminated; `options` is NULL or live; `out` is
/// NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_session_open(
    path: *const c_char,
    options: *const OnnxpOptions,
    out: *mut *const OnnxpSession,
) -> *mut OnnxpError {
    boundary(|| {
        out_arg(out, "out")?;
        // SAFETY: NULL or NUL-terminated (the caller's contract).
        let path = Path::new(unsafe { str_arg(path, "path") }?);
        // SAFETY: NULL or live (the caller's contract).
        let options = unsafe { session_options(options) }?;
        let session = RuntimeSession::open(path, options)?;
        let session = Arc::into_raw(Arc::new(OnnxpSession::new(session, path)));
        // SAFETY: checked non-NULL; valid for a write (the caller's contract).
        unsafe { out.write(session) };
        Ok(())
    })
}

/// Releases the caller's reference to `session`. NULL is a no-op. Contexts
/// made from it keep it alive until they are released; a run in flight
/// keeps it alive until it finishes.
///
/// Thread safety: once per session, when no other call on it is running.
///
/// # Safety
/// `session` is NULL or opened by `onnxp_session_open` and not released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_session_release(session: *const OnnxpSession) {
    quiet(|| {
        if !session.is_null() {
            // SAFETY: made by `Arc::into_raw` in `onnxp_session_open`; the
            // caller's reference, released once (the caller's contract).
            drop(unsafe { Arc::from_raw(session) });
        }
    });
}

/// Eager preparation: reads and packs every weight now and returns once
/// all are resident, so that the next run takes the hot path. Optional: a
/// first run without it streams the weights in as it goes.
///
/// Thread safety: any thread, concurrently with runs on the session.
///
/// # Safety
/// `session` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_session_prepare(session: *const OnnxpSession) -> *mut OnnxpError {
    boundary(|| {
        // SAFETY: NULL or live (the caller's contract).
        let s = unsafe { arg(session, "session") }?;
        s.session.prepare()?;
        Ok(())
    })
}

/// Writes the number of graph inputs (or outputs) to `*count`.
///
/// Thread safety: any thread, concurrently with any call on the session.
///
/// # Safety
/// `session` is NULL or live; `count` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_session_input_count(
    session: *const OnnxpSession,
    count: *mut usize,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe { count_of(session, count, |s| s.inputs.len()) }
}

/// Writes the number of graph outputs to `*count`.
///
/// Thread safety: any thread, concurrently with any call on the session.
///
/// # Safety
/// `session` is NULL or live; `count` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_session_output_count(
    session: *const OnnxpSession,
    count: *mut usize,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe { count_of(session, count, |s| s.outputs.len()) }
}

/// Writes graph input `index` (declared order) to `*info`: its name,
/// element type and dims, symbolic ones by name. The pointers in `*info`
/// stay valid while the session lives.
///
/// Thread safety: any thread, concurrently with any call on the session.
///
/// # Safety
/// `session` is NULL or live; `info` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_session_input(
    session: *const OnnxpSession,
    index: usize,
    info: *mut OnnxpValueInfo,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe { info_of(session, index, info, |s| &s.inputs, "input") }
}

/// Writes graph output `index` (graph order) to `*info`, as
/// `onnxp_session_input` does for inputs.
///
/// Thread safety: any thread, concurrently with any call on the session.
///
/// # Safety
/// `session` is NULL or live; `info` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_session_output(
    session: *const OnnxpSession,
    index: usize,
    info: *mut OnnxpValueInfo,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe { info_of(session, index, info, |s| &s.outputs, "output") }
}

/// # Safety
/// `session` is NULL or live; `count` is NULL or valid for a write.
unsafe fn count_of(
    session: *const OnnxpSession,
    count: *mut usize,
    n: impl FnOnce(&OnnxpSession) -> usize,
) -> *mut OnnxpError {
    boundary(|| {
        out_arg(count, "count")?;
        // SAFETY: NULL or live (the caller's contract).
        let s = unsafe { arg(session, "session") }?;
        // SAFETY: checked non-NULL; valid for a write (the caller's contract).
        unsafe { count.write(n(s)) };
        Ok(())
    })
}

/// # Safety
/// `session` is NULL or live; `info` is NULL or valid for a write.
unsafe fn info_of(
    session: *const OnnxpSession,
    index: usize,
    info: *mut OnnxpValueInfo,
    list: impl FnOnce(&OnnxpSession) -> &[ValueInfo],
    what: &str,
) -> *mut OnnxpError {
    boundary(|| {
        out_arg(info, "info")?;
        // SAFETY: NULL or live (the caller's contract).
        let s = unsafe { arg(session, "session") }?;
        let list = list(s);
        let v = list.get(index).ok_or_else(|| {
            OnnxpError::invalid(format!(
                "{what} index {index} is out of range: the model has {}",
                list.len()
            ))
        })?;
        // SAFETY: checked non-NULL; valid for a write (the caller's contract).
        unsafe { info.write(v.view()) };
        Ok(())
    })
}
