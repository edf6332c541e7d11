//! Plain loops compiled for the CPU's vector instructions (hot path).
//!
//! The crate is built for the baseline x86-64 target (SSE2, no FMA), so a
//! loop the compiler vectorizes uses 4-lane vectors. [`run`] calls a
//! closure through a `#[target_feature]` function of the best family this
//! CPU has (AVX-512 or AVX2 + FMA); a closure marked `#[inline(always)]`,
//! and the `#[inline(always)]` helpers it calls, are inlined there and
//! their loops vectorize with 16- or 8-lane vectors (without the mark the
//! closure stays a separate baseline function). [`Width::fma`] tells the caller whether `f32::mul_add`
//! is one instruction (it is a libm call otherwise).

use crate::CpuFeatures;

/// The vector family a closure is compiled for. Only [`Width::detect`] and
/// [`Width::baseline`] make one, so a `Width` never names instructions the
/// CPU lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Width(Level);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The baseline target.
    Baseline,
    /// AVX2 and FMA.
    Avx2,
    /// AVX-512 F/BW/DQ/VL (and AVX2, FMA).
    Avx512,
}

impl Width {
    /// The best family of this CPU.
    pub(crate) fn detect() -> Self {
        let cpu = CpuFeatures::detect();
        Self(if cpu.avx512 {
            Level::Avx512
        } else if cpu.avx2 {
            Level::Avx2
        } else {
            Level::Baseline
        })
    }

    /// The best family `cpu` asks for that this CPU also has.
    pub(crate) fn for_cpu(cpu: CpuFeatures) -> Self {
        let have = CpuFeatures::detect();
        Self(if cpu.avx512 && have.avx512 {
            Level::Avx512
        } else if cpu.avx2 && have.avx2 {
            Level::Avx2
        } else {
            Level::Baseline
        })
    }

    /// The baseline target (every CPU).
    #[cfg(test)]
    pub(crate) fn baseline() -> Self {
        Self(Level::Baseline)
    }

    /// Whether `f32::mul_add` compiles to one instruction in a closure run
    /// at this width.
    pub(crate) fn fma(self) -> bool {
        self.0 != Level::Baseline
    }

    /// Every width this CPU runs, narrowest first.
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Self> {
        let best = Self::detect().0;
        [Level::Baseline, Level::Avx2, Level::Avx512]
            .into_iter()
            .filter(|&l| {
                l == Level::Baseline || l == Level::Avx2 && best != Level::Baseline || l == best
            })
            .map(Self)
            .collect()
    }
}

/// Runs `f` compiled for `width`.
#[inline(always)]
pub(crate) fn run<R>(width: Width, f: impl FnOnce() -> R) -> R {
    match width.0 {
        Level::Baseline => f(),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Width` above the baseline comes from `Width::detect`,
        // which saw AVX-512 F/BW/DQ/VL, AVX2 and FMA on this CPU.
        Level::Avx512 => unsafe { avx512(f) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above: `Width::detect` saw AVX2 and FMA.
        Level::Avx2 => unsafe { avx2(f) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => f(),
    }
}

/// # Safety
/// The CPU has AVX-512 F/BW/DQ/VL, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// `a * b + c`, fused when `FMA` (see [`Width::fma`]).
#[inline(always)]
pub(crate) fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_width_of_this_cpu_computes_the_same_loop() {
        let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.25 - 100.0).collect();
        let sum = |w: Width| run(w, || x.iter().map(|v| v * v).sum::<f32>());
        let want = sum(Width::baseline());
        let widths = Width::available();
        assert_eq!(widths[0], Width::baseline());
        assert_eq!(*widths.last().unwrap(), Width::detect());
        for w in widths {
            assert_eq!(sum(w), want, "{w:?}");
        }
        assert_eq!(madd::<true>(3.0, 4.0, 5.0), 17.0);
        assert_eq!(madd::<false>(3.0, 4.0, 5.0), 17.0);
    }
}
