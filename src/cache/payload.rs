//! The payload format (cold path): one prepared object — a packed weight or
//! a source tensor used as is — as the bytes of one `UINT8` initializer of
//! the companion model.
//!
//! ```text
//! 0   magic "OPPREP\0\x01"
//! 8   kind u32 (0 tensor, 1 packed), parts u32, layout length u32, rank u32
//! 24  layout (UTF-8), dims (u64 each)
//! ..  per part: ONNX data type u32, 0 u32, elements u64, offset u64
//! ..  zero padding; each part's little-endian elements at a 64-byte
//!     aligned offset, the last one ending the payload
//! ```
//!
//! Decoding checks every length and offset against the payload: a damaged
//! payload is a typed error, never a panic or an allocation larger than
//! the payload itself.

use std::sync::Arc;

use onnx_prepared_kernels::{
    DataRef, PackedPart, PackedWeight, SharedBytes, Tensor, TensorData, element_count,
};

use super::CacheError;
use crate::model::{element_type_from_onnx, element_type_to_onnx};

const MAGIC: &[u8; 8] = b"OPPREP\x00\x01";
/// Alignment of every part inside a payload (and of payloads in files).
pub const ALIGN: usize = 64;
const KIND_TENSOR: u32 = 0;
const KIND_PACKED: u32 = 1;

/// A decoded payload.
#[derive(Debug)]
pub enum Decoded {
    /// A source tensor used as is.
    Tensor(Tensor),
    /// A packed weight.
    Packed(PackedWeight),
}

/// The payload of a source tensor.
pub fn encode_tensor(t: &Tensor) -> Vec<u8> {
    encode(KIND_TENSOR, "", t.shape(), &[t.data()])
}

/// The payload of a packed weight.
pub fn encode_packed(p: &PackedWeight) -> Vec<u8> {
    let owned: Vec<TensorData> = p.parts.iter().map(PackedPart::to_data).collect();
    let parts: Vec<DataRef<'_>> = owned.iter().map(TensorData::view).collect();
    encode(KIND_PACKED, &p.layout, &[], &parts)
}

fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().next_multiple_of(ALIGN), 0);
}

fn encode(kind: u32, layout: &str, dims: &[usize], parts: &[DataRef<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    for v in [
        kind,
        parts.len() as u32,
        layout.len() as u32,
        dims.len() as u32,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(layout.as_bytes());
    for &d in dims {
        out.extend_from_slice(&(d as u64).to_le_bytes());
    }
    let table = out.len();
    out.resize(table + parts.len() * 24, 0);
    pad(&mut out);
    for (i, part) in parts.iter().enumerate() {
        pad(&mut out);
        let offset = out.len() as u64;
        append_le(&mut out, *part);
        let row = &mut out[table + i * 24..table + (i + 1) * 24];
        row[..4].copy_from_slice(&(element_type_to_onnx(part.dtype()) as u32).to_le_bytes());
        row[8..16].copy_from_slice(&(part.len() as u64).to_le_bytes());
        row[16..24].copy_from_slice(&offset.to_le_bytes());
    }
    out
}

/// Appends `data`'s elements, little endian.
fn append_le(out: &mut Vec<u8>, data: DataRef<'_>) {
    macro_rules! le {
        ($v:expr) => {{
            out.reserve(std::mem::size_of_val(&$v[..]));
            for x in $v.iter() {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }};
    }
    match data {
        DataRef::F32(v) => le!(v),
        DataRef::F64(v) => le!(v),
        DataRef::F16(v) => le!(v),
        DataRef::BF16(v) => le!(v),
        DataRef::I8(v) => le!(v),
        DataRef::I16(v) => le!(v),
        DataRef::I32(v) => le!(v),
        DataRef::I64(v) => le!(v),
        DataRef::U8(v) => out.extend_from_slice(v),
        DataRef::U16(v) => le!(v),
        DataRef::U32(v) => le!(v),
        DataRef::U64(v) => le!(v),
        DataRef::Bool(v) => out.extend(v.iter().map(|&b| b as u8)),
    }
}

/// A bounds-checked reader over a payload.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CacheError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| bad("the header runs past the end"))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, CacheError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, CacheError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
}

fn bad(detail: &str) -> CacheError {
    CacheError::Payload {
        detail: detail.to_owned(),
    }
}

/// Decodes a payload written by [`encode_tensor`] or [`encode_packed`]
/// into owned objects.
///
/// # Errors
/// [`CacheError::Payload`] for anything but a well-formed payload.
pub fn decode(bytes: &[u8]) -> Result<Decoded, CacheError> {
    decode_with(bytes, None)
}

/// [`decode`] of a payload held in shared bytes (a read-only mapping): a
/// packed weight's parts and a source tensor are used in place where the
/// type and alignment allow (no copy, no decode), and decoded otherwise.
///
/// # Errors
/// [`CacheError::Payload`] for anything but a well-formed payload.
pub fn decode_shared(bytes: Arc<dyn SharedBytes>) -> Result<Decoded, CacheError> {
    let view = bytes.clone();
    decode_with(view.bytes(), Some(bytes))
}

fn decode_with(bytes: &[u8], shared: Option<Arc<dyn SharedBytes>>) -> Result<Decoded, CacheError> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(MAGIC.len())? != MAGIC {
        return Err(bad("not an onnx-prepared payload (bad magic)"));
    }
    let (kind, parts, layout_len, rank) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
    let layout = std::str::from_utf8(r.take(layout_len as usize)?)
        .map_err(|_| bad("the layout is not UTF-8"))?
        .to_owned();
    let mut dims = Vec::new();
    for _ in 0..rank {
        dims.push(usize::try_from(r.u64()?).map_err(|_| bad("a dim does not fit in memory"))?);
    }
    // Every part takes 24 bytes of table: `parts` is bounded by the payload.
    let mut table = Vec::new();
    for _ in 0..parts {
        let (code, _, elements, offset) = (r.u32()?, r.u32()?, r.u64()?, r.u64()?);
        table.push((code, elements, offset));
    }
    // Checked first: every part's type and byte range.
    let mut checked = Vec::with_capacity(table.len());
    let mut end = 0usize;
    for (code, elements, offset) in table {
        let dtype = element_type_from_onnx(code as i32)
            .filter(|t| t.compute() == *t)
            .ok_or_else(|| bad("a part has an unknown element type"))?;
        let len = dtype
            .byte_len(elements)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| bad("a part's size overflows"))?;
        let start = usize::try_from(offset).map_err(|_| bad("a part's offset overflows"))?;
        let stop = start
            .checked_add(len)
            .filter(|&s| start >= r.at && s <= bytes.len() && start.is_multiple_of(ALIGN))
            .ok_or_else(|| bad("a part lies outside the payload or is misaligned"))?;
        if start < end {
            return Err(bad("parts overlap"));
        }
        end = stop;
        // `elements` fits: its bytes lie inside the payload.
        checked.push((dtype, elements as usize, start, stop));
    }
    if end != bytes.len() {
        return Err(bad("trailing bytes after the last part"));
    }
    let owned = |dtype, start: usize, stop: usize| {
        TensorData::from_le_bytes(dtype, &bytes[start..stop])
            .ok_or_else(|| bad("a part's bytes do not match its type"))
    };
    match kind {
        KIND_TENSOR => {
            let [(dtype, elements, start, stop)] =
                <[_; 1]>::try_from(checked).map_err(|_| bad("a tensor payload has one part"))?;
            if !layout.is_empty() {
                return Err(bad("a tensor payload names a layout"));
            }
            if element_count(&dims) != Some(elements) {
                return Err(bad(&format!(
                    "the tensor is inconsistent: shape {dims:?} with {elements} elements"
                )));
            }
            let in_place = shared.and_then(|s| Tensor::shared(dims.clone(), dtype, s, start));
            match in_place {
                Some(t) => Ok(Decoded::Tensor(t)),
                None => Tensor::new(dims, owned(dtype, start, stop)?)
                    .map(Decoded::Tensor)
                    .map_err(|e| bad(&format!("the tensor is inconsistent: {e}"))),
            }
        }
        KIND_PACKED if rank == 0 => {
            let mut parts = Vec::with_capacity(checked.len());
            for (dtype, elements, start, stop) in checked {
                let in_place = shared
                    .as_ref()
                    .and_then(|s| PackedPart::mapped(dtype, s.clone(), start, elements));
                parts.push(match in_place {
                    Some(part) => part,
                    None => owned(dtype, start, stop)?.into(),
                });
            }
            Ok(Decoded::Packed(PackedWeight { layout, parts }))
        }
        _ => Err(bad("unknown payload kind")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed() -> PackedWeight {
        PackedWeight {
            layout: "test-layout".into(),
            parts: vec![
                TensorData::U64(vec![1, 2, 3]).into(),
                TensorData::U8(vec![9; 5]).into(),
                TensorData::F32(vec![0.5, -1.25]).into(),
                TensorData::Bool(vec![true, false]).into(),
            ],
        }
    }

    #[test]
    fn objects_round_trip_with_aligned_parts() {
        let p = packed();
        let bytes = encode_packed(&p);
        let Decoded::Packed(back) = decode(&bytes).unwrap() else {
            panic!("a packed payload decodes to a packed weight");
        };
        assert_eq!(back, p);
        let t = Tensor::from_f32(vec![2, 3], (0..6).map(|x| x as f32).collect()).unwrap();
        let Decoded::Tensor(back) = decode(&encode_tensor(&t)).unwrap() else {
            panic!("a tensor payload decodes to a tensor");
        };
        assert_eq!(back, t);
        // Every part offset in the table is 64-byte aligned.
        let parts = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
        let table = 24 + "test-layout".len();
        for i in 0..parts {
            let at = table + i * 24 + 16;
            let offset = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
            assert_eq!(offset % ALIGN as u64, 0);
        }
    }

    /// A payload in shared bytes at an aligned address.
    #[derive(Debug)]
    struct Shared(Vec<u64>, usize);

    impl SharedBytes for Shared {
        fn bytes(&self) -> &[u8] {
            &zerocopy::IntoBytes::as_bytes(&self.0[..])[..self.1]
        }
    }

    #[test]
    fn shared_payloads_are_used_in_place() {
        let p = packed();
        let bytes = encode_packed(&p);
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        zerocopy::IntoBytes::as_mut_bytes(&mut words[..])[..bytes.len()].copy_from_slice(&bytes);
        let shared: Arc<dyn SharedBytes> = Arc::new(Shared(words, bytes.len()));
        let Decoded::Packed(back) = decode_shared(shared).unwrap() else {
            panic!("a packed payload decodes to a packed weight");
        };
        assert_eq!(back, p);
        let mapped: Vec<bool> = back.parts.iter().map(PackedPart::is_mapped).collect();
        // u64, u8 and f32 parts are used in place; bool is copied out.
        assert_eq!(mapped, [true, true, true, false]);
        // A source tensor is used in place too, a bool one is decoded.
        let f = Tensor::from_f32(vec![2, 3], (0..6).map(|x| x as f32 - 2.5).collect()).unwrap();
        let b = Tensor::new(vec![3], TensorData::Bool(vec![true, false, true])).unwrap();
        for (t, in_place) in [(f, true), (b, false)] {
            let bytes = encode_tensor(&t);
            let mut words = vec![0u64; bytes.len().div_ceil(8)];
            zerocopy::IntoBytes::as_mut_bytes(&mut words[..])[..bytes.len()]
                .copy_from_slice(&bytes);
            let Decoded::Tensor(back) =
                decode_shared(Arc::new(Shared(words, bytes.len()))).unwrap()
            else {
                panic!("a tensor payload decodes to a tensor");
            };
            assert_eq!(back, t);
            assert_eq!(back.is_shared(), in_place, "{t:?}");
        }
    }

    #[test]
    fn every_truncation_and_flipped_header_byte_is_a_typed_error() {
        let bytes = encode_packed(&packed());
        for cut in 0..bytes.len() {
            assert!(
                matches!(decode(&bytes[..cut]), Err(CacheError::Payload { .. })),
                "truncated at {cut}"
            );
        }
        // Flipping any header byte never panics (it may still decode when
        // the byte was padding).
        let header = 24 + "test-layout".len() + 4 * 24;
        for i in 0..header {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            let _ = decode(&b);
        }
        let mut huge = bytes.clone();
        huge[24 + "test-layout".len() + 8..][..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&huge).is_err());
    }
}
