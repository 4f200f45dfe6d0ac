//! What can go wrong.

use smelt_transport::TransportError;
use std::time::Duration;

/// Why an active-message operation did not complete.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AmError {
    /// The endpoints could not be set up as asked.
    #[error("invalid active-message setup: {0}")]
    Invalid(String),
    /// No destination with that index in this endpoint's table.
    #[error("no destination {dest} (the table has {size})")]
    NoSuchDestination {
        /// The index asked for.
        dest: usize,
        /// Entries in the table.
        size: usize,
    },
    /// Handler index 0 is where returned messages go; it cannot be sent to or replaced
    /// by [`register`](crate::Endpoint::register) (use
    /// [`on_returned`](crate::Endpoint::on_returned)).
    #[error("handler index 0 is reserved for returned messages")]
    ReservedHandler,
    /// More argument words than a message carries.
    #[error("{n} argument words (at most {max})", max = crate::MAX_ARGS)]
    TooManyArgs {
        /// Words given.
        n: usize,
    },
    /// A bulk message larger than the endpoint's limit
    /// ([`AmConfig::max_bulk`](crate::AmConfig::max_bulk)).
    #[error("a bulk message of {len} bytes (at most {max})")]
    TooLarge {
        /// Bytes given.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// `reply` outside a request handler (in a reply handler).
    #[error("only a request's handler can reply")]
    NotARequest,
    /// A second reply to the same request.
    #[error("this request was already replied to")]
    AlreadyReplied,
    /// The destination endpoint left (its thread ended, its process died).
    #[error("endpoint {dest} is gone")]
    PeerGone {
        /// The endpoint.
        dest: usize,
    },
    /// A wait reached its timeout.
    #[error("timed out after {after:?} {what}")]
    Timeout {
        /// What it waited for.
        what: String,
        /// The timeout.
        after: Duration,
    },
    /// The endpoints' abort flag was raised.
    #[error("the endpoints were aborted")]
    Aborted,
    /// A handler of this endpoint panicked. The endpoint goes on; if the message was a
    /// request, it was returned to its sender with
    /// [`Reason::HandlerPanicked`](crate::Reason::HandlerPanicked).
    #[error("handler {handler} panicked on a message from endpoint {from}: {message}")]
    HandlerPanicked {
        /// Its index.
        handler: u8,
        /// The message's sender.
        from: usize,
        /// The panic's message.
        message: String,
    },
    /// The world could not make the endpoint's links or its region (see
    /// [`Endpoint::from_world`](crate::Endpoint::from_world)).
    #[error(transparent)]
    World(#[from] smelt_mesh::WorldError),
    /// Any other transport error on the way to or from `dest`.
    #[error("endpoint {dest}: {source}")]
    Transport {
        /// The other endpoint.
        dest: usize,
        /// What the transport said.
        source: TransportError,
    },
}
