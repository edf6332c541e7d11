//! QLinearConv's and ConvInteger's weights packed once (cold path): per
//! group, the product's `B` for [`super::qgemm`], or the filters for the
//! channel-major convolution ([`super::planar`]).

use super::operand::{bytes_of, check_columns, zero_points};
use super::planar;
use super::qgemm::{self, Arith, PackedB, QIsa, QMatrix};
use crate::{KernelError, PackedPart, PackedWeight, ParallelFor, Prepack, Tensor, TensorData};

/// Group `g`'s weights as the product's `B` (`[k = tap * C/group + c,
/// output channel]`), packed.
#[allow(clippy::too_many_arguments)]
pub(super) fn pack_group(
    w_shape: &[usize],
    group: usize,
    w: &[u8],
    w_signed: bool,
    zero: &[i32],
    g: usize,
    isa: QIsa,
    arith: Arith,
    par: &dyn ParallelFor,
) -> Result<(Vec<u64>, Vec<u8>), KernelError> {
    let maps = w_shape[0];
    let (cg, mg, taps) = (
        w_shape[1],
        maps / group,
        w_shape[2..].iter().product::<usize>(),
    );
    let k = cg * taps;
    let filters = &w[g * mg * k..][..mg * k];
    let zero: Vec<i32> = if zero.len() == 1 {
        zero.to_vec()
    } else {
        zero.get(g * mg..(g + 1) * mg)
            .ok_or_else(|| {
                KernelError::Shape(format!(
                    "w_zero_point has {} values for {maps} output channels",
                    zero.len()
                ))
            })?
            .to_vec()
    };
    // Row `t * cg + c` of `B`, column `n`: filter `n`'s `[c][t]`.
    let m = QMatrix {
        data: filters,
        signed: w_signed,
        k,
        n: mg,
        row_stride: 1,
        col_stride: k,
        taps,
    };
    Ok(qgemm::pack_b(&m, &zero, isa, arith, par))
}

/// Group `g`'s packed `B` in a [`ConvPrepack`] object.
pub(super) fn group_view<'a>(
    op: &'static str,
    p: &'a PackedWeight,
    g: usize,
) -> Result<PackedB<'a>, KernelError> {
    let (meta, data) = group_parts(op, p, g)?;
    PackedB::view(meta, data).ok_or_else(|| bad_group(op, p, g))
}

/// Group `g`'s filters packed for the channel-major convolution.
pub(super) fn planar_view<'a>(
    op: &'static str,
    p: &'a PackedWeight,
    g: usize,
) -> Result<planar::PackedW<'a>, KernelError> {
    let (meta, data) = group_parts(op, p, g)?;
    planar::PackedW::view(meta, data).ok_or_else(|| bad_group(op, p, g))
}

/// Group `g`'s two parts (`1 + 2 g`, `2 + 2 g`; part 0 is the header of
/// `W`'s shape).
fn group_parts<'a>(
    op: &'static str,
    p: &'a PackedWeight,
    g: usize,
) -> Result<(&'a [u64], &'a [u8]), KernelError> {
    let parts = p
        .parts
        .get(1 + 2 * g..3 + 2 * g)
        .ok_or_else(|| bad_group(op, p, g))?;
    match (parts[0].as_u64(), parts[1].as_u8()) {
        (Some(meta), Some(data)) => Ok((meta, data)),
        _ => Err(bad_group(op, p, g)),
    }
}

fn bad_group(op: &'static str, p: &PackedWeight, g: usize) -> KernelError {
    KernelError::Invalid {
        op,
        detail: format!(
            "packed weight `{}`: group {g} is missing or not valid",
            p.layout
        ),
    }
}

/// The `W` shape recorded in a [`ConvPrepack`] object's header.
pub(super) fn packed_w_shape(
    op: &'static str,
    p: &PackedWeight,
) -> Result<Vec<usize>, KernelError> {
    let bad = || KernelError::Invalid {
        op,
        detail: format!("packed weight `{}` has no valid header", p.layout),
    };
    let h = p.parts.first().and_then(|h| h.as_u64()).ok_or_else(bad)?;
    let shape: Vec<usize> = h
        .iter()
        .map(|&v| usize::try_from(v).map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    if shape.len() < 3 {
        return Err(bad());
    }
    Ok(shape)
}

/// Packs a constant convolution weight per group (and its zero point).
#[derive(Debug)]
pub(super) struct ConvPrepack {
    pub(super) op: &'static str,
    pub(super) layout: String,
    pub(super) consumes: Vec<usize>,
    pub(super) isa: QIsa,
    pub(super) arith: Arith,
    pub(super) group: usize,
    /// Packed for the channel-major convolution (`planar`).
    pub(super) planar: bool,
}

impl Prepack for ConvPrepack {
    fn layout(&self) -> &str {
        &self.layout
    }

    fn consumes(&self) -> &[usize] {
        &self.consumes
    }

    fn prepare(
        &self,
        sources: &[&Tensor],
        par: &dyn ParallelFor,
    ) -> Result<PackedWeight, KernelError> {
        let op = self.op;
        let w = sources
            .first()
            .ok_or_else(|| KernelError::Shape(format!("{op}: packing needs W")))?;
        let zero = zero_points(op, sources.get(1).copied())?;
        let (wb, w_signed) = bytes_of(op, w)?;
        let ws = w.shape();
        if ws.len() < 3 {
            return Err(KernelError::Shape(format!(
                "{op}: W {ws:?} has no kernel axes"
            )));
        }
        let maps = ws[0];
        if maps % self.group != 0 {
            return Err(KernelError::Shape(format!(
                "{op}: W {ws:?} does not split into {} groups",
                self.group
            )));
        }
        check_columns(op, "w_zero_point", zero.len(), maps)?;
        let mut parts: Vec<PackedPart> = Vec::with_capacity(1 + 2 * self.group);
        parts.push(TensorData::U64(ws.iter().map(|&d| d as u64).collect()).into());
        for g in 0..self.group {
            let (meta, data) = if self.planar {
                planar::pack(op, ws, self.group, wb, &zero, g)?
            } else {
                pack_group(
                    ws, self.group, wb, w_signed, &zero, g, self.isa, self.arith, par,
                )?
            };
            parts.push(TensorData::U64(meta).into());
            parts.push(TensorData::U8(data).into());
        }
        Ok(PackedWeight {
            layout: self.layout.clone(),
            parts,
        })
    }

    fn validate(&self, packed: &PackedWeight, shapes: &[&[usize]]) -> Result<(), KernelError> {
        crate::validate_common(&self.layout, None, packed)?;
        let maps = shapes.first().and_then(|s| s.first()).copied().unwrap_or(0);
        if packed.parts.len() != 1 + 2 * self.group
            || packed_w_shape(self.op, packed)?.as_slice() != shapes.first().copied().unwrap_or(&[])
        {
            return Err(KernelError::Invalid {
                op: self.op,
                detail: format!(
                    "packed weight `{}`: not {} groups of W {:?}",
                    packed.layout,
                    self.group,
                    shapes.first()
                ),
            });
        }
        for g in 0..self.group {
            let n = if self.planar {
                planar_view(self.op, packed, g)?.maps()
            } else {
                group_view(self.op, packed, g)?.n
            };
            if n * self.group != maps {
                return Err(KernelError::Invalid {
                    op: self.op,
                    detail: format!(
                        "packed weight `{}`: group {g} has {} channels, not {}",
                        packed.layout,
                        n,
                        maps / self.group
                    ),
                });
            }
        }
        Ok(())
    }
}
