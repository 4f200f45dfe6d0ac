//! The slow channel of an endpoint: messages to and from endpoints that do not share
//! memory with it (other nodes), over a network transport such as MPI.

use smelt_transport::TransportError;

/// A network transport to the endpoints of other nodes, addressed by their global
/// index. It must deliver every message once, in order per pair of endpoints.
///
/// `try_send` never waits: [`TransportError::Full`] asks the caller to make progress
/// (poll, including this channel) and try again. `try_recv` never waits either.
pub trait Remote: Send {
    /// Largest message one send carries, in bytes.
    fn max_message_len(&self) -> usize;
    /// Sends `msg` with `tag` to endpoint `to` if possible without waiting.
    fn try_send(&mut self, to: usize, tag: u64, msg: &[u8]) -> Result<(), TransportError>;
    /// Takes in the next waiting message, if any: resizes `buf` to the message and
    /// returns the sender's global index and the tag.
    fn try_recv(&mut self, buf: &mut Vec<u8>) -> Result<Option<(usize, u64)>, TransportError>;
    /// Completes what can be completed of earlier sends (called while waiting).
    fn progress(&mut self) {}
}
