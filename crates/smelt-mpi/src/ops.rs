//! Element-wise reduction kernels over raw bytes, as C computes them.
//!
//! The interposer reduces MPI buffers of predefined datatypes with predefined
//! operations. Buffers arrive as bytes (native byte order, possibly unaligned), so each
//! (element type, operation) pair is one kernel `fn(acc: &mut [u8], x: &[u8])` that
//! folds `x` into `acc` element by element: `acc[i] = op(acc[i], x[i])`.
//!
//! Semantics are those of C on the same types, which is what MPI specifies:
//! * integer `SUM` and `PROD` wrap (two's complement for signed types, modulo 2^n for
//!   unsigned ones), never saturate;
//! * `LAND`, `LOR`, `LXOR` treat non-zero as true and give 0 or 1;
//! * `MIN`/`MAX` on floating point keep the accumulated value unless the incoming one
//!   is strictly smaller/larger (NaN handling is therefore order-dependent, as in every
//!   MPI library);
//! * floating point allows `SUM`, `PROD`, `MIN`, `MAX` only, `C_BOOL` the logical
//!   operations only, `BYTE` the bitwise ones only (MPI's rules; other pairs are left
//!   to the MPI library, which reports the error).
//!
//! Kernels are plain loops over fixed-size chunks that the compiler vectorizes; no
//! crate offers element-wise arithmetic over unaligned native-endian byte buffers
//! keyed by a runtime (type, op) pair, which is why they are written here.

/// An element type the kernels know: how MPI's predefined datatypes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Elem {
    /// `int8_t`, `signed char`, ...
    I8,
    /// `int16_t`, `short`
    I16,
    /// `int32_t`, `int`, Fortran `INTEGER` (4 bytes)
    I32,
    /// `int64_t`, `long`, `long long`
    I64,
    /// `uint8_t`, `unsigned char`
    U8,
    /// `uint16_t`, `unsigned short`
    U16,
    /// `uint32_t`, `unsigned`
    U32,
    /// `uint64_t`, `unsigned long`, `unsigned long long`
    U64,
    /// `float`, Fortran `REAL`
    F32,
    /// `double`, Fortran `DOUBLE PRECISION`
    F64,
    /// C `_Bool` (one byte, 0 or 1)
    Bool,
    /// `MPI_BYTE`: uninterpreted bytes (bitwise operations only)
    Byte,
}

impl Elem {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Elem::I8 | Elem::U8 | Elem::Bool | Elem::Byte => 1,
            Elem::I16 | Elem::U16 => 2,
            Elem::I32 | Elem::U32 | Elem::F32 => 4,
            Elem::I64 | Elem::U64 | Elem::F64 => 8,
        }
    }

    /// A signed integer of `size` bytes.
    pub fn signed(size: usize) -> Option<Elem> {
        match size {
            1 => Some(Elem::I8),
            2 => Some(Elem::I16),
            4 => Some(Elem::I32),
            8 => Some(Elem::I64),
            _ => None,
        }
    }

    /// An unsigned integer of `size` bytes.
    pub fn unsigned(size: usize) -> Option<Elem> {
        match size {
            1 => Some(Elem::U8),
            2 => Some(Elem::U16),
            4 => Some(Elem::U32),
            8 => Some(Elem::U64),
            _ => None,
        }
    }

    /// A floating-point type of `size` bytes.
    pub fn float(size: usize) -> Option<Elem> {
        match size {
            4 => Some(Elem::F32),
            8 => Some(Elem::F64),
            _ => None,
        }
    }
}

/// MPI's predefined reduction operations that the kernels implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MpiOp {
    /// `MPI_SUM`
    Sum,
    /// `MPI_PROD`
    Prod,
    /// `MPI_MIN`
    Min,
    /// `MPI_MAX`
    Max,
    /// `MPI_LAND`
    Land,
    /// `MPI_LOR`
    Lor,
    /// `MPI_LXOR`
    Lxor,
    /// `MPI_BAND`
    Band,
    /// `MPI_BOR`
    Bor,
    /// `MPI_BXOR`
    Bxor,
}

impl MpiOp {
    /// Every operation, in MPI's order.
    pub const ALL: [MpiOp; 10] = [
        MpiOp::Sum,
        MpiOp::Prod,
        MpiOp::Min,
        MpiOp::Max,
        MpiOp::Land,
        MpiOp::Lor,
        MpiOp::Lxor,
        MpiOp::Band,
        MpiOp::Bor,
        MpiOp::Bxor,
    ];

    /// The MPI name (`MPI_SUM`, ...).
    pub fn name(self) -> &'static str {
        match self {
            MpiOp::Sum => "MPI_SUM",
            MpiOp::Prod => "MPI_PROD",
            MpiOp::Min => "MPI_MIN",
            MpiOp::Max => "MPI_MAX",
            MpiOp::Land => "MPI_LAND",
            MpiOp::Lor => "MPI_LOR",
            MpiOp::Lxor => "MPI_LXOR",
            MpiOp::Band => "MPI_BAND",
            MpiOp::Bor => "MPI_BOR",
            MpiOp::Bxor => "MPI_BXOR",
        }
    }
}

/// A kernel: folds `x` into `acc` element by element (`acc.len() == x.len()`, a
/// multiple of the element size; a shorter `x` folds only its part).
pub type Combine = fn(&mut [u8], &[u8]);

/// A fixed-size value stored as native-endian bytes.
trait Elt: Copy {
    const N: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
}

macro_rules! elt {
    ($($t:ty),*) => {$(
        impl Elt for $t {
            const N: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn load(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_ne_bytes(a)
            }
            #[inline(always)]
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_ne_bytes());
            }
        }
    )*};
}
elt!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

/// `acc[i] = f(acc[i], x[i])` over elements of type `T`.
#[inline(always)]
fn fold<T: Elt>(acc: &mut [u8], x: &[u8], f: impl Fn(T, T) -> T) {
    for (a, b) in acc.chunks_exact_mut(T::N).zip(x.chunks_exact(T::N)) {
        f(T::load(a), T::load(b)).store(a);
    }
}

macro_rules! int_kernel {
    ($t:ty, $op:expr) => {
        match $op {
            MpiOp::Sum => Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| p.wrapping_add(q))),
            MpiOp::Prod => {
                Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| p.wrapping_mul(q)))
            }
            MpiOp::Min => Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| p.min(q))),
            MpiOp::Max => Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| p.max(q))),
            MpiOp::Land => {
                Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| (p != 0 && q != 0) as $t))
            }
            MpiOp::Lor => {
                Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| (p != 0 || q != 0) as $t))
            }
            MpiOp::Lxor => {
                Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| ((p != 0) != (q != 0)) as $t))
            }
            MpiOp::Band => Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| p & q)),
            MpiOp::Bor => Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| p | q)),
            MpiOp::Bxor => Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| p ^ q)),
        }
    };
}

macro_rules! float_kernel {
    ($t:ty, $op:expr) => {
        match $op {
            MpiOp::Sum => Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| p + q)),
            MpiOp::Prod => Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| p * q)),
            MpiOp::Min => {
                Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| if q < p { q } else { p }))
            }
            MpiOp::Max => {
                Some(|a: &mut [u8], x: &[u8]| fold::<$t>(a, x, |p, q| if q > p { q } else { p }))
            }
            _ => None,
        }
    };
}

/// The kernel for `op` on `elem`, or `None` where MPI does not define the pair
/// (bitwise or logical operations on floating point, arithmetic on `C_BOOL` or
/// `BYTE`).
pub fn combiner(elem: Elem, op: MpiOp) -> Option<Combine> {
    match elem {
        Elem::I8 => int_kernel!(i8, op),
        Elem::I16 => int_kernel!(i16, op),
        Elem::I32 => int_kernel!(i32, op),
        Elem::I64 => int_kernel!(i64, op),
        Elem::U8 => int_kernel!(u8, op),
        Elem::U16 => int_kernel!(u16, op),
        Elem::U32 => int_kernel!(u32, op),
        Elem::U64 => int_kernel!(u64, op),
        Elem::F32 => float_kernel!(f32, op),
        Elem::F64 => float_kernel!(f64, op),
        Elem::Bool => match op {
            MpiOp::Land => {
                Some(|a: &mut [u8], x: &[u8]| fold::<u8>(a, x, |p, q| (p != 0 && q != 0) as u8))
            }
            MpiOp::Lor => {
                Some(|a: &mut [u8], x: &[u8]| fold::<u8>(a, x, |p, q| (p != 0 || q != 0) as u8))
            }
            MpiOp::Lxor => {
                Some(|a: &mut [u8], x: &[u8]| fold::<u8>(a, x, |p, q| ((p != 0) != (q != 0)) as u8))
            }
            _ => None,
        },
        Elem::Byte => match op {
            MpiOp::Band => Some(|a: &mut [u8], x: &[u8]| fold::<u8>(a, x, |p, q| p & q)),
            MpiOp::Bor => Some(|a: &mut [u8], x: &[u8]| fold::<u8>(a, x, |p, q| p | q)),
            MpiOp::Bxor => Some(|a: &mut [u8], x: &[u8]| fold::<u8>(a, x, |p, q| p ^ q)),
            _ => None,
        },
    }
}

/// Why `combiner(elem, op)` is `None`, for the fallback report.
pub fn unsupported_reason(elem: Elem) -> &'static str {
    match elem {
        Elem::F32 | Elem::F64 => "logical or bitwise operation on floating point",
        Elem::Bool => "arithmetic or bitwise operation on MPI_C_BOOL",
        Elem::Byte => "non-bitwise operation on MPI_BYTE",
        _ => "operation not defined for the datatype",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Elt>(v: &[T]) -> Vec<u8> {
        let mut out = vec![0u8; v.len() * T::N];
        for (c, x) in out.chunks_exact_mut(T::N).zip(v) {
            x.store(c);
        }
        out
    }

    fn vals<T: Elt>(b: &[u8]) -> Vec<T> {
        b.chunks_exact(T::N).map(T::load).collect()
    }

    fn apply<T: Elt>(e: Elem, op: MpiOp, a: &[T], x: &[T]) -> Vec<T> {
        let mut acc = bytes(a);
        combiner(e, op).expect("supported")(&mut acc, &bytes(x));
        vals(&acc)
    }

    #[test]
    fn integer_arithmetic_wraps_as_in_c() {
        assert_eq!(
            apply::<u8>(Elem::U8, MpiOp::Sum, &[250, 1], &[10, 2]),
            [4, 3]
        );
        assert_eq!(apply::<u16>(Elem::U16, MpiOp::Sum, &[65535], &[1]), [0]);
        assert_eq!(apply::<i8>(Elem::I8, MpiOp::Sum, &[127], &[1]), [-128]);
        assert_eq!(
            apply::<i32>(Elem::I32, MpiOp::Prod, &[i32::MAX], &[2]),
            [-2]
        );
        assert_eq!(
            apply::<u64>(Elem::U64, MpiOp::Prod, &[u64::MAX], &[3]),
            [u64::MAX - 2]
        );
        assert_eq!(
            apply::<i64>(Elem::I64, MpiOp::Min, &[-5, 7], &[3, 9]),
            [-5, 7]
        );
        assert_eq!(
            apply::<u32>(Elem::U32, MpiOp::Max, &[5, 7], &[3, 9]),
            [5, 9]
        );
    }

    #[test]
    fn logical_and_bitwise() {
        let a = [0i16, 0, 5, -3];
        let b = [0i16, 2, 0, 4];
        assert_eq!(apply(Elem::I16, MpiOp::Land, &a, &b), [0, 0, 0, 1]);
        assert_eq!(apply(Elem::I16, MpiOp::Lor, &a, &b), [0, 1, 1, 1]);
        assert_eq!(apply(Elem::I16, MpiOp::Lxor, &a, &b), [0, 1, 1, 0]);
        assert_eq!(apply(Elem::I16, MpiOp::Band, &a, &b), [0, 0, 0, 4]);
        assert_eq!(apply(Elem::I16, MpiOp::Bor, &a, &b), [0, 2, 5, -3 | 4]);
        assert_eq!(apply(Elem::I16, MpiOp::Bxor, &a, &b), [0, 2, 5, -3 ^ 4]);
        assert_eq!(
            apply::<u8>(Elem::Bool, MpiOp::Lxor, &[1, 1, 0], &[1, 0, 0]),
            [0, 1, 0]
        );
        assert_eq!(
            apply::<u8>(Elem::Byte, MpiOp::Bxor, &[0xf0], &[0xff]),
            [0x0f]
        );
    }

    #[test]
    fn floats_and_their_rules() {
        assert_eq!(
            apply::<f64>(Elem::F64, MpiOp::Sum, &[0.5, 1e300], &[0.25, 1e300]),
            [0.75, 2e300]
        );
        assert_eq!(
            apply::<f32>(Elem::F32, MpiOp::Min, &[1.0, -2.0], &[0.5, 3.0]),
            [0.5, -2.0]
        );
        assert_eq!(
            apply::<f32>(Elem::F32, MpiOp::Max, &[1.0, -2.0], &[0.5, 3.0]),
            [1.0, 3.0]
        );
        for op in [
            MpiOp::Land,
            MpiOp::Lor,
            MpiOp::Lxor,
            MpiOp::Band,
            MpiOp::Bor,
            MpiOp::Bxor,
        ] {
            assert!(combiner(Elem::F64, op).is_none());
            assert!(combiner(Elem::F32, op).is_none());
        }
        assert!(combiner(Elem::Bool, MpiOp::Sum).is_none());
        assert!(combiner(Elem::Byte, MpiOp::Sum).is_none());
        for op in MpiOp::ALL {
            assert!(combiner(Elem::U16, op).is_some(), "{}", op.name());
        }
    }

    #[test]
    fn unaligned_buffers() {
        let mut acc = [0u8; 1 + 8 * 3];
        let x = bytes::<u64>(&[1, 2, 3]);
        bytes::<u64>(&[10, 20, 30])
            .iter()
            .enumerate()
            .for_each(|(i, b)| acc[1 + i] = *b);
        combiner(Elem::U64, MpiOp::Sum).unwrap()(&mut acc[1..], &x);
        assert_eq!(vals::<u64>(&acc[1..]), [11, 22, 33]);
    }
}
