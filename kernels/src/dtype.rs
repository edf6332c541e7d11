//! Element types: what a tensor holds and how many bytes it takes.

/// Element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// 8-bit signed integer.
    I8,
    /// 16-bit signed integer.
    I16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 8-bit unsigned integer.
    U8,
    /// 16-bit unsigned integer.
    U16,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit unsigned integer.
    U64,
    /// One byte per element, 0 or 1.
    Bool,
    /// Signed 4-bit integers, two per byte (low nibble first). Storage only.
    I4,
    /// Unsigned 4-bit integers, two per byte (low nibble first). Storage only.
    U4,
}

impl ElementType {
    /// Bytes of `elements` values of this type, or `None` on overflow.
    /// Four-bit types pack two elements per byte, rounding up.
    pub fn byte_len(self, elements: u64) -> Option<u64> {
        match self {
            Self::I4 | Self::U4 => Some(elements.div_ceil(2)),
            Self::F64 | Self::I64 | Self::U64 => elements.checked_mul(8),
            Self::F32 | Self::I32 | Self::U32 => elements.checked_mul(4),
            Self::F16 | Self::BF16 | Self::I16 | Self::U16 => elements.checked_mul(2),
            Self::I8 | Self::U8 | Self::Bool => Some(elements),
        }
    }

    /// The type a tensor of this element type holds in memory: 4-bit
    /// values are unpacked one per byte (`I4` to `I8`, `U4` to `U8`) when
    /// read, every other type is itself.
    pub fn compute(self) -> Self {
        match self {
            Self::I4 => Self::I8,
            Self::U4 => Self::U8,
            t => t,
        }
    }

    /// The short lowercase name used in reports (`f32`, `u8`, `i4`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F64 => "f64",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
            Self::I8 => "i8",
            Self::I16 => "i16",
            Self::I32 => "i32",
            Self::I64 => "i64",
            Self::U8 => "u8",
            Self::U16 => "u16",
            Self::U32 => "u32",
            Self::U64 => "u64",
            Self::Bool => "bool",
            Self::I4 => "i4",
            Self::U4 => "u4",
        }
    }
}

impl std::fmt::Display for ElementType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
