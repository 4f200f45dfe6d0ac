//! Handing a shared-memory segment out over MPI: a node's leader (rank 0 of the node's
//! communicator) creates the segment and broadcasts its address (path and key, or why
//! it could not), every rank of the node joins it, and the node agrees that every rank
//! joined, so that either all of them use it or none does. The leader keeps its
//! creator's handle until then (the segment's name goes once every member attached).
//!
//! Active messages (each node's mesh), global arrays (each node's blocks), the
//! interposer (each node's trees) and [`World::from_mpi`](crate::world::World) share
//! their segments this way.

use super::ffi::MPI_Comm;
use super::{all, bcast_bytes, Calls, MpiError};
use std::time::Duration;

/// Bytes of the broadcast address: a status byte, its length (4 bytes, little
/// endian), then the text (a segment's path and key take about 100; the interposer
/// hands one out at every communicator's set-up, so it stays small).
pub const ADDRESS_BYTES: usize = 1024;

/// What [`hand_out`] gives each rank.
#[derive(Debug)]
pub struct HandOut<M> {
    /// This rank's join (or why it could not join, or why the leader could not create
    /// the segment).
    pub mine: Result<M, String>,
    /// Whether every rank of the node joined (the same at every rank). When false, a
    /// rank whose `mine` is `Ok` must let go of it.
    pub all: bool,
}

impl<M> HandOut<M> {
    /// This rank's join if every rank joined, else [`MpiError::Shared`]: this rank's own
    /// reason, or that another rank of the node failed.
    pub fn agreed(self) -> Result<M, MpiError> {
        match self.mine {
            Ok(m) if self.all => Ok(m),
            Ok(_) => Err(MpiError::Shared(
                "another rank of the node could not join its shared memory".into(),
            )),
            Err(e) => Err(MpiError::Shared(e)),
        }
    }
}

/// Hands a segment out over `node` (the node's communicator; collective over it).
/// The leader (rank 0 of `node`) passes `offer`: `Ok(address)` for the segment it
/// made (any text, typically its path and key) or `Err(why)` when it could not make it;
/// the others pass `None` (ignored there). Every rank then calls `join` with the
/// address and the node agrees. Waits for the other ranks are bounded as in
/// [`bcast_bytes`] (`None`: blocking).
///
/// `Err` only when MPI itself fails (or times out); a failure to create or join is in
/// the [`HandOut`], the same verdict at every rank.
pub fn hand_out<S: Calls, M>(
    node: MPI_Comm,
    offer: Option<Result<String, String>>,
    join: impl FnOnce(&str) -> Result<M, String>,
    bound: Option<Duration>,
) -> Result<HandOut<M>, MpiError> {
    let mut msg = vec![0u8; ADDRESS_BYTES];
    if let Some(offer) = offer {
        encode(&mut msg, offer);
    }
    bcast_bytes::<S>(node, &mut msg, 0, bound)?;
    let mine = decode(&msg).and_then(join);
    let all = all::<S>(node, mine.is_ok(), bound)?;
    Ok(HandOut { mine, all })
}

const OK: u8 = b'+';
const FAILED: u8 = b'-';

fn encode(msg: &mut [u8], offer: Result<String, String>) {
    let room = msg.len() - 5;
    let (status, text) = match offer {
        Ok(a) if a.len() <= room => (OK, a),
        Ok(a) => (
            FAILED,
            format!(
                "the shared-memory address is too long ({} bytes, at most {room}; a shorter SMELT_SHM_DIR)",
                a.len()
            ),
        ),
        Err(why) => (FAILED, why),
    };
    let mut n = text.len().min(room);
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    msg[0] = status;
    msg[1..5].copy_from_slice(&(n as u32).to_le_bytes());
    msg[5..5 + n].copy_from_slice(&text.as_bytes()[..n]);
}

fn decode(msg: &[u8]) -> Result<&str, String> {
    let n = u32::from_le_bytes(msg[1..5].try_into().expect("4 bytes")) as usize;
    let text = msg
        .get(5..5 + n)
        .and_then(|t| std::str::from_utf8(t).ok())
        .ok_or_else(|| "a malformed shared-memory address from the node's leader".to_string())?;
    match msg[0] {
        OK => Ok(text),
        FAILED => Err(format!(
            "the node's leader could not create its shared memory: {text}"
        )),
        _ => Err("no shared-memory address from the node's leader".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip() {
        let mut m = vec![0u8; ADDRESS_BYTES];
        encode(&mut m, Ok("/dev/shm/x\nkey".into()));
        assert_eq!(decode(&m), Ok("/dev/shm/x\nkey"));
        encode(&mut m, Err("no room".into()));
        assert!(decode(&m).unwrap_err().contains("no room"));
        encode(&mut m, Ok("é".repeat(ADDRESS_BYTES)));
        assert!(decode(&m).unwrap_err().contains("too long"));
        assert!(decode(&vec![0u8; ADDRESS_BYTES])
            .unwrap_err()
            .contains("no shared-memory address"));
    }
}
