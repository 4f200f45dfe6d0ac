//! Cache-line queuepairs: the transport layer of the Smelt runtime (paper §4.1).
//!
//! A [`channel`] is a single-producer single-consumer ring of 64-byte slots in shared
//! memory, after Barrelfish's UMP: the producer alone writes the slots, each slot's
//! header word (sequence number + length) is written last with `Release`, and the
//! consumer acknowledges on a separate cache line (its read position) that the producer
//! reads only when its cached copy says the ring is full. A [`queuepair`] is two
//! channels, one each way.
//!
//! Properties (the paper's): reliable, FIFO, bounded (flow control blocks or fails a
//! send when the ring is full). Messages larger than [`PAYLOAD_PER_SLOT`] bytes occupy
//! consecutive slots; one larger than the ring is refused with
//! [`TransportError::MessageTooLarge`]. Words (`send_word`/`recv_word`) and empty
//! messages are the fast path: one store, one slot, no copying.
//!
//! Blocking operations wait by spinning briefly, yielding, then parking; the other end
//! unparks a parked waiter ([`WaitPolicy`], [`Backoff`]). Dropping one end is seen by
//! the other ([`TransportError::Disconnected`]), and an [`Abort`] flag shared by many
//! channels ends every wait on them.
//!
//! ```
//! let (mut tx, mut rx) = smelt_transport::channel(16);
//! std::thread::scope(|s| {
//!     s.spawn(move || {
//!         tx.send(b"hello").unwrap();
//!         tx.send_word(42).unwrap();
//!     });
//!     let mut buf = [0u8; 64];
//!     let n = rx.recv(&mut buf).unwrap();
//!     assert_eq!(&buf[..n], b"hello");
//!     assert_eq!(rx.recv_word().unwrap(), 42);
//! });
//! ```
//!
//! The two ends are distinct types; neither is `Clone` nor `Sync`, so a second
//! producer or a shared consumer does not compile:
//!
//! ```compile_fail
//! let (tx, _rx) = smelt_transport::channel(4);
//! let tx2 = tx.clone(); // Producer is not Clone
//! ```
//!
//! ```compile_fail
//! fn shared<T: Sync>(_: &T) {}
//! let (_tx, rx) = smelt_transport::channel(4);
//! shared(&rx); // Consumer is not Sync
//! ```
//!
//! This is the only smelt crate with `unsafe` code; every block states why it is sound.
//! The ring protocol is model-checked with loom: `RUSTFLAGS="--cfg loom" cargo test -p
//! smelt-transport --release --test loom`.

#![warn(missing_docs)]

mod abort;
mod affinity;
mod backoff;
mod channel;
mod cputime;
mod error;
mod link;
mod loan;
#[cfg(target_os = "linux")]
pub mod members;
mod queuepair;
#[cfg(not(loom))]
pub mod shm;
mod sleepq;
mod sync;
mod wake;

pub use abort::Abort;
pub use affinity::{allowed_cpus, current_cpu, online_cpus, pin_current_thread, signal_process};
pub use backoff::{stress_scale, Backoff, WaitPolicy};
pub use channel::{
    channel, channel_with_abort, try_channel, Consumer, Producer, MAX_CAPACITY, PAYLOAD_PER_SLOT,
    SLOT_BYTES,
};
pub use cputime::{process_cpu_time, thread_cpu_time};
pub use error::TransportError;
pub use link::Link;
pub use loan::{lend_all, lend_while};
pub use queuepair::{queuepair, try_queuepair, QueuePairEnd};
pub use sleepq::{SleepOutcome, SleepQueue, SLEEPQ_MAX_CAPACITY};
