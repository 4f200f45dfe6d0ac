//! Typed identifiers shared by the smelt crates, so that the three kinds of small
//! integers that cross their APIs cannot be mixed up:
//!
//! - [`CpuId`]: an OS CPU id (as in `/sys/devices/system/cpu/cpuN`, `taskset`,
//!   model files and tree files).
//! - [`Pos`]: a position in one tree: an index into that tree's member list.
//! - [`Rank`]: a member of a group or job: an index into the group's CPU list (the
//!   first tree's member order).
//!
//! A position and a rank coincide for a group's first tree only; in every other tree
//! (context) of the group, the member at position `p` generally has another rank.
//!
//! All three serialize as the bare number (`#[serde(transparent)]`), print as the bare
//! number, and convert from and to the integer type they wrap. `Vec`s and slices
//! indexed by position or by rank can be indexed with [`Pos`] and [`Rank`] directly.
//!
//! Two more small things every layer shares, kept here because this is the lowest
//! crate: [`stats`] (the one statistics type [`stats::Summary`] and the one median)
//! and [`rng`] (the one seeded random number generator, SplitMix64).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod rng;
pub mod stats;

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Index, IndexMut};
use std::str::FromStr;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($int:ty), $get:ident) => {
        $(#[$doc])*
        #[derive(
            Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub $int);

        impl $name {
            /// The bare number.
            #[inline(always)]
            pub const fn $get(self) -> $int {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl From<$int> for $name {
            #[inline(always)]
            fn from(v: $int) -> Self {
                $name(v)
            }
        }

        impl From<$name> for $int {
            #[inline(always)]
            fn from(v: $name) -> Self {
                v.0
            }
        }

        impl FromStr for $name {
            type Err = std::num::ParseIntError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                s.parse().map($name)
            }
        }
    };
}

macro_rules! index_by {
    ($name:ident) => {
        impl<T> Index<$name> for [T] {
            type Output = T;
            #[inline(always)]
            fn index(&self, i: $name) -> &T {
                &self[i.0]
            }
        }
        impl<T> IndexMut<$name> for [T] {
            #[inline(always)]
            fn index_mut(&mut self, i: $name) -> &mut T {
                &mut self[i.0]
            }
        }
        impl<T> Index<$name> for Vec<T> {
            type Output = T;
            #[inline(always)]
            fn index(&self, i: $name) -> &T {
                &self[i.0]
            }
        }
        impl<T> IndexMut<$name> for Vec<T> {
            #[inline(always)]
            fn index_mut(&mut self, i: $name) -> &mut T {
                &mut self[i.0]
            }
        }
    };
}

id_type!(
    /// An OS CPU id.
    CpuId(u32),
    get
);
id_type!(
    /// A position in one tree: the index of a member in that tree's member list.
    Pos(usize),
    index
);
id_type!(
    /// A member of a group or job: the index of its CPU in the group's CPU list (the
    /// first tree's member order).
    Rank(usize),
    index
);

index_by!(Pos);
index_by!(Rank);

impl CpuId {
    /// A CPU id that names no CPU (for errors about a member whose CPU is unknown).
    pub const UNKNOWN: CpuId = CpuId(u32::MAX);
}

/// Wraps each number of a list (`CpuId::list([0, 1, 2])`, `Pos::list(...)`).
macro_rules! list_fn {
    ($name:ident($int:ty)) => {
        impl $name {
            /// Wraps each number of `v`.
            pub fn list(v: impl IntoIterator<Item = $int>) -> Vec<$name> {
                v.into_iter().map($name).collect()
            }
        }
    };
}
list_fn!(CpuId(u32));
list_fn!(Pos(usize));
list_fn!(Rank(usize));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_the_bare_number() {
        assert_eq!(CpuId(7).to_string(), "7");
        assert_eq!(Pos(3).to_string(), "3");
        assert_eq!(Rank(12).to_string(), "12");
        assert_eq!(format!("{:>4}", CpuId(5)), "   5");
        assert_eq!("42".parse::<CpuId>().unwrap(), CpuId(42));
        assert!("x".parse::<Rank>().is_err());
    }

    #[test]
    fn serde_is_transparent() {
        assert_eq!(
            serde_json::to_string(&CpuId(4_000_000_000)).unwrap(),
            "4000000000"
        );
        assert_eq!(
            serde_json::to_string(&vec![Pos(1), Pos(2)]).unwrap(),
            "[1,2]"
        );
        assert_eq!(serde_json::from_str::<Rank>("5").unwrap(), Rank(5));
        let cpus: Vec<CpuId> = serde_json::from_str("[0, 8, 16]").unwrap();
        assert_eq!(cpus, CpuId::list([0, 8, 16]));
        assert!(serde_json::from_str::<CpuId>("-1").is_err());
    }

    #[test]
    fn index_by_position_and_rank() {
        let mut v: Vec<i32> = (1..=3).map(|x| x * 10).collect();
        assert_eq!(v[Pos(1)], 20);
        v[Rank(2)] += 1;
        assert_eq!(v[..][Rank(2)], 31);
        assert_eq!(Pos::from(2usize).index(), 2);
        assert_eq!(u32::from(CpuId(9)), 9);
    }
}
