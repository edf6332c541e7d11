//! Temporary memory a kernel allocates while it runs or packs (a transposed
//! operand, a reference product, packed panels).
//!
//! Every such buffer is sized by an input, a weight or an output that
//! already exists, so its size never overflows; it is still reserved
//! fallibly, so that memory the system refuses is a
//! [`KernelError::Allocation`] and never an abort. The runtime charges the
//! temporaries of a run before it starts through
//! [`crate::Operator::scratch_bytes`].

use crate::KernelError;

fn refused<T>(op: &'static str, len: usize) -> KernelError {
    KernelError::Allocation {
        op,
        bytes: len.saturating_mul(size_of::<T>()),
    }
}

/// `len` copies of `value`, or [`KernelError::Allocation`].
pub(crate) fn filled<T: Clone>(
    op: &'static str,
    len: usize,
    value: T,
) -> Result<Vec<T>, KernelError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| refused::<T>(op, len))?;
    v.resize(len, value);
    Ok(v)
}

/// An empty vector with room for `len` elements, or
/// [`KernelError::Allocation`].
pub(crate) fn with_capacity<T>(op: &'static str, len: usize) -> Result<Vec<T>, KernelError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| refused::<T>(op, len))?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_the_system_cannot_hold_is_an_error_not_an_abort() {
        let err = filled::<f32>("Test", usize::MAX / 8, 0.0).unwrap_err();
        assert!(
            matches!(err, KernelError::Allocation { op: "Test", bytes } if bytes > 1 << 60),
            "{err}"
        );
        let err = with_capacity::<u64>("Test", 1 << 61).unwrap_err();
        assert!(matches!(err, KernelError::Allocation { .. }), "{err}");
    }

    #[test]
    fn small_requests_are_served() {
        assert_eq!(filled("Test", 3, 7u8).unwrap(), vec![7, 7, 7]);
        let v: Vec<u16> = with_capacity("Test", 5).unwrap();
        assert!(v.is_empty() && v.capacity() >= 5);
    }
}
