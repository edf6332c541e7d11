//! Tensor storage: owned, aligned and shared elements.

use std::sync::Arc;

use half::f16;

use super::{DataRef, ElementType, Tensor, TensorData};
use crate::SharedBytes;

/// Bytes whose start is 8-byte aligned (backed by `u64`s).
#[derive(Debug)]
struct Aligned(Vec<u64>);

impl SharedBytes for Aligned {
    fn bytes(&self) -> &[u8] {
        let len = self.0.len() * 8;
        &zerocopy::IntoBytes::as_bytes(&self.0[..])[..len]
    }
}

fn f32_bytes(values: &[f32]) -> Arc<dyn SharedBytes> {
    let mut words = vec![0u64; values.len().div_ceil(2) + 1];
    let bytes: &mut [u8] = zerocopy::IntoBytes::as_mut_bytes(&mut words[..]);
    for (i, v) in values.iter().enumerate() {
        bytes[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    Arc::new(Aligned(words))
}

#[test]
fn shared_tensors_read_in_place_and_equal_owned_ones() {
    let values = [1.5f32, -2.0, 0.25, 8.0];
    let bytes = f32_bytes(&values);
    let t = Tensor::shared(vec![2, 2], ElementType::F32, bytes.clone(), 0).expect("aligned");
    assert!(t.is_shared());
    assert_eq!(t.as_f32(), Some(&values[..]));
    assert_eq!(t.len(), 4);
    assert_eq!(t.dtype(), ElementType::F32);
    let owned = Tensor::from_f32(vec![2, 2], values.to_vec()).unwrap();
    assert_eq!(t, owned);
    assert_ne!(t, Tensor::from_f32(vec![4], values.to_vec()).unwrap());
    // A clone shares the bytes; an owned copy does not hold them.
    let c = t.clone();
    assert!(c.is_shared());
    assert_eq!(c.data(), DataRef::F32(&values));
    let before = Arc::strong_count(&bytes);
    let o = t.to_owned_elements();
    assert!(!o.is_shared());
    assert_eq!(o, owned);
    assert_eq!(Arc::strong_count(&bytes), before, "the copy holds no view");
    assert!(!owned.to_owned_elements().is_shared());
    assert!(format!("{t:?}").contains("Shared(f32 x 4)"));
    // f16 reads in place too (two per four bytes).
    let h = Tensor::shared(vec![2], ElementType::F16, bytes.clone(), 4).expect("f16");
    let want: Vec<f16> = [(-2.0f32).to_bits()]
        .iter()
        .flat_map(|b| [f16::from_bits(*b as u16), f16::from_bits((*b >> 16) as u16)])
        .collect();
    assert_eq!(h.as_f16(), Some(&want[..]));
}

#[test]
fn unsuitable_bytes_are_refused() {
    let bytes = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    // Misaligned start, range past the end, bool and 4-bit types.
    assert!(Tensor::shared(vec![2], ElementType::F32, bytes.clone(), 2).is_none());
    assert!(Tensor::shared(vec![6], ElementType::F32, bytes.clone(), 4).is_none());
    assert!(Tensor::shared(vec![2], ElementType::Bool, bytes.clone(), 0).is_none());
    assert!(Tensor::shared(vec![2], ElementType::U4, bytes.clone(), 0).is_none());
    assert!(Tensor::shared(vec![usize::MAX, 2], ElementType::U8, bytes.clone(), 0).is_none());
    // Bytes have no alignment to miss.
    let u = Tensor::shared(vec![3], ElementType::U8, bytes, 1).expect("u8");
    assert_eq!(u.as_u8().map(<[u8]>::len), Some(3));
}

#[test]
fn mutating_a_shared_tensor_copies_it_first() {
    let bytes = f32_bytes(&[1.0, 2.0]);
    let mut t = Tensor::shared(vec![2], ElementType::F32, bytes.clone(), 0).unwrap();
    let other = t.clone();
    t.as_f32_mut().unwrap()[0] = 7.0;
    assert!(!t.is_shared());
    assert_eq!(t.as_f32(), Some(&[7.0, 2.0][..]));
    // The bytes and other tensors sharing them are untouched.
    assert_eq!(other.as_f32(), Some(&[1.0, 2.0][..]));
    let mut dst = Tensor::shared(vec![2], ElementType::F32, bytes, 0).unwrap();
    dst.copy_from(&t).unwrap();
    assert_eq!(dst.as_f32(), Some(&[7.0, 2.0][..]));
    let (shape, data) = other.into_parts();
    assert_eq!((shape, data), (vec![2], TensorData::F32(vec![1.0, 2.0])));
    assert_eq!(t.to_i64_vec(), None);
}

#[test]
fn four_bit_values_unpack_low_nibble_first() {
    // 0x8f: low nibble 0xf, high 0x8; 0x17: 7, 1; an odd count ignores
    // the last high nibble.
    let bytes = [0x8f, 0x17, 0xa0];
    assert_eq!(
        TensorData::decode(ElementType::I4, &bytes, 5),
        Some(TensorData::I8(vec![-1, -8, 7, 1, 0]))
    );
    assert_eq!(
        TensorData::decode(ElementType::U4, &bytes, 6),
        Some(TensorData::U8(vec![15, 8, 7, 1, 0, 10]))
    );
    assert_eq!(TensorData::decode(ElementType::U4, &bytes, 7), None);
    assert_eq!(TensorData::decode(ElementType::U4, &bytes, 4), None);
    assert_eq!(ElementType::I4.compute(), ElementType::I8);
    assert_eq!(ElementType::U4.compute(), ElementType::U8);
    assert_eq!(ElementType::F32.compute(), ElementType::F32);
}

/// Address of a tensor's first element.
fn first_addr(t: &Tensor) -> usize {
    match t.data() {
        DataRef::F32(v) => v.as_ptr().addr(),
        DataRef::F64(v) => v.as_ptr().addr(),
        DataRef::F16(v) => v.as_ptr().addr(),
        DataRef::BF16(v) => v.as_ptr().addr(),
        DataRef::I8(v) => v.as_ptr().addr(),
        DataRef::I16(v) => v.as_ptr().addr(),
        DataRef::I32(v) => v.as_ptr().addr(),
        DataRef::I64(v) => v.as_ptr().addr(),
        DataRef::U8(v) => v.as_ptr().addr(),
        DataRef::U16(v) => v.as_ptr().addr(),
        DataRef::U32(v) => v.as_ptr().addr(),
        DataRef::U64(v) => v.as_ptr().addr(),
        DataRef::Bool(v) => v.as_ptr().addr(),
    }
}

#[test]
fn zeros_start_on_a_cache_line_and_are_written_in_place() {
    use ElementType as T;
    let types = [
        T::F32,
        T::F64,
        T::F16,
        T::BF16,
        T::I8,
        T::I16,
        T::I32,
        T::I64,
        T::U8,
        T::U16,
        T::U32,
        T::U64,
    ];
    for dtype in types {
        for shape in [vec![], vec![3], vec![5, 7], vec![300, 33]] {
            let t = Tensor::zeros(dtype, shape.clone()).unwrap();
            let n = crate::element_count(&shape).unwrap();
            let owned = Tensor::new(shape.clone(), TensorData::zeros(dtype, n).unwrap()).unwrap();
            assert_eq!((t.dtype(), t.len(), t.shape()), (dtype, n, &shape[..]));
            assert_eq!(t, owned, "{dtype} {shape:?}");
            assert_eq!(format!("{t:?}"), format!("{owned:?}"));
            assert_eq!(first_addr(&t) % 64, 0, "{dtype} {shape:?}");
            let c = t.clone();
            assert_eq!(first_addr(&c) % 64, 0);
            assert_ne!(first_addr(&c), first_addr(&t), "a clone owns its block");
        }
    }
    // Writes land in the block itself; copies keep the values.
    let mut t = Tensor::zeros(T::F32, vec![2, 40]).unwrap();
    let at = first_addr(&t);
    t.as_f32_mut().unwrap()[79] = 3.5;
    assert_eq!(first_addr(&t), at);
    let src = Tensor::from_f32(vec![80], (0..80).map(|i| i as f32).collect()).unwrap();
    t.copy_from(&src).unwrap();
    assert_eq!((first_addr(&t), t.shape()), (at, &[80][..]));
    assert_eq!(t, src);
    assert_eq!(t.to_owned_elements(), src);
    assert!(t.set_data(TensorData::F32(vec![0.0; 79])).is_err());
    let (shape, data) = t.clone().into_parts();
    assert_eq!((shape, data), src.clone().into_parts());
    // `data_mut` hands out a vector of the same values.
    match t.data_mut() {
        TensorData::F32(v) => v[0] = -1.0,
        other => panic!("f32 data, got {other:?}"),
    }
    assert_eq!(t.as_f32().unwrap()[..2], [-1.0, 1.0]);
    // Other types write in place through their accessors too.
    let mut h = Tensor::zeros(T::F16, vec![3]).unwrap();
    h.as_f16_mut().unwrap()[2] = f16::from_f32(2.0);
    assert_eq!(h.as_f16().unwrap()[2], f16::from_f32(2.0));
    let mut b = Tensor::zeros(T::Bool, vec![4]).unwrap();
    b.as_bool_mut().unwrap()[1] = true;
    assert_eq!(b.as_bool(), Some(&[false, true, false, false][..]));
    assert!(Tensor::zeros(T::I4, vec![2]).is_err());
    assert!(Tensor::zeros(T::F32, vec![usize::MAX, 2]).is_err());
    assert!(Tensor::zeros(T::F64, vec![usize::MAX / 4]).is_err());
}

#[test]
fn element_bytes_are_written_as_onnx_stores_them() {
    // Bytes written through the view read back as the little-endian
    // values they encode (what a row read from storage writes).
    let mut t = Tensor::zeros(ElementType::F16, vec![2]).unwrap();
    let raw: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|&x| f16::from_f32(x).to_le_bytes())
        .collect();
    t.view_mut().into_le_bytes().unwrap().copy_from_slice(&raw);
    assert_eq!(
        t.as_f16().unwrap(),
        [f16::from_f32(1.5), f16::from_f32(-2.0)]
    );
    let mut i = Tensor::from_i64(vec![1], vec![0]).unwrap();
    i.view_mut()
        .into_le_bytes()
        .unwrap()
        .copy_from_slice(&(-3i64).to_le_bytes());
    assert_eq!(i.as_i64().unwrap(), [-3]);
    // Not every byte is a `bool`.
    let mut b = Tensor::zeros(ElementType::Bool, vec![1]).unwrap();
    assert!(b.view_mut().into_le_bytes().is_none());
}

#[test]
fn into_shared_moves_the_elements_and_clones_share_them() {
    // An aligned output (what a run produces) and an owned vector.
    let mut aligned = Tensor::zeros(ElementType::F32, vec![2, 3]).unwrap();
    aligned
        .as_f32_mut()
        .unwrap()
        .copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let before = aligned.data().into_bytes().as_ptr();
    let shared = aligned.clone().into_shared();
    assert!(shared.is_shared());
    assert_eq!(shared, aligned);
    let moved = aligned.into_shared();
    assert_eq!(moved.data().into_bytes().as_ptr(), before, "no copy");
    let copy = moved.clone();
    assert!(copy.shares_bytes_with(&moved));

    let owned = Tensor::from_i64(vec![3], vec![7, -1, 9]).unwrap();
    let shared = owned.clone().into_shared();
    assert!(shared.is_shared());
    assert_eq!(shared.to_i64_vec(), Some(vec![7, -1, 9]));

    // Bool is never viewed in place: it stays owned.
    let flags = Tensor::new(vec![2], TensorData::Bool(vec![true, false])).unwrap();
    assert!(!flags.clone().into_shared().is_shared());
    assert_eq!(flags.clone().into_shared(), flags);
}
