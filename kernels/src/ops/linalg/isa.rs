//! Instruction-set selection for the matrix-product kernels (cold path).
//!
//! An [`Isa`] value other than [`Isa::Portable`] exists only when the running
//! CPU has its features: [`Isa::select`] and [`Isa::from_code`] intersect
//! with [`CpuFeatures::detect`]. The SIMD kernels rely on this invariant to
//! call their `#[target_feature]` functions.

use crate::CpuFeatures;

/// The kernel family a packed layout and its kernels are built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Isa {
    /// Scalar Rust; runs everywhere.
    Portable,
    /// AVX2 + FMA (`ymm`, 8 lanes).
    Avx2,
    /// AVX-512 F/BW/DQ/VL (`zmm`, 16 lanes).
    Avx512,
}

impl Isa {
    /// The best kernel family `cpu` asks for that this CPU also has.
    pub(crate) fn select(cpu: CpuFeatures) -> Self {
        let have = CpuFeatures::detect();
        if cpu.avx512 && have.avx512 {
            Self::Avx512
        } else if cpu.avx2 && have.avx2 {
            Self::Avx2
        } else {
            Self::Portable
        }
    }

    /// The name used in layout keys.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Portable => "portable",
            Self::Avx2 => "avx2",
            Self::Avx512 => "avx512",
        }
    }

    /// The code stored in packed headers.
    pub(crate) fn code(self) -> u64 {
        match self {
            Self::Portable => 0,
            Self::Avx2 => 1,
            Self::Avx512 => 2,
        }
    }

    /// The family a packed header names, if this CPU can run it.
    pub(crate) fn from_code(code: u64) -> Option<Self> {
        let isa = match code {
            0 => Self::Portable,
            1 => Self::Avx2,
            2 => Self::Avx512,
            _ => return None,
        };
        let have = CpuFeatures::detect();
        let ok = match isa {
            Self::Portable => true,
            Self::Avx2 => have.avx2,
            Self::Avx512 => have.avx512,
        };
        ok.then_some(isa)
    }

    /// The vector width of this family's plain loops ([`crate::vector`]).
    pub(crate) fn width(self) -> crate::vector::Width {
        crate::vector::Width::for_cpu(CpuFeatures {
            avx2: self != Self::Portable,
            avx512: self == Self::Avx512,
            avx512vnni: false,
            amx_int8: false,
        })
    }

    /// Rows of an f32 micro-tile (the height of an `A` panel).
    /// (The micro-kernels' `Arch::MR`, checked where they are defined.)
    pub(crate) const fn f32_mr(self) -> usize {
        match self {
            Self::Avx512 => 12,
            Self::Avx2 => 6,
            Self::Portable => 4,
        }
    }

    /// Width of an f32 `B` panel (columns per micro-tile).
    pub(crate) fn f32_nr(self) -> usize {
        match self {
            Self::Avx512 => 32,
            Self::Avx2 | Self::Portable => 16,
        }
    }

    /// Columns per 4-bit weight tile (one vector of lanes).
    pub(crate) fn q4_tile(self) -> usize {
        match self {
            Self::Avx512 => 16,
            Self::Avx2 | Self::Portable => 8,
        }
    }
}
