//! Active messages over smelt's links.
//!
//! Collectives are one half of what parallel runtimes need; the other half is
//! one-sided messages that run a handler where they arrive: the base of PGAS runtimes,
//! task systems and aggregation libraries. This crate is the Active Messages II model
//! (Mainwaring and Culler; Lumetta, Mainwaring and Culler's multi-protocol layer for
//! clusters of SMPs) over smelt's cache-line queuepairs:
//!
//! * **Endpoints** ([`Endpoint`]), one per member of a world (a thread, a process, an
//!   MPI rank; made with [`Endpoint::from_world`], see [`world`]), each with a
//!   **handler table** indexed by small integers (1–255) and a
//!   **destination table** naming every endpoint of the job ([`Name`]: node, process,
//!   endpoint), indexed by small integers.
//! * **Requests** run a handler at the destination, which must answer with exactly one
//!   **reply** through the context ([`Ctx`]) it is given (the opaque token). Replies
//!   run a handler back at the requester. **Short** messages carry up to 8 argument
//!   words; **bulk** messages add a data block, pipelined in chunks of 8 KiB
//!   ([`AmConfig::bulk_chunk`]) and handed to the handler whole.
//! * **Protection**: each endpoint has a 64-bit tag ([`Endpoint::tag`]) that requests
//!   must present. A request with a wrong tag never reaches a handler: it comes back to
//!   its sender's **handler 0** ([`Endpoint::on_returned`]) with [`Reason::WrongTag`],
//!   as do messages to an unregistered handler, requests whose handler returned
//!   without replying or panicked, and replies nobody asked for ([`Reason`]).
//! * **Multi-protocol**: one API whichever way a destination is reached: queuepairs
//!   between threads, queuepairs in the job's shared-memory segment between the
//!   processes of a host, and a network channel ([`Remote`]; MPI with the `mpi`
//!   feature) to other nodes, polled by an adaptive policy ([`PollPolicy`]) because
//!   polling the network costs far more than polling shared memory. A world of
//!   threads or processes reaches every member over its links; [`threads`] is the
//!   short way to the endpoints of a world of threads.
//!
//! **Ordering.** Messages from one endpoint to another (requests, replies and returned
//! messages alike) are handled in the order they were sent (per-pair FIFO); there is no
//! order between different senders.
//!
//! **Flow control.** Queues are bounded. A request that finds its destination's queue
//! full runs this endpoint's own handlers on what arrives meanwhile, and a reply that
//! finds one full takes arriving messages in for later: endpoints flooding each other
//! through queues of a few slots never deadlock. Every wait is bounded
//! (`AmConfig::link.timeout`).
//!
//! **Failures.** An endpoint whose thread ended or whose process died is reported once
//! by a poll as [`AmError::PeerGone`] (after its last message); sends to it fail with
//! the same error and its unanswered requests are forgotten. A panicking handler is
//! caught: the poll reports [`AmError::HandlerPanicked`] and the endpoint goes on.
//!
//! Made from a world (the way every service is made; see [`world`] for a whole
//! program), or, between threads, all at once:
//!
//! ```
//! use smelt_am::{threads, AmConfig};
//! use std::time::Duration;
//! const ADD: u8 = 1;
//! const SUM: u8 = 2;
//! // The two endpoints of a world of two threads; the state is the sum each received.
//! let mut eps = threads(2, AmConfig::default(), |_| 0u64).unwrap();
//! let mut server = eps.pop().unwrap();
//! let mut client = eps.pop().unwrap();
//! server.register(ADD, |_, ctx, m| ctx.reply(SUM, &[m.args[0] + m.args[1]]).unwrap()).unwrap();
//! client.register(SUM, |sum: &mut u64, _, m| *sum = m.args[0]).unwrap();
//! std::thread::scope(|s| {
//!     s.spawn(move || server.run_until(Duration::from_secs(5), |_| false).ok());
//!     client.request(1, ADD, &[40, 2]).unwrap();
//!     client.quiesce(Duration::from_secs(5)).unwrap();
//!     assert_eq!(*client.state(), 42);
//!     drop(client); // the server's wait ends: its only peer left
//! });
//! ```

#![warn(missing_docs)]
#![deny(unsafe_code)]

mod endpoint;
mod error;
#[cfg(feature = "mpi")]
#[allow(unsafe_code)]
pub mod mpi;
pub mod poll;
mod remote;
mod setup;
pub mod wire;
pub mod world;

pub use endpoint::{
    AmConfig, Ctx, Endpoint, Handler, Msg, Name, ReturnHandler, Returned, Stats, BATCH_BYTES,
    BULK_CHUNK, KEEP_RETURNED,
};
pub use error::AmError;
pub use poll::PollPolicy;
pub use remote::Remote;
pub use setup::{random_tag, threads};
pub use smelt_mesh::LinkConfig;
pub use wire::{Reason, MAX_ARGS};
