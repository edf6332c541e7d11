//! Type-dispatch macros shared by every operator family (hot path: each
//! expands to one `match` on the element type, outside the element loops).

/// Runs `$body` with `$T` bound to the Rust type of `$dtype` when it is one
/// of the listed element types; `$err` otherwise.
macro_rules! dispatch_types {
    ($dtype:expr, [$($V:ident => $R:ty),* $(,)?], $T:ident => $body:expr, else $err:expr) => {{
        match $dtype {
            $($crate::ElementType::$V => {
                type $T = $R;
                $body
            })*
            #[allow(unreachable_patterns)]
            _ => $err,
        }
    }};
}

/// [`dispatch_types!`] over the numeric types (every type with a compute
/// representation but `bool`).
macro_rules! dispatch_num {
    ($dtype:expr, $T:ident => $body:expr, else $err:expr) => {
        dispatch_types!($dtype, [
            F32 => f32, F64 => f64, F16 => ::half::f16, BF16 => ::half::bf16,
            I8 => i8, I16 => i16, I32 => i32, I64 => i64,
            U8 => u8, U16 => u16, U32 => u32, U64 => u64,
        ], $T => $body, else $err)
    };
}

/// [`dispatch_types!`] over every type with a compute representation; `$err`
/// for the storage-only four-bit types.
macro_rules! dispatch_any {
    ($dtype:expr, $T:ident => $body:expr, else $err:expr) => {
        dispatch_types!($dtype, [
            F32 => f32, F64 => f64, F16 => ::half::f16, BF16 => ::half::bf16,
            I8 => i8, I16 => i16, I32 => i32, I64 => i64,
            U8 => u8, U16 => u16, U32 => u32, U64 => u64, Bool => bool,
        ], $T => $body, else $err)
    };
}
