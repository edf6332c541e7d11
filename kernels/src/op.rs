//! The operator interface between the runtime and the kernels (cold path for
//! construction and inference of shapes, hot path for `execute`).
//!
//! The runtime turns each ONNX node into a [`NodeSpec`], asks the
//! [`crate::registry`] for an [`Operator`], infers output types and shapes
//! once per input shape set, optionally prepacks constant weights through the
//! operator's [`Prepack`], and then calls `execute` with preallocated outputs.

use std::fmt::Debug;

use crate::{DataRef, ElementType, KernelError, PackedWeight, ParallelFor, Tensor};

/// Attribute access for one node, independent of the protobuf types.
///
/// The one reader every operator goes through. Each typed getter returns
/// `Ok(None)` when the attribute is absent and `Ok(Some(value))` when it is
/// present with that type; an attribute present with another type is
/// [`KernelError::AttributeType`], never a silent default. An implementation
/// refuses a node that names one attribute twice when it is built
/// ([`KernelError::DuplicateAttribute`]), so every name has one value.
pub trait Attributes {
    /// Names of every attribute present (to reject unknown ones).
    fn names(&self) -> Vec<String>;
    /// An `INT` attribute.
    fn int(&self, name: &str) -> Result<Option<i64>, KernelError>;
    /// A `FLOAT` attribute.
    fn float(&self, name: &str) -> Result<Option<f32>, KernelError>;
    /// An `INTS` attribute.
    fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, KernelError>;
    /// A `FLOATS` attribute.
    fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, KernelError>;
    /// A `STRING` attribute.
    fn string(&self, name: &str) -> Result<Option<String>, KernelError>;
    /// A `TENSOR` attribute, decoded (`Err` also when it cannot be decoded).
    fn tensor(&self, name: &str) -> Result<Option<Tensor>, KernelError>;
}

/// One node as the registry sees it.
#[derive(Clone, Copy)]
pub struct NodeSpec<'a> {
    /// Domain (`""` for ai.onnx).
    pub domain: &'a str,
    /// Operator type.
    pub op_type: &'a str,
    /// Imported opset version of `domain`.
    pub opset: i64,
    /// The node's attributes.
    pub attributes: &'a dyn Attributes,
    /// Number of inputs, counting empty (omitted optional) ones.
    pub inputs: usize,
    /// Number of outputs, counting empty ones.
    pub outputs: usize,
}

impl Debug for NodeSpec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSpec")
            .field("domain", &self.domain)
            .field("op_type", &self.op_type)
            .field("opset", &self.opset)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish()
    }
}

/// What resolution knows about one input: type, shape, whether it is a
/// constant (an initializer, a Constant node, a folded value) and, when the
/// constant is already in memory, its value. Resolution sees external
/// weights as `constant` with no value: their bytes are read later.
#[derive(Debug, Clone, Copy)]
pub struct InputInfo<'a> {
    /// Element type.
    pub dtype: ElementType,
    /// Dimensions.
    pub shape: &'a [usize],
    /// The value, when it is a constant already in memory.
    pub value: Option<&'a Tensor>,
    /// Whether the input is a constant (same value on every run).
    pub constant: bool,
}

impl<'a> InputInfo<'a> {
    /// A run-time value of this type and shape.
    pub fn dynamic(dtype: ElementType, shape: &'a [usize]) -> Self {
        Self {
            dtype,
            shape,
            value: None,
            constant: false,
        }
    }

    /// A constant whose value is in memory.
    pub fn known(value: &'a Tensor) -> Self {
        Self {
            dtype: value.dtype(),
            shape: value.shape(),
            value: Some(value),
            constant: true,
        }
    }

    /// A constant whose bytes are not loaded yet (an external weight).
    pub fn unloaded(dtype: ElementType, shape: &'a [usize]) -> Self {
        Self {
            dtype,
            shape,
            value: None,
            constant: true,
        }
    }
}

/// Type and shape of one output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputInfo {
    /// Element type.
    pub dtype: ElementType,
    /// Dimensions.
    pub shape: Vec<usize>,
}

/// CPU features that select kernels and packed layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CpuFeatures {
    /// AVX2 and FMA.
    pub avx2: bool,
    /// AVX-512 F, BW, DQ and VL.
    pub avx512: bool,
    /// AVX-512 VNNI.
    pub avx512vnni: bool,
    /// AMX-TILE and AMX-INT8 (`tdpbusd`), with the operating system's
    /// permission for this process to use the tile registers.
    pub amx_int8: bool,
}

impl CpuFeatures {
    /// The features of the running CPU.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 =
                std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
            let avx512 = avx2
                && std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512dq")
                && std::is_x86_feature_detected!("avx512vl");
            let avx512vnni = avx512 && std::is_x86_feature_detected!("avx512vnni");
            Self {
                avx2,
                avx512,
                avx512vnni,
                amx_int8: avx512vnni && amx_int8_permitted(),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Self::default()
        }
    }

    /// No SIMD: the portable layouts and scalar kernels.
    pub fn portable() -> Self {
        Self::default()
    }

    /// These features without AMX (AVX-512 VNNI at most).
    pub fn without_amx(self) -> Self {
        Self {
            amx_int8: false,
            ..self
        }
    }
}

/// Whether the CPU has AMX-TILE and AMX-INT8 and Linux lets this process
/// use the tile data registers: asked once (`arch_prctl`
/// `ARCH_REQ_XCOMP_PERM`), as the kernel requires before the first tile
/// instruction; without the permission, that instruction would kill the
/// process.
#[cfg(target_arch = "x86_64")]
fn amx_int8_permitted() -> bool {
    static PERMITTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PERMITTED.get_or_init(|| {
        // CPUID leaf 7, sub-leaf 0: EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
        let leaf = std::arch::x86_64::__cpuid_count(7, 0);
        if leaf.edx & (0b11 << 24) != 0b11 << 24 || !cfg!(target_os = "linux") {
            return false;
        }
        const ARCH_PRCTL: i64 = 158;
        const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
        const XFEATURE_XTILEDATA: i64 = 18;
        let status: i64;
        // SAFETY: the `arch_prctl` system call with ARCH_REQ_XCOMP_PERM
        // only extends the set of extended states this process may use; it
        // reads no memory of ours. `syscall` clobbers rcx and r11, declared.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") ARCH_PRCTL => status,
                in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        status == 0
    })
}

/// Choices of the caller for the operators it creates, beyond the CPU's
/// features ([`crate::registry::operator_with`]). The default is exact f32
/// arithmetic everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct KernelOptions {
    /// `com.microsoft` MatMulNBits nodes with `accuracy_level = 4` quantize
    /// their activations to int8 per block (symmetric, scale `max|a| / 127`)
    /// and use integer dot products, as ONNX Runtime's CPU provider does.
    /// Outputs then differ from the exact f32 product by up to about 1–2 %
    /// of the largest output magnitude; other nodes are unaffected.
    pub int8_activations: bool,
    /// The instruction sets the operators' kernels may use (they use the
    /// best of these that the CPU has); `None`: all the CPU has. Operators
    /// whose weights are packed take the family of their packing instead
    /// ([`Operator::prepack`]'s `cpu`).
    pub cpu: Option<CpuFeatures>,
}

/// How an operator packs its constant weights.
pub trait Prepack: Send + Sync + Debug {
    /// The layout key (see [`PackedWeight::layout`]).
    fn layout(&self) -> &str;
    /// Input positions the packed object replaces; `execute` receives `None`
    /// at these positions and the packed object instead.
    fn consumes(&self) -> &[usize];
    /// Packs `sources` (the consumed inputs, in `consumes` order). The same
    /// sources always give the same bytes: padding is zeroed.
    /// A large weight may be packed in parallel on `par`.
    fn prepare(
        &self,
        sources: &[&Tensor],
        par: &dyn ParallelFor,
    ) -> Result<PackedWeight, KernelError>;
    /// Bytes of the object [`Prepack::prepare`] makes from sources of
    /// these shapes (its [`PackedWeight::byte_len`]), so that a runtime can
    /// charge them before packing. `None`: not known in advance (the
    /// default). For shapes `prepare` refuses the value is meaningless.
    fn packed_bytes(&self, shapes: &[&[usize]]) -> Option<usize> {
        let _ = shapes;
        None
    }
    /// Checks that `packed` is an object this packing makes from sources
    /// of these shapes (in `consumes` order): its layout, header and part
    /// sizes — what a kernel would otherwise find wrong only when it runs.
    /// A runtime calls it on an object it did not pack itself (one read
    /// from a prepared cache) before using it. The default checks the
    /// layout and, where [`packed_bytes`](Self::packed_bytes) knows it,
    /// the size.
    ///
    /// # Errors
    /// [`KernelError::Invalid`] saying what does not match.
    fn validate(&self, packed: &PackedWeight, shapes: &[&[usize]]) -> Result<(), KernelError> {
        validate_common(self.layout(), self.packed_bytes(shapes), packed)
    }
    /// A packing that takes its sources a range of rows at a time, for
    /// sources of these shapes and element types (in `consumes` order, as
    /// [`Prepack::prepare`] would receive them), so that a runtime can read
    /// a large weight in pieces instead of holding it whole. Cheap: nothing
    /// is allocated before the first piece. `None` (the default): only
    /// whole sources. A shape or type `prepare` refuses is an error.
    fn in_rows(
        &self,
        sources: &[(&[usize], ElementType)],
    ) -> Option<Result<Box<dyn RowPacking>, KernelError>> {
        let _ = sources;
        None
    }
}

/// The checks every [`Prepack::validate`] makes: the layout is `layout`,
/// and the object has `bytes` bytes when they are known.
///
/// # Errors
/// [`KernelError::Invalid`] saying what does not match.
pub fn validate_common(
    layout: &str,
    bytes: Option<usize>,
    packed: &PackedWeight,
) -> Result<(), KernelError> {
    let bad = |detail: String| KernelError::Invalid {
        op: "Prepack",
        detail: format!("packed weight `{}`: {detail}", packed.layout),
    };
    if packed.layout != layout {
        return Err(bad(format!("not of layout `{layout}`")));
    }
    if let Some(bytes) = bytes
        && packed.byte_len() != bytes
    {
        return Err(bad(format!(
            "{} bytes where this packing makes {bytes}",
            packed.byte_len()
        )));
    }
    Ok(())
}

/// A packing fed a range of rows at a time ([`Prepack::in_rows`]). Each
/// consumed source, its elements in storage order, is [`rows`](Self::rows)
/// rows of equal length; [`pack`](Self::pack) takes the next rows of every
/// source, in order, and [`finish`](Self::finish) gives the object
/// [`Prepack::prepare`] makes from the whole sources, byte for byte.
pub trait RowPacking: Send + Debug {
    /// Rows of every source.
    fn rows(&self) -> usize;
    /// A piece holds a multiple of this many rows, except the last one.
    fn align(&self) -> usize;
    /// Packs the next `pieces[i].len() / (elements of source i) * rows`
    /// rows (the same count for every source), `pieces` in `consumes`
    /// order; a large piece may be packed in parallel on `par`.
    ///
    /// # Errors
    /// Pieces of unequal row counts, a count that is not a multiple of
    /// [`align`](Self::align) before the last rows, past the last row, or
    /// of the wrong type.
    fn pack(&mut self, pieces: &[DataRef<'_>], par: &dyn ParallelFor) -> Result<(), KernelError>;
    /// The packed object.
    ///
    /// # Errors
    /// Rows were left unpacked.
    fn finish(self: Box<Self>) -> Result<PackedWeight, KernelError>;
}

/// A resolved operator: attributes parsed and checked, ready to infer shapes
/// and execute.
pub trait Operator: Send + Sync + Debug {
    /// The operator type (for errors and dumps).
    fn name(&self) -> &'static str;

    /// The operator as a plan dump shows it: [`Operator::name`], and the
    /// nodes it runs fused (`Conv+BatchNormalization+Relu`).
    fn describe(&self) -> String {
        self.name().to_owned()
    }

    /// Output types and shapes for these inputs (`None` = omitted optional
    /// input). Errors on inconsistent inputs or on a shape operand that is
    /// not a constant.
    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError>;

    /// [`Operator::infer`], refusing an output shape whose element count
    /// overflows (so every shape the next operator's `infer` sees is a valid
    /// tensor's). The runtime calls this, never `infer` directly.
    fn infer_checked(
        &self,
        inputs: &[Option<InputInfo<'_>>],
    ) -> Result<Vec<OutputInfo>, KernelError> {
        let outs = self.infer(inputs)?;
        if let Some(o) = outs
            .iter()
            .find(|o| crate::element_count(&o.shape).is_none())
        {
            return Err(KernelError::Overflow {
                op: self.name(),
                what: format!("the element count of the output {:?}", o.shape),
            });
        }
        Ok(outs)
    }

    /// Whether this operator reads input 0 only as whole rows along axis
    /// 0, picked by the indices of input 1 (negative ones counting from the
    /// end, out of range an error), its one output being those rows in
    /// index order: `indices.shape + data.shape[1..]` (`Gather` with
    /// `axis = 0`). A runtime may then serve input 0 from storage row by
    /// row instead of holding the whole table.
    fn gathers_rows(&self) -> bool {
        false
    }

    /// Whether output 0 is input 0's elements, unchanged and in the same
    /// order, under another shape (Reshape, Flatten, Squeeze, Unsqueeze,
    /// Identity). A runtime may then give the output input 0's buffer when
    /// nothing reads input 0 afterwards, and not execute the node.
    fn passes_elements_through(&self) -> bool {
        false
    }

    /// Outputs computed from the input types and shapes alone, for operators
    /// that never read input elements (Shape, Size). Lowering folds these
    /// into constants even when their inputs are run-time values, so the
    /// `Shape -> Gather -> Concat -> Reshape` chains exporters emit are
    /// evaluated once per input-shape set. `None`: the operator reads
    /// elements (the default).
    fn fold_shapes(
        &self,
        inputs: &[Option<InputInfo<'_>>],
    ) -> Option<Result<Vec<Tensor>, KernelError>> {
        let _ = inputs;
        None
    }

    /// The packing this operator offers for these inputs on this CPU, when
    /// its weight inputs are constants. `None`: it takes every input as is.
    fn prepack(
        &self,
        inputs: &[Option<InputInfo<'_>>],
        cpu: CpuFeatures,
    ) -> Option<Box<dyn Prepack>> {
        let _ = (inputs, cpu);
        None
    }

    /// Bytes of temporary memory [`Operator::execute`] allocates for these
    /// inputs beyond its outputs (a transposed operand, a product computed
    /// aside): the runtime charges them before the run that needs them.
    /// Allocation failure inside `execute` is [`KernelError::Allocation`].
    /// Default: none.
    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        let _ = inputs;
        0
    }

    /// Pairs `(input, output)` this operator can compute in place: output
    /// `o` has input `i`'s type and shape and keeps its elements except
    /// those the operator writes (a KV cache a step appends rows to). A
    /// runtime may give every such output its input's buffer, when nothing
    /// reads the input afterwards, and call
    /// [`Operator::execute_in_place`] instead of [`Operator::execute`]; it
    /// applies all the pairs or none. Default: none.
    fn in_place(&self) -> &'static [(usize, usize)] {
        &[]
    }

    /// [`Operator::execute`] with every pair of [`Operator::in_place`]
    /// applied: each such input is `None` and its output already holds the
    /// input's elements. Only called on operators that declare pairs.
    fn execute_in_place(
        &self,
        inputs: &[Option<&Tensor>],
        packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let _ = (inputs, packed, outputs, par);
        Err(KernelError::Invalid {
            op: self.name(),
            detail: "this operator does not compute in place".into(),
        })
    }

    /// Computes `outputs` (preallocated with the inferred types and shapes)
    /// from `inputs`. `packed` is the object [`Operator::prepack`] described,
    /// when the runtime packed; the consumed inputs are then `None`.
    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError>;
}
