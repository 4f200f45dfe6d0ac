//! Element types of global arrays and the operations of `accumulate`.

use std::fmt;

/// The element type of an array, stored in its header: attaching to an array (or
/// calling the C API) with another type is an error ([`crate::GlobalError::WrongType`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ElemType {
    /// `u64`
    U64 = 1,
    /// `i64`
    I64 = 2,
    /// `f64`
    F64 = 3,
    /// `u32`
    U32 = 4,
    /// `i32`
    I32 = 5,
}

impl ElemType {
    /// Every element type.
    pub const ALL: [ElemType; 5] = [
        ElemType::U64,
        ElemType::I64,
        ElemType::F64,
        ElemType::U32,
        ElemType::I32,
    ];

    /// The type with this id (as stored in an array's header), if any.
    pub fn from_id(id: u32) -> Option<ElemType> {
        ElemType::ALL.into_iter().find(|t| *t as u32 == id)
    }

    /// The Rust name of the type.
    pub fn name(self) -> &'static str {
        match self {
            ElemType::U64 => "u64",
            ElemType::I64 => "i64",
            ElemType::F64 => "f64",
            ElemType::U32 => "u32",
            ElemType::I32 => "i32",
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How [`accumulate`](crate::GlobalArray::accumulate) combines a value with the
/// element it targets. Integer sums wrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccumulateOp {
    /// element + value
    Sum,
    /// the smaller of the two
    Min,
    /// the larger of the two
    Max,
    /// value (an atomic swap; with `fetch_accumulate`, returns the old element)
    Replace,
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u64 {}
    impl Sealed for i64 {}
    impl Sealed for f64 {}
    impl Sealed for u32 {}
    impl Sealed for i32 {}
}

/// A type global arrays can hold: `u64`, `i64`, `f64`, `u32` or `i32` (sealed).
///
/// Every element occupies one 64-bit word of the array's memory; 32-bit elements sit
/// in the word's low half (the upper half stays zero), so that MPI can accumulate
/// them with their own type.
pub trait Element: sealed::Sealed + Copy + PartialEq + fmt::Debug + Send + Sync + 'static {
    /// The type's id.
    const TYPE: ElemType;
    /// The element as its word.
    fn to_word(self) -> u64;
    /// The element a word holds.
    fn from_word(w: u64) -> Self;
    /// `self` combined with `v` by `op`.
    fn combine(self, v: Self, op: AccumulateOp) -> Self;
}

macro_rules! int_element {
    ($t:ty, $id:expr, $to:expr, $from:expr) => {
        impl Element for $t {
            const TYPE: ElemType = $id;
            #[inline]
            fn to_word(self) -> u64 {
                $to(self)
            }
            #[inline]
            fn from_word(w: u64) -> Self {
                $from(w)
            }
            #[inline]
            fn combine(self, v: Self, op: AccumulateOp) -> Self {
                match op {
                    AccumulateOp::Sum => self.wrapping_add(v),
                    AccumulateOp::Min => self.min(v),
                    AccumulateOp::Max => self.max(v),
                    AccumulateOp::Replace => v,
                }
            }
        }
    };
}

int_element!(u64, ElemType::U64, |x: u64| x, |w: u64| w);
int_element!(i64, ElemType::I64, |x: i64| x as u64, |w: u64| w as i64);
int_element!(u32, ElemType::U32, |x: u32| x as u64, |w: u64| w as u32);
int_element!(
    i32,
    ElemType::I32,
    |x: i32| x as u32 as u64,
    |w: u64| w as u32 as i32
);

impl Element for f64 {
    const TYPE: ElemType = ElemType::F64;
    #[inline]
    fn to_word(self) -> u64 {
        self.to_bits()
    }
    #[inline]
    fn from_word(w: u64) -> Self {
        f64::from_bits(w)
    }
    #[inline]
    fn combine(self, v: Self, op: AccumulateOp) -> Self {
        match op {
            AccumulateOp::Sum => self + v,
            AccumulateOp::Min => self.min(v),
            AccumulateOp::Max => self.max(v),
            AccumulateOp::Replace => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_32_bit_elements_keep_the_upper_half_zero() {
        assert_eq!(i32::from_word((-5i32).to_word()), -5);
        assert_eq!((-5i32).to_word() >> 32, 0);
        assert_eq!(u32::from_word(u32::MAX.to_word()), u32::MAX);
        assert_eq!(i64::from_word((-7i64).to_word()), -7);
        assert_eq!(f64::from_word(1.5f64.to_word()), 1.5);
        assert_eq!(u32::MAX.combine(1, AccumulateOp::Sum), 0);
        assert_eq!((-3i32).combine(2, AccumulateOp::Min), -3);
        assert_eq!(2.0f64.combine(3.0, AccumulateOp::Max), 3.0);
        for t in ElemType::ALL {
            assert_eq!(ElemType::from_id(t as u32), Some(t));
        }
        assert_eq!(ElemType::from_id(0), None);
    }
}
