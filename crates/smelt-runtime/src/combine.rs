//! Element-wise combining of slices for the predefined operations ([`ReduceOp`]) and
//! element types ([`Elem`]), at memory speed.
//!
//! Every kernel is one `match` on the operation outside the loop, then a loop over
//! fixed-width blocks of [`LANES`] elements (`[T; LANES]` arrays, so the compiler knows
//! the trip count and vectorises the body) and a scalar tail: no per-element closure,
//! no dynamic dispatch. Checked on x86-64 (`cargo rustc --release -p smelt-runtime
//! --lib -- --emit asm`, the baseline target without AVX): `f64`'s `combine_slices`
//! with [`ReduceOp::Sum`] compiles to eight packed `addpd` per block of 16 values
//! (`movupd` loads, no scalar `addsd` in the loop; `minpd`/`maxpd`/`mulpd` for the
//! other operations), and `combine_le_bytes` on aligned bytes takes the same code
//! (the bytes are viewed as values, no copy). `smelt bench large` has a section
//! timing the combine alone
//! against a plain `for` loop and `memcpy`.
//!
//! The operations are all commutative and associative in exact arithmetic; for
//! floating point they are commutative bit for bit (IEEE addition and multiplication
//! are, and `min`/`max` here are [`f64::min`]/[`f64::max`], which ignore a NaN on
//! either side), so each algorithm's *grouping* (documented in `docs/runtime.md`)
//! decides the bits, not the side an operand is on.

use crate::GroupError;

/// Elements per block of the kernels' loops.
pub const LANES: usize = 16;

/// A predefined reduction operation (MPI's `MPI_SUM`, `MPI_PROD`, `MPI_MIN`,
/// `MPI_MAX`, `MPI_BAND`, `MPI_BOR`, `MPI_BXOR`, `MPI_LAND`, `MPI_LOR`, `MPI_LXOR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `a + b` (wrapping for integers).
    Sum,
    /// `a * b` (wrapping for integers).
    Prod,
    /// The smaller (floats: [`f64::min`], a NaN loses).
    Min,
    /// The larger (floats: [`f64::max`], a NaN loses).
    Max,
    /// Bitwise and (integers only).
    BitAnd,
    /// Bitwise or (integers only).
    BitOr,
    /// Bitwise exclusive or (integers only).
    BitXor,
    /// 1 if both are non-zero, else 0 (integers only).
    LogicalAnd,
    /// 1 if either is non-zero, else 0 (integers only).
    LogicalOr,
    /// 1 if exactly one is non-zero, else 0 (integers only).
    LogicalXor,
}

impl ReduceOp {
    /// Every operation.
    pub const ALL: [ReduceOp; 10] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::BitAnd,
        ReduceOp::BitOr,
        ReduceOp::BitXor,
        ReduceOp::LogicalAnd,
        ReduceOp::LogicalOr,
        ReduceOp::LogicalXor,
    ];

    /// The operation's name (`sum`, `prod`, `min`, `max`, `band`, `bor`, `bxor`,
    /// `land`, `lor`, `lxor`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::BitAnd => "band",
            ReduceOp::BitOr => "bor",
            ReduceOp::BitXor => "bxor",
            ReduceOp::LogicalAnd => "land",
            ReduceOp::LogicalOr => "lor",
            ReduceOp::LogicalXor => "lxor",
        }
    }

    /// True for the operations defined on integers only (bitwise and logical).
    pub fn integer_only(self) -> bool {
        !matches!(
            self,
            ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Min | ReduceOp::Max
        )
    }

    /// `Ok` if this operation is defined on `T`, else [`GroupError::Invalid`] naming both.
    pub fn check<T: Elem>(self) -> Result<(), GroupError> {
        if T::FLOAT && self.integer_only() {
            return Err(GroupError::Invalid(format!(
                "reduction operation {} is not defined on {} (bitwise and logical operations take integers)",
                self.name(),
                T::NAME
            )));
        }
        Ok(())
    }
}

impl std::fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ReduceOp {
    type Err = String;
    fn from_str(s: &str) -> Result<ReduceOp, String> {
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                format!("unknown reduction operation {s:?} (sum, prod, min, max, band, bor, bxor, land, lor, lxor)")
            })
    }
}

/// A predefined element type of the fast reductions: the integers of 8 to 64 bits
/// and `f32`, `f64`. Plain old data, so a slice of them is lent and combined as it
/// lies in memory (no packing).
pub trait Elem: crate::Word + bytemuck::Pod + PartialEq + std::fmt::Debug {
    /// The type's name, for messages.
    const NAME: &'static str;
    /// True for `f32` and `f64`.
    const FLOAT: bool;
    /// `acc[i] = acc[i] op other[i]` over the shorter of the two. `op` must be
    /// defined on the type ([`ReduceOp::check`]); an integer-only operation on a
    /// float leaves `acc` as it is.
    fn combine_slices(op: ReduceOp, acc: &mut [Self], other: &[Self]);
    /// `a op b` for one pair (the reference the tests compare the kernels with).
    fn combine_one(op: ReduceOp, a: Self, b: Self) -> Self;
}

/// `acc[i] = f(acc[i], other[i])` in blocks of [`LANES`] (the expression is pasted
/// into the loop body, so each operation gets its own vectorised loop).
macro_rules! lanes {
    ($acc:ident, $other:ident, |$a:ident, $b:ident| $e:expr) => {{
        let n = $acc.len().min($other.len());
        let (acc, other) = (&mut $acc[..n], &$other[..n]);
        let mut ac = acc.chunks_exact_mut(LANES);
        let mut oc = other.chunks_exact(LANES);
        for (x, y) in (&mut ac).zip(&mut oc) {
            let x: &mut [_; LANES] = x.try_into().expect("a block of LANES");
            let y: &[_; LANES] = y.try_into().expect("a block of LANES");
            for i in 0..LANES {
                let ($a, $b) = (x[i], y[i]);
                x[i] = $e;
            }
        }
        for (x, y) in ac.into_remainder().iter_mut().zip(oc.remainder()) {
            let ($a, $b) = (*x, *y);
            *x = $e;
        }
    }};
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const NAME: &'static str = stringify!($t);
            const FLOAT: bool = false;
            fn combine_slices(op: ReduceOp, acc: &mut [$t], other: &[$t]) {
                match op {
                    ReduceOp::Sum => lanes!(acc, other, |a, b| a.wrapping_add(b)),
                    ReduceOp::Prod => lanes!(acc, other, |a, b| a.wrapping_mul(b)),
                    ReduceOp::Min => lanes!(acc, other, |a, b| a.min(b)),
                    ReduceOp::Max => lanes!(acc, other, |a, b| a.max(b)),
                    ReduceOp::BitAnd => lanes!(acc, other, |a, b| a & b),
                    ReduceOp::BitOr => lanes!(acc, other, |a, b| a | b),
                    ReduceOp::BitXor => lanes!(acc, other, |a, b| a ^ b),
                    ReduceOp::LogicalAnd => {
                        lanes!(acc, other, |a, b| ((a != 0) & (b != 0)) as $t)
                    }
                    ReduceOp::LogicalOr => {
                        lanes!(acc, other, |a, b| ((a != 0) | (b != 0)) as $t)
                    }
                    ReduceOp::LogicalXor => {
                        lanes!(acc, other, |a, b| ((a != 0) ^ (b != 0)) as $t)
                    }
                }
            }
            fn combine_one(op: ReduceOp, a: $t, b: $t) -> $t {
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Min => if b < a { b } else { a },
                    ReduceOp::Max => if b > a { b } else { a },
                    ReduceOp::BitAnd => a & b,
                    ReduceOp::BitOr => a | b,
                    ReduceOp::BitXor => a ^ b,
                    ReduceOp::LogicalAnd => (a != 0 && b != 0) as $t,
                    ReduceOp::LogicalOr => (a != 0 || b != 0) as $t,
                    ReduceOp::LogicalXor => ((a != 0) != (b != 0)) as $t,
                }
            }
        }
    )*};
}

int_elem!(i8, u8, i16, u16, i32, u32, i64, u64, isize, usize);

macro_rules! float_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const NAME: &'static str = stringify!($t);
            const FLOAT: bool = true;
            fn combine_slices(op: ReduceOp, acc: &mut [$t], other: &[$t]) {
                match op {
                    ReduceOp::Sum => lanes!(acc, other, |a, b| a + b),
                    ReduceOp::Prod => lanes!(acc, other, |a, b| a * b),
                    ReduceOp::Min => lanes!(acc, other, |a, b| a.min(b)),
                    ReduceOp::Max => lanes!(acc, other, |a, b| a.max(b)),
                    _ => {}
                }
            }
            fn combine_one(op: ReduceOp, a: $t, b: $t) -> $t {
                match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                    _ => a,
                }
            }
        }
    )*};
}

float_elem!(f32, f64);

/// `acc op= other` where `other` holds values as little-endian bytes (a message, a
/// loan) over as many values as both hold: viewed in place as values when aligned
/// (the common case: lent slices and fragments at multiples of 48 bytes), else
/// decoded a block at a time.
#[inline]
pub fn combine_le_bytes<T: Elem>(op: ReduceOp, acc: &mut [T], other: &[u8]) {
    let size = std::mem::size_of::<T>();
    let n = acc.len().min(other.len() / size);
    let other = &other[..n * size];
    if cfg!(target_endian = "little") {
        if let Ok(o) = bytemuck::try_cast_slice::<u8, T>(other) {
            T::combine_slices(op, &mut acc[..n], o);
            return;
        }
    }
    let mut block = [T::zeroed(); LANES];
    for (a, o) in acc[..n].chunks_mut(LANES).zip(other.chunks(LANES * size)) {
        let k = a.len();
        for (x, c) in block[..k].iter_mut().zip(o.chunks_exact(size)) {
            *x = crate::word::unpack_one(c);
        }
        T::combine_slices(op, a, &block[..k]);
    }
}

/// `acc op= other` with both as little-endian bytes of `T` values (what
/// [`Context::reduce_bytes`](crate::Context::reduce_bytes) hands its `combine`).
#[inline]
pub fn combine_bytes<T: Elem>(op: ReduceOp, acc: &mut [u8], other: &[u8]) {
    let size = std::mem::size_of::<T>();
    let n = (acc.len().min(other.len()) / size) * size;
    let acc = &mut acc[..n];
    if cfg!(target_endian = "little") {
        if let Ok(a) = bytemuck::try_cast_slice_mut::<u8, T>(acc) {
            combine_le_bytes(op, a, other);
            return;
        }
    }
    let mut block = [T::zeroed(); LANES];
    for (a, o) in acc.chunks_mut(LANES * size).zip(other.chunks(LANES * size)) {
        let k = a.len() / size;
        for (x, c) in block[..k].iter_mut().zip(a.chunks_exact(size)) {
            *x = crate::word::unpack_one(c);
        }
        combine_le_bytes(op, &mut block[..k], o);
        for (x, c) in block[..k].iter().zip(a.chunks_exact_mut(size)) {
            c.copy_from_slice(&x.to_word().to_le_bytes()[..size]);
        }
    }
}

/// The plain loop the kernels replace (`acc[i] = acc[i] + other[i]`, one element at
/// a time through the generic [`Elem::combine_one`]): the baseline of the combine
/// benchmark.
#[inline(never)]
pub fn combine_plain<T: Elem>(op: ReduceOp, acc: &mut [T], other: &[T]) {
    for (a, b) in acc.iter_mut().zip(other) {
        *a = T::combine_one(op, *a, *b);
    }
}

/// [`Elem::combine_slices`] behind a call boundary (for benchmarks and for reading
/// the generated code: `objdump -d --no-show-raw-insn target/release/smelt | grep -A40
/// combine_f64_sum`).
#[inline(never)]
pub fn combine_f64_sum(acc: &mut [f64], other: &[f64]) {
    f64::combine_slices(ReduceOp::Sum, acc, other)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values<T: Elem>(n: usize, seed: u64) -> Vec<T> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Some zeros for the logical operations; small floats.
                let w = if i % 5 == 0 { 0 } else { x };
                if T::FLOAT {
                    let f = ((w % 2001) as f64 - 1000.0) / 7.0;
                    if T::NAME == "f32" {
                        T::from_word((f as f32).to_bits() as u64)
                    } else {
                        T::from_word(f.to_bits())
                    }
                } else {
                    T::from_word(w)
                }
            })
            .collect()
    }

    fn check_type<T: Elem>() {
        for op in ReduceOp::ALL {
            if op.check::<T>().is_err() {
                assert!(T::FLOAT && op.integer_only());
                continue;
            }
            for n in [0, 1, 2, LANES - 1, LANES, LANES + 1, 3 * LANES + 7, 1000] {
                let a = values::<T>(n, 3);
                let b = values::<T>(n, 11);
                let want: Vec<T> = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| T::combine_one(op, *x, *y))
                    .collect();
                let mut got = a.clone();
                T::combine_slices(op, &mut got, &b);
                assert_eq!(got, want, "{} {op} n={n}", T::NAME);
                // From bytes, aligned and not.
                let mut bytes = vec![0u8; 1];
                for v in &b {
                    bytes.extend_from_slice(&v.to_word().to_le_bytes()[..T::BYTES]);
                }
                let mut got = a.clone();
                combine_le_bytes(op, &mut got, &bytes[1..]);
                assert_eq!(got, want, "{} {op} n={n} (bytes)", T::NAME);
                let mut acc = vec![0u8; 1];
                for v in &a {
                    acc.extend_from_slice(&v.to_word().to_le_bytes()[..T::BYTES]);
                }
                combine_bytes::<T>(op, &mut acc[1..], &bytes[1..]);
                let back: Vec<T> = acc[1..]
                    .chunks_exact(T::BYTES)
                    .map(crate::word::unpack_one)
                    .collect();
                assert_eq!(back, want, "{} {op} n={n} (both bytes)", T::NAME);
                let mut plain = a.clone();
                combine_plain(op, &mut plain, &b);
                assert_eq!(plain, want);
            }
        }
    }

    #[test]
    fn every_type_and_op_matches_the_scalar_definition() {
        check_type::<i8>();
        check_type::<u8>();
        check_type::<i16>();
        check_type::<u16>();
        check_type::<i32>();
        check_type::<u32>();
        check_type::<i64>();
        check_type::<u64>();
        check_type::<isize>();
        check_type::<usize>();
        check_type::<f32>();
        check_type::<f64>();
    }

    #[test]
    fn scalar_definitions() {
        assert_eq!(i32::combine_one(ReduceOp::Sum, i32::MAX, 1), i32::MIN);
        assert_eq!(u8::combine_one(ReduceOp::Prod, 16, 17), 16);
        assert_eq!(i64::combine_one(ReduceOp::Min, -3, 2), -3);
        assert_eq!(u16::combine_one(ReduceOp::Max, 3, 9), 9);
        assert_eq!(u32::combine_one(ReduceOp::BitAnd, 0b1100, 0b1010), 0b1000);
        assert_eq!(u32::combine_one(ReduceOp::BitOr, 0b1100, 0b1010), 0b1110);
        assert_eq!(u32::combine_one(ReduceOp::BitXor, 0b1100, 0b1010), 0b0110);
        assert_eq!(i32::combine_one(ReduceOp::LogicalAnd, 5, 0), 0);
        assert_eq!(i32::combine_one(ReduceOp::LogicalAnd, 5, -2), 1);
        assert_eq!(i32::combine_one(ReduceOp::LogicalOr, 0, -2), 1);
        assert_eq!(i32::combine_one(ReduceOp::LogicalXor, 7, 9), 0);
        assert_eq!(i32::combine_one(ReduceOp::LogicalXor, 7, 0), 1);
        assert_eq!(f64::combine_one(ReduceOp::Min, f64::NAN, 2.0), 2.0);
        assert_eq!(f64::combine_one(ReduceOp::Max, 1.0, f64::NAN), 1.0);
    }

    #[test]
    fn integer_only_operations_on_floats_are_refused() {
        let e = ReduceOp::BitXor.check::<f64>().unwrap_err().to_string();
        assert!(e.contains("bxor") && e.contains("f64"), "{e}");
        assert!(ReduceOp::Sum.check::<f32>().is_ok());
        assert!(ReduceOp::LogicalOr.check::<u8>().is_ok());
        assert_eq!("LAND".parse::<ReduceOp>(), Ok(ReduceOp::LogicalAnd));
        assert!("avg".parse::<ReduceOp>().unwrap_err().contains("avg"));
    }
}
