//! Global arrays: a global view of memory spread over the members of a job.
//!
//! A [`GlobalArray<T>`] holds `len` elements of `T` (`u64`, `i64`, `f64`, `u32` or
//! `i32`), spread in blocks over the job's members ([`Layout`]: member `m` owns
//! `m*b .. (m+1)*b`, `b = ceil(len / members)`). Any member reads, writes and combines
//! any elements by global index: [`get`](GlobalArray::get),
//! [`put`](GlobalArray::put), [`accumulate`](GlobalArray::accumulate) (sum, min,
//! max, replace; each element atomically) and
//! [`fetch_accumulate`](GlobalArray::fetch_accumulate). A range that crosses owners is
//! split among them; an index outside the array is an error
//! ([`GlobalError::OutOfRange`]), never a panic.
//!
//! Members are those of a world ([`GlobalArray::from_world`], a collective call):
//! * threads of one process (`World::threads`; [`threads`] makes every member's
//!   handle at once): the elements are process memory;
//! * processes of one host (`smelt launch`, `World::from_env`): the elements are a
//!   region of the job's one shared-memory segment, which every member maps, read and
//!   written directly;
//! * MPI ranks grouped into nodes (`World::from_mpi`, feature `mpi`): each node's
//!   elements are a region of the node's world segment, which its ranks map; elements on other nodes are reached
//!   with MPI one-sided communication (`MPI_Get`, `MPI_Put`, `MPI_Accumulate`,
//!   `MPI_Fetch_and_op` in a passive-target epoch, `MPI_Win_flush`).
//!
//! # Consistency
//!
//! **Sequential consistency for data-race-free programs.** Two accesses to one element
//! race when they come from different members (or threads), at least one is a `put`,
//! and no synchronisation orders them. Synchronisation is a [`barrier`](GlobalArray::barrier), or a writer's [`fence_writeback`](GlobalArray::fence_writeback)
//! (the slides' `SD_fence`) followed by an atomic operation (`accumulate`,
//! `fetch_accumulate`) that a reader observes (with any operation) before its
//! [`fence_invalidate`](GlobalArray::fence_invalidate) (`SI_fence`). A program whose
//! only races are between atomic operations behaves as if every member's operations
//! ran one at a time in some order that keeps each member's program order; in
//! particular, every write made before a barrier is seen by every read after it.
//! A member always sees its own writes. Racy programs get values some write wrote
//! (never torn elements), in no promised order.
//!
//! Writes to elements on other nodes are buffered (MPI operations not yet completed)
//! until the next write-back fence or barrier. Reads of elements on other nodes may be
//! cached ([`GlobalConfig::cache_lines`], off by default): lines stay until the next
//! invalidate fence (or barrier), so a member that synchronised must fence before it
//! reads what others wrote, as the model says.
//!
//! ```
//! use smelt_global::{GlobalConfig, GlobalArray, AccumulateOp};
//! use smelt_mesh::World;
//! // A world of 4 threads (`World::from_env()` in processes of `smelt launch`).
//! let worlds = World::threads(4)?;
//! let arrays: Vec<GlobalArray<u64>> = worlds
//!     .iter()
//!     .map(|w| GlobalArray::from_world(w, 101, GlobalConfig::default()))
//!     .collect::<Result<_, _>>()?;
//! std::thread::scope(|s| {
//!     for a in &arrays {
//!         s.spawn(move || -> Result<(), smelt_global::GlobalError> {
//!             let me = a.rank() as u64;
//!             a.put(me * 25, &[me; 25])?; // each writes a quarter of 0..100
//!             a.accumulate(100, &[1], AccumulateOp::Sum)?; // and counts itself in element 100
//!             a.barrier()?;
//!             let mut all = [0u64; 100];
//!             a.get(0, &mut all)?;
//!             assert!(all.iter().enumerate().all(|(i, v)| *v == i as u64 / 25));
//!             assert_eq!(a.get_one(100)?, 4);
//!             Ok(())
//!         });
//!     }
//! });
//! assert!(arrays[0].get_one(101).is_err()); // out of range
//! # Ok::<(), smelt_global::GlobalError>(())
//! ```

#![warn(missing_docs)]
#![deny(unsafe_code)]

mod array;
// The cache holds other nodes' lines: only the MPI transport reaches other nodes.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
mod cache;
mod elem;
mod error;
#[cfg(feature = "mpi")]
#[allow(unsafe_code)]
pub mod mpi;

pub use array::{threads, GlobalArray, GlobalConfig, Layout, MAX_LEN};
pub use cache::{CacheStats, LINE as CACHE_LINE};
pub use elem::{AccumulateOp, ElemType, Element};
pub use error::GlobalError;
pub use smelt_mesh::LinkConfig;
