//! Type-dispatch macros for the basic operators (hot path: each expands to
//! one `match` on the element type, outside the element loops).

/// Runs `$body` with `$T` bound to the Rust element type of `$dtype`, for
/// every type with a compute representation; `$err` for the storage-only
/// four-bit types.
macro_rules! dispatch_any {
    ($dtype:expr, $T:ident => $body:expr, else $err:expr) => {{
        use $crate::ElementType as E;
        match $dtype {
            E::F32 => {
                type $T = f32;
                $body
            }
            E::F64 => {
                type $T = f64;
                $body
            }
            E::F16 => {
                type $T = ::half::f16;
                $body
            }
            E::BF16 => {
                type $T = ::half::bf16;
                $body
            }
            E::I8 => {
                type $T = i8;
                $body
            }
            E::I16 => {
                type $T = i16;
                $body
            }
            E::I32 => {
                type $T = i32;
                $body
            }
            E::I64 => {
                type $T = i64;
                $body
            }
            E::U8 => {
                type $T = u8;
                $body
            }
            E::U16 => {
                type $T = u16;
                $body
            }
            E::U32 => {
                type $T = u32;
                $body
            }
            E::U64 => {
                type $T = u64;
                $body
            }
            E::Bool => {
                type $T = bool;
                $body
            }
            _ => $err,
        }
    }};
}
