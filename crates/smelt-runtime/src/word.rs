//! Scalars that travel as one word (the zero-copy fast path of reductions).

/// A `Copy` scalar that fits in one 64-bit word: what `reduce`, `allreduce`,
/// `reduce_slice` and friends combine. Implemented for the integer types, `f32`, `f64`
/// and `bool`.
pub trait Word: Copy + Send + 'static {
    /// Bytes of one value in a packed slice message.
    const BYTES: usize;
    /// The value's bits, zero-extended.
    fn to_word(self) -> u64;
    /// The value back from [`to_word`](Word::to_word)'s bits.
    fn from_word(w: u64) -> Self;
}

macro_rules! int_word {
    ($($t:ty => $u:ty),*) => {$(
        impl Word for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn to_word(self) -> u64 { self as $u as u64 }
            #[inline(always)]
            fn from_word(w: u64) -> Self { w as $u as $t }
        }
    )*};
}

int_word!(u8 => u8, u16 => u16, u32 => u32, u64 => u64, usize => usize,
          i8 => u8, i16 => u16, i32 => u32, i64 => u64, isize => usize);

impl Word for f64 {
    const BYTES: usize = 8;
    #[inline(always)]
    fn to_word(self) -> u64 {
        self.to_bits()
    }
    #[inline(always)]
    fn from_word(w: u64) -> Self {
        f64::from_bits(w)
    }
}

impl Word for f32 {
    const BYTES: usize = 4;
    #[inline(always)]
    fn to_word(self) -> u64 {
        self.to_bits() as u64
    }
    #[inline(always)]
    fn from_word(w: u64) -> Self {
        f32::from_bits(w as u32)
    }
}

impl Word for bool {
    const BYTES: usize = 1;
    #[inline(always)]
    fn to_word(self) -> u64 {
        self as u64
    }
    #[inline(always)]
    fn from_word(w: u64) -> Self {
        w != 0
    }
}

/// Appends `v` packed (`T::BYTES` little-endian bytes each) to `out`.
pub(crate) fn pack<T: Word>(v: &[T], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + v.len() * T::BYTES, 0);
    for (x, c) in v.iter().zip(out[start..].chunks_exact_mut(T::BYTES)) {
        c.copy_from_slice(&x.to_word().to_le_bytes()[..T::BYTES]);
    }
}

/// The value packed in `c` (`T::BYTES` little-endian bytes).
#[inline(always)]
pub(crate) fn unpack_one<T: Word>(c: &[u8]) -> T {
    let mut w = [0u8; 8];
    w[..T::BYTES].copy_from_slice(c);
    T::from_word(u64::from_le_bytes(w))
}

/// Overwrites `out` with the values packed in `bytes` (as many as both hold).
pub(crate) fn unpack_into<T: Word>(bytes: &[u8], out: &mut [T]) {
    for (x, c) in out.iter_mut().zip(bytes.chunks_exact(T::BYTES)) {
        *x = unpack_one(c);
    }
}

/// The `i`-th value of a packed slice.
#[inline]
pub(crate) fn unpack_at<T: Word>(bytes: &[u8], i: usize) -> T {
    let mut w = [0u8; 8];
    w[..T::BYTES].copy_from_slice(&bytes[i * T::BYTES..(i + 1) * T::BYTES]);
    T::from_word(u64::from_le_bytes(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        assert_eq!(i32::from_word((-5i32).to_word()), -5);
        assert_eq!(i8::from_word((-1i8).to_word()), -1);
        assert_eq!(f64::from_word(1.5f64.to_word()), 1.5);
        assert_eq!(f32::from_word((-2.25f32).to_word()), -2.25);
        assert!(bool::from_word(true.to_word()));
        let v = [-3i16, 7, i16::MIN];
        let mut b = Vec::new();
        pack(&v, &mut b);
        assert_eq!(b.len(), 6);
        assert_eq!(unpack_at::<i16>(&b, 2), i16::MIN);
        assert_eq!(unpack_at::<i16>(&b, 0), -3);
    }
}
