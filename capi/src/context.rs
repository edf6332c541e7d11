//! Contexts (hot path: inputs in, outputs out): [`OnnxpContext`] holds one
//! run's inputs and outputs, lent to a run while it is in flight;
//! [`OnnxpTensor`] is an output taken out of one.

use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex, MutexGuard};

use onnx_prepared::{ElementType, RuntimeContext, Tensor};
use onnx_prepared_kernels::{DataRef, SharedBytes, TensorData, element_count};

use crate::error::{OnnxpError, OnnxpErrorKind, Result, boundary, quiet};
use crate::session::{OnnxpElementType, OnnxpSession};
use crate::{arg, out_arg, slice_arg, str_arg};

/// The element type of an input's `dtype` argument (an
/// `OnnxpElementType` value): the types a tensor holds in memory.
fn input_type(code: i32) -> Result<ElementType> {
    use ElementType as T;
    Ok(match code {
        1 => T::F32,
        2 => T::U8,
        3 => T::I8,
        4 => T::U16,
        5 => T::I16,
        6 => T::I32,
        7 => T::I64,
        9 => T::Bool,
        10 => T::F16,
        11 => T::F64,
        12 => T::U32,
        13 => T::U64,
        16 => T::BF16,
        _ => {
            return Err(OnnxpError::invalid(format!(
                "{code} is not an element type an input can have"
            )));
        }
    })
}

/// A read-only view of a tensor: an output in its context, or an
/// `OnnxpTensor`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct OnnxpTensorView {
    /// The elements, row-major, little-endian (booleans one byte each, 0 or
    /// 1; float16 and bfloat16 as their 16-bit patterns).
    pub data: *const c_void,
    /// The element type.
    pub dtype: OnnxpElementType,
    /// Number of dims.
    pub rank: usize,
    /// `rank` sizes.
    pub dims: *const usize,
    /// Number of elements (the product of the dims).
    pub element_count: usize,
    /// Bytes at `data`.
    pub byte_len: usize,
}

/// The view of `t`: pointers into its storage.
fn view_of(t: &Tensor) -> OnnxpTensorView {
    macro_rules! raw {
        ($($variant:ident),*) => {
            match t.data() {
                $(DataRef::$variant(v) => (v.as_ptr().cast::<c_void>(), std::mem::size_of_val(v)),)*
            }
        };
    }
    let (data, byte_len) = raw!(
        F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool
    );
    OnnxpTensorView {
        data,
        dtype: t.dtype().into(),
        rank: t.shape().len(),
        dims: t.shape().as_ptr(),
        element_count: t.len(),
        byte_len,
    }
}

/// Caller memory a borrowed input uses in place.
#[derive(Debug)]
struct CallerBytes {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the bytes are only read, and the caller promised they stay valid
// and unmodified while a run may read them (`onnxp_context_set_input_borrowed`);
// reading them from any thread is sound under that promise.
unsafe impl Send for CallerBytes {}
// SAFETY: as for `Send`: shared reads only.
unsafe impl Sync for CallerBytes {}

impl SharedBytes for CallerBytes {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is non-NULL and valid for `len` bytes while a run
        // can call this (the caller's promise; checked non-NULL and `len >
        // 0` when made); the same slice on every call.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// The state of a context, shared with the handle of a run in flight.
#[derive(Debug)]
pub(crate) struct ContextState {
    /// `None` while lent to a run.
    ctx: Option<RuntimeContext>,
    /// Inputs set from caller memory without a copy, for the next run
    /// only: (name, address).
    borrowed: Vec<(String, usize)>,
    /// Inputs whose borrowed memory the last run gave back: runs fail until
    /// they are set again.
    dropped: Vec<String>,
}

impl ContextState {
    fn ctx(&mut self) -> Result<&mut RuntimeContext> {
        self.ctx.as_mut().ok_or_else(busy)
    }

    /// Lends the context to a run (hot path: two emptiness checks).
    pub(crate) fn lend(&mut self) -> Result<RuntimeContext> {
        if let Some(name) = self.dropped.first() {
            return Err(OnnxpError::new(
                OnnxpErrorKind::Input,
                format!(
                    "input `{name}` was borrowed for the previous run only: set it again before the next"
                ),
            ));
        }
        self.ctx.take().ok_or_else(busy)
    }

    /// Takes the context back from a finished run; borrowed inputs are
    /// dropped (the caller's memory is no longer read). A run that lost its
    /// context (never expected) leaves a fresh one for `session`.
    pub(crate) fn give_back(&mut self, ctx: Option<RuntimeContext>, session: &OnnxpSession) {
        let mut ctx = ctx.unwrap_or_else(|| RuntimeContext::new(&session.session));
        for (name, address) in self.borrowed.drain(..) {
            let still_borrowed = ctx
                .inputs()
                .iter()
                .any(|(n, t)| *n == name && view_of(t).data as usize == address);
            // A bound cache output may have replaced it: then it stays.
            if still_borrowed && ctx.set_input(&name, Tensor::default()).is_ok() {
                self.dropped.push(name);
            }
        }
        self.ctx = Some(ctx);
    }

    fn set_input(&mut self, name: &str, value: Tensor, borrowed: Option<usize>) -> Result<()> {
        self.ctx()?.set_input(name, value)?;
        self.borrowed.retain(|(n, _)| n != name);
        self.dropped.retain(|n| n != name);
        if let Some(address) = borrowed {
            self.borrowed.push((name.to_owned(), address));
        }
        Ok(())
    }
}

fn busy() -> OnnxpError {
    OnnxpError::new(
        OnnxpErrorKind::Busy,
        "the context is lent to a run in flight: wait for its handle (or release it) first",
    )
}

/// One run's inputs and outputs for one session. Reusing a context for the
/// next run reuses its buffers (a hot run allocates only for new inputs).
#[derive(Debug)]
pub struct OnnxpContext {
    pub(crate) session: Arc<OnnxpSession>,
    pub(crate) state: Arc<Mutex<ContextState>>,
}

impl OnnxpContext {
    /// The state, locked (a poisoned lock is taken over: every update of
    /// the state is a single assignment).
    pub(crate) fn lock(&self) -> MutexGuard<'_, ContextState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An output taken out of its context (`onnxp_context_take_output`): the
/// caller's, until `onnxp_tensor_release`.
#[derive(Debug)]
pub struct OnnxpTensor {
    tensor: Tensor,
}

/// # Safety
/// `context` is NULL or live.
unsafe fn context_arg<'a>(context: *const OnnxpContext) -> Result<&'a OnnxpContext> {
    // SAFETY: the caller's contract.
    unsafe { arg(context, "context") }
}

/// Writes a new, empty context for `session` to `*out`. The context keeps
/// the session alive.
///
/// Thread safety: any thread, concurrently with any call on the session.
///
/// # Safety
/// `session` is NULL or live; `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_context_create(
    session: *const OnnxpSession,
    out: *mut *mut OnnxpContext,
) -> *mut OnnxpError {
    boundary(|| {
        out_arg(out, "out")?;
        // SAFETY: NULL or live (the caller's contract).
        let s = unsafe { arg(session, "session") }?;
        let ctx = RuntimeContext::new(&s.session);
        // SAFETY: `session` came from `Arc::into_raw` (`onnxp_session_open`)
        // and its reference is live: one more strong count, taken over by
        // the `Arc` below.
        let session = unsafe {
            Arc::increment_strong_count(session);
            Arc::from_raw(session)
        };
        let context = Box::new(OnnxpContext {
            session,
            state: Arc::new(Mutex::new(ContextState {
                ctx: Some(ctx),
                borrowed: Vec::new(),
                dropped: Vec::new(),
            })),
        });
        // SAFETY: checked non-NULL; valid for a write (the caller's contract).
        unsafe { out.write(Box::into_raw(context)) };
        Ok(())
    })
}

/// Frees `context`. NULL is a no-op. A run in flight on it keeps what it
/// needs until it finishes; its handle then has no context to give back to.
///
/// Thread safety: once per context, when no other call on it is running.
///
/// # Safety
/// `context` is NULL or made by `onnxp_context_create` and not released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_context_release(context: *mut OnnxpContext) {
    quiet(|| {
        if !context.is_null() {
            // SAFETY: made by `Box::into_raw` in `onnxp_context_create`,
            // released once (the caller's contract).
            drop(unsafe { Box::from_raw(context) });
        }
    });
}

/// The tensor `dtype`/`dims` describe over the `byte_len` bytes at `data`.
///
/// # Safety
/// `dims` is NULL or valid for `rank` reads; `data` is NULL or valid for
/// `byte_len` reads.
unsafe fn input_tensor(
    name: &str,
    dtype: i32,
    dims: *const usize,
    rank: usize,
    data: *const c_void,
    byte_len: usize,
    borrow: bool,
) -> Result<(Tensor, Option<usize>)> {
    let dtype = input_type(dtype)?;
    // SAFETY: forwarded contract.
    let shape = unsafe { slice_arg(dims, rank, "dims") }?.to_vec();
    let elements = element_count(&shape).ok_or_else(|| {
        OnnxpError::new(
            OnnxpErrorKind::Input,
            format!("input `{name}`: shape {shape:?} overflows"),
        )
    })?;
    let needed = dtype.byte_len(elements as u64);
    if needed != Some(byte_len as u64) {
        return Err(OnnxpError::new(
            OnnxpErrorKind::Input,
            format!(
                "input `{name}`: {elements} {dtype} elements (shape {shape:?}) need {} bytes, not {byte_len}",
                needed.map_or_else(|| "more than 2^64".to_owned(), |n| n.to_string())
            ),
        ));
    }
    // SAFETY: forwarded contract (alignment is irrelevant for bytes).
    let bytes = unsafe { slice_arg(data.cast::<u8>(), byte_len, "data") }?;
    if borrow && byte_len > 0 {
        let caller = Arc::new(CallerBytes {
            ptr: bytes.as_ptr(),
            len: byte_len,
        });
        if let Some(t) = Tensor::shared(shape.clone(), dtype, caller, 0) {
            return Ok((t, Some(bytes.as_ptr() as usize)));
        }
    }
    if dtype == ElementType::Bool && bytes.iter().any(|&b| b > 1) {
        return Err(OnnxpError::new(
            OnnxpErrorKind::Input,
            format!("input `{name}`: a bool element is neither 0 nor 1"),
        ));
    }
    let data = TensorData::from_le_bytes(dtype, bytes)
        .ok_or_else(|| OnnxpError::invalid(format!("input `{name}`: {dtype} cannot be decoded")))?;
    let tensor = Tensor::new(shape, data)
        .map_err(|e| OnnxpError::new(OnnxpErrorKind::Input, format!("input `{name}`: {e}")))?;
    Ok((tensor, None))
}

/// # Safety
/// As `onnxp_context_set_input`.
#[allow(clippy::too_many_arguments)]
unsafe fn set_input(
    context: *mut OnnxpContext,
    name: *const c_char,
    dtype: i32,
    dims: *const usize,
    rank: usize,
    data: *const c_void,
    byte_len: usize,
    borrow: bool,
) -> *mut OnnxpError {
    boundary(|| {
        // SAFETY: NULL or live (the caller's contract).
        let context = unsafe { context_arg(context) }?;
        // SAFETY: NULL or NUL-terminated (the caller's contract).
        let name = unsafe { str_arg(name, "name") }?;
        // SAFETY: forwarded contract.
        let (tensor, borrowed) =
            unsafe { input_tensor(name, dtype, dims, rank, data, byte_len, borrow) }?;
        context.lock().set_input(name, tensor, borrowed)
    })
}

/// Sets input `name` to a copy of the `byte_len` bytes at `data`: `rank`
/// dims at `dims`, elements of `dtype` (an `OnnxpElementType` value) stored
/// row-major and little-endian. The caller's memory is not used after the
/// call returns. A size that does not match the dims fails with
/// `ONNXP_ERROR_KIND_INPUT`; an element type or shape the model does not
/// declare fails the run with `ONNXP_ERROR_KIND_INPUT`.
///
/// Thread safety: calls on one context are serialized: during an
/// `onnxp_run` on it they wait for the run; while it is lent to an
/// `onnxp_run_async` they answer `ONNXP_ERROR_KIND_BUSY`.
///
/// # Safety
/// `context` is NULL or live; `name` is NULL or NUL-terminated; `dims` is
/// NULL or valid for `rank` reads; `data` is NULL or valid for `byte_len`
/// reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_context_set_input(
    context: *mut OnnxpContext,
    name: *const c_char,
    dtype: i32,
    dims: *const usize,
    rank: usize,
    data: *const c_void,
    byte_len: usize,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe { set_input(context, name, dtype, dims, rank, data, byte_len, false) }
}

/// Sets input `name` to the caller's memory at `data` with no copy, for the
/// next run only, as `onnxp_context_set_input` describes it otherwise.
///
/// The caller promises that the `byte_len` bytes at `data` stay valid and
/// unmodified until that run has finished: `onnxp_run` returned, or the
/// run's handle was waited or released. The context then drops the input
/// (a later run fails with `ONNXP_ERROR_KIND_INPUT` until it is set again),
/// so the memory is never read after that run. Memory that cannot be used
/// in place (bool elements, an address misaligned for the type) is copied
/// instead, and the promise is not needed.
///
/// Thread safety: as `onnxp_context_set_input`.
///
/// # Safety
/// As `onnxp_context_set_input`, and the promise above.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_context_set_input_borrowed(
    context: *mut OnnxpContext,
    name: *const c_char,
    dtype: i32,
    dims: *const usize,
    rank: usize,
    data: *const c_void,
    byte_len: usize,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe { set_input(context, name, dtype, dims, rank, data, byte_len, true) }
}

/// Binds every KV-cache output to the input it becomes on the next run
/// (`present_key_0` to `past_key_0`, `present.0.key` to
/// `past_key_values.0.key`): after each successful run the output moves into
/// the input with no copy. Writes the number of pairs bound to `*pairs`
/// when `pairs` is not NULL.
///
/// Thread safety: as `onnxp_context_set_input`.
///
/// # Safety
/// `context` is NULL or live; `pairs` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_context_bind_kv_cache(
    context: *mut OnnxpContext,
    pairs: *mut usize,
) -> *mut OnnxpError {
    boundary(|| {
        // SAFETY: NULL or live (the caller's contract).
        let context = unsafe { context_arg(context) }?;
        let n = context.lock().ctx()?.bind_kv_cache();
        if !pairs.is_null() {
            // SAFETY: non-NULL; valid for a write (the caller's contract).
            unsafe { pairs.write(n) };
        }
        Ok(())
    })
}

/// Binds output `output` to input `input`: after each successful run the
/// output moves into the input with no copy (a caller-owned cache).
///
/// Thread safety: as `onnxp_context_set_input`.
///
/// # Safety
/// `context` is NULL or live; `output` and `input` are NULL or
/// NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_context_bind_cache(
    context: *mut OnnxpContext,
    output: *const c_char,
    input: *const c_char,
) -> *mut OnnxpError {
    boundary(|| {
        // SAFETY: NULL or live (the caller's contract).
        let context = unsafe { context_arg(context) }?;
        // SAFETY: NULL or NUL-terminated (the caller's contract).
        let (output, input) = unsafe { (str_arg(output, "output")?, str_arg(input, "input")?) };
        context.lock().ctx()?.bind_cache(output, input)?;
        Ok(())
    })
}

/// The error for an output `name` that `found` says nothing about.
fn missing_output(session: &OnnxpSession, name: &str, found: Option<&Tensor>) -> OnnxpError {
    let known = session.output_names().any(|o| o == name);
    OnnxpError::invalid(match (known, found) {
        (false, _) => format!("`{name}` is not an output of this model"),
        (true, None) => {
            format!("output `{name}` has no value: no run has finished on this context")
        }
        (true, Some(_)) => format!(
            "output `{name}` has no value: it was taken, or moved into the input it is bound to"
        ),
    })
}

/// Whether `t` is the placeholder a taken or bound output leaves behind
/// (a real rank-0 tensor has one element).
fn is_placeholder(t: &Tensor) -> bool {
    t.shape().is_empty() && t.is_empty()
}

/// Writes a view of output `name` of the last run to `*view`. The view
/// points into the context: valid until the next call that changes the
/// context (a run, setting an input, taking this output) or its release.
///
/// Thread safety: as `onnxp_context_set_input`.
///
/// # Safety
/// `context` is NULL or live; `name` is NULL or NUL-terminated; `view` is
/// NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_context_output(
    context: *mut OnnxpContext,
    name: *const c_char,
    view: *mut OnnxpTensorView,
) -> *mut OnnxpError {
    boundary(|| {
        out_arg(view, "view")?;
        // SAFETY: NULL or live (the caller's contract).
        let context = unsafe { context_arg(context) }?;
        // SAFETY: NULL or NUL-terminated (the caller's contract).
        let name = unsafe { str_arg(name, "name") }?;
        let mut state = context.lock();
        let found = state.ctx()?.output(name).ok();
        let t = found
            .filter(|t| !is_placeholder(t))
            .ok_or_else(|| missing_output(&context.session, name, found))?;
        // SAFETY: checked non-NULL; valid for a write (the caller's contract).
        unsafe { view.write(view_of(t)) };
        Ok(())
    })
}

/// Takes output `name` of the last run out of the context with no copy and
/// writes it to `*out`: the caller's until `onnxp_tensor_release`. The next
/// run makes a new one.
///
/// Thread safety: as `onnxp_context_set_input`.
///
/// # Safety
/// `context` is NULL or live; `name` is NULL or NUL-terminated; `out` is
/// NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_context_take_output(
    context: *mut OnnxpContext,
    name: *const c_char,
    out: *mut *mut OnnxpTensor,
) -> *mut OnnxpError {
    boundary(|| {
        out_arg(out, "out")?;
        // SAFETY: NULL or live (the caller's contract).
        let context = unsafe { context_arg(context) }?;
        // SAFETY: NULL or NUL-terminated (the caller's contract).
        let name = unsafe { str_arg(name, "name") }?;
        let mut state = context.lock();
        let ctx = state.ctx()?;
        match ctx.output(name).ok() {
            Some(t) if !is_placeholder(t) => {}
            found => return Err(missing_output(&context.session, name, found)),
        }
        let tensor = ctx.take_output(name).unwrap_or_default();
        // SAFETY: checked non-NULL; valid for a write (the caller's contract).
        unsafe { out.write(Box::into_raw(Box::new(OnnxpTensor { tensor }))) };
        Ok(())
    })
}

/// Writes a view of `tensor` to `*view`, valid until the tensor is
/// released.
///
/// Thread safety: any thread; a tensor may be read from several threads at
/// once.
///
/// # Safety
/// `tensor` is NULL or live; `view` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_tensor_view(
    tensor: *const OnnxpTensor,
    view: *mut OnnxpTensorView,
) -> *mut OnnxpError {
    boundary(|| {
        out_arg(view, "view")?;
        // SAFETY: NULL or live (the caller's contract).
        let t = unsafe { arg(tensor, "tensor") }?;
        // SAFETY: checked non-NULL; valid for a write (the caller's contract).
        unsafe { view.write(view_of(&t.tensor)) };
        Ok(())
    })
}

/// Frees `tensor`. NULL is a no-op.
///
/// Thread safety: once per tensor, when no other thread uses it.
///
/// # Safety
/// `tensor` is NULL or made by `onnxp_context_take_output` and not
/// released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_tensor_release(tensor: *mut OnnxpTensor) {
    quiet(|| {
        if !tensor.is_null() {
            // SAFETY: made by `Box::into_raw` in `onnxp_context_take_output`,
            // released once (the caller's contract).
            drop(unsafe { Box::from_raw(tensor) });
        }
    });
}
