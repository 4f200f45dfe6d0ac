//! A client of the store: get and set through its home replica.

use crate::config::{KvsError, StoreConfig};
use crate::wire::{self, tag, untag, Kind};
use smelt_mesh::mesh::{Mesh, MeshError};
use smelt_mesh::world::WorldLink;
use smelt_mesh::Rank;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One client of a [`Store`](crate::Store), attached to one replica (its home). Sets
/// are ordered through agreement; gets are answered by the home replica from its own
/// copy. A client issues one operation at a time; move it to the thread that uses it.
///
/// Every operation carries a request id; an attempt that gets no answer within the
/// store's `attempt_timeout` is retried with the same id (at most `attempts` times),
/// and a set is applied once however many copies of it reach the log. With 1Paxos
/// failover a client whose home replica stops moves to its next backup replica
/// ([`StoreConfig::client_backups`](crate::StoreConfig)) and retries there.
#[derive(Debug)]
pub struct Client {
    pub(crate) id: usize,
    /// The replica serving it now (its home, or a backup after the home stopped).
    pub(crate) home: usize,
    /// The replicas it may be served by, in order: its home, then its backups.
    pub(crate) serve: Vec<usize>,
    pub(crate) mesh: ClientMesh,
    pub(crate) seq: u64,
    pub(crate) limits: Limits,
    pub(crate) closed: Arc<AtomicBool>,
    pub(crate) body: Vec<u8>,
    pub(crate) buf: Vec<u8>,
    /// Attempts beyond the first, over this client's life.
    pub(crate) retries: u64,
}

/// A client's links: in-process queuepairs (replicas as threads) or queuepairs in
/// shared memory (replicas as processes).
#[derive(Debug)]
pub(crate) enum ClientMesh {
    Threads(Mesh),
    Processes(Mesh<WorldLink>),
}

impl ClientMesh {
    fn send(&mut self, to: Rank, t: u64, body: &[u8], timeout: Duration) -> Result<(), MeshError> {
        match self {
            ClientMesh::Threads(m) => m.send(to, t, body, timeout),
            ClientMesh::Processes(m) => m.send(to, t, body, timeout),
        }
    }

    fn recv_from(
        &mut self,
        from: Rank,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<(u64, usize), MeshError> {
        match self {
            ClientMesh::Threads(m) => m.recv_from(from, buf, timeout),
            ClientMesh::Processes(m) => m.recv_from(from, buf, timeout),
        }
    }
}

/// The accessors a client has beyond `home`: `id`, `retries` and `next_request_id`, of
/// fields `id`, `retries`, `seq`.
macro_rules! request_accessors {
    () => {
        /// This client's id (0-based, as in histories).
        pub fn id(&self) -> usize {
            self.id
        }

        /// Retries made so far (attempts beyond the first).
        pub fn retries(&self) -> u64 {
            self.retries
        }

        /// The request id the next operation will carry.
        pub fn next_request_id(&self) -> u64 {
            self.seq + 1
        }
    };
}

/// What a client (a smelt store's or the Raft peer's) takes from the store's
/// configuration: the longest key and value, and how long and how often it tries.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub(crate) key_len: usize,
    pub(crate) value_len: usize,
    pub(crate) attempt_timeout: Duration,
    pub(crate) attempts: u32,
}

impl Limits {
    /// The limits of `cfg`'s clients.
    pub fn of(cfg: &StoreConfig) -> Limits {
        Limits {
            key_len: cfg.key_len,
            value_len: cfg.value_len,
            attempt_timeout: cfg.attempt_timeout,
            attempts: cfg.attempts,
        }
    }

    /// A set's `key` and `value` (`None` for a get) within the store's lengths.
    pub fn check(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), KvsError> {
        if key.len() > self.key_len {
            return Err(KvsError::KeyTooLong {
                len: key.len(),
                max: self.key_len,
            });
        }
        match value {
            Some(v) if v.len() > self.value_len => Err(KvsError::ValueTooLong {
                len: v.len(),
                max: self.value_len,
            }),
            _ => Ok(()),
        }
    }

    /// How many times an operation is tried.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// How long one attempt waits for its answer.
    pub fn attempt_timeout(&self) -> Duration {
        self.attempt_timeout
    }

    /// Operation `op` got no answer in any attempt.
    pub fn timed_out(&self, op: &'static str) -> KvsError {
        KvsError::Timeout {
            op,
            attempts: self.attempts,
            per_attempt: self.attempt_timeout,
        }
    }
}

/// Why a client's replica `home` cannot be reached: the store closed, or it failed.
pub fn gone(closed: &AtomicBool, home: usize) -> KvsError {
    if closed.load(Ordering::Acquire) {
        KvsError::Closed
    } else {
        KvsError::HomeFailed { replica: home }
    }
}

/// What a reply said.
enum Reply {
    Got(Option<Vec<u8>>),
    SetOk,
}

impl Client {
    request_accessors!();

    /// Index of the replica serving the client: its home replica, or the backup it
    /// moved to when its home stopped.
    pub fn home(&self) -> usize {
        self.home
    }

    /// Sets `key` to `value` (each at most the store's key and value length). Returns
    /// once the set is ordered and (for 1Paxos and 2PC) committed at every replica: a
    /// get that starts afterwards at any replica sees it or a later value.
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvsError> {
        self.limits.check(key, Some(value))?;
        let mut body = std::mem::take(&mut self.body);
        wire::encode_set(key, value, &mut body);
        let r = self.call(Kind::Set, &body, "set");
        self.body = body;
        match r? {
            Reply::SetOk => Ok(()),
            Reply::Got(_) => Err(KvsError::Unavailable("a get's answer to a set".into())),
        }
    }

    /// The value of `key` at the home replica (`None` for a key never set).
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvsError> {
        self.limits.check(key, None)?;
        match self.call(Kind::Get, key, "get")? {
            Reply::Got(v) => Ok(v),
            Reply::SetOk => Err(KvsError::Unavailable("a set's answer to a get".into())),
        }
    }

    fn gone(&self) -> KvsError {
        gone(&self.closed, self.home)
    }

    /// The replica serving this client left: moves to the next backup (true), if one
    /// is left and the store is open.
    fn move_on(&mut self) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        let Some(i) = self.serve.iter().position(|&r| r == self.home) else {
            return false;
        };
        match self.serve.get(i + 1) {
            Some(&next) => {
                self.home = next;
                true
            }
            None => false,
        }
    }

    fn call(&mut self, kind: Kind, body: &[u8], op: &'static str) -> Result<Reply, KvsError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(KvsError::Closed);
        }
        self.seq += 1;
        let seq = self.seq;
        // Attempts without an answer; a move to a backup replica (bounded by their
        // number) resends at once without counting one.
        let mut attempt = 0;
        let mut sent_once = false;
        'attempts: while attempt < self.limits.attempts {
            if sent_once {
                self.retries += 1;
            }
            sent_once = true;
            let home = Rank(self.home);
            match self
                .mesh
                .send(home, tag(kind, seq), body, self.limits.attempt_timeout)
            {
                Ok(()) => {}
                Err(MeshError::Timeout { .. }) => {
                    attempt += 1;
                    continue;
                }
                Err(MeshError::Aborted { .. }) => return Err(KvsError::Closed),
                Err(MeshError::PeerGone { .. }) => {
                    if self.move_on() {
                        continue;
                    }
                    return Err(self.gone());
                }
                Err(e) => return Err(KvsError::Unavailable(e.to_string())),
            }
            let deadline = std::time::Instant::now() + self.limits.attempt_timeout;
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                match self.mesh.recv_from(home, &mut self.buf, left) {
                    Ok((t, n)) => {
                        let Some((k, num)) = untag(t) else { continue };
                        if num != seq & wire::NUM_MASK {
                            // The answer to an earlier attempt of an operation that
                            // gave up: stale.
                            continue;
                        }
                        let b = &self.buf[..n];
                        return match k {
                            Kind::SetOk if kind == Kind::Set => Ok(Reply::SetOk),
                            Kind::GetOk if kind == Kind::Get => {
                                Ok(Reply::Got((b.first() == Some(&1)).then(|| b[1..].to_vec())))
                            }
                            Kind::Error => {
                                let what =
                                    String::from_utf8_lossy(b.get(1..).unwrap_or(&[])).into_owned();
                                Err(match b.first() {
                                    Some(&wire::ERR_REJECTED) => KvsError::Rejected(what),
                                    Some(&wire::ERR_CLOSED) => KvsError::Closed,
                                    _ => KvsError::Unavailable(what),
                                })
                            }
                            _ => continue,
                        };
                    }
                    Err(MeshError::Timeout { .. }) => break,
                    Err(MeshError::Aborted { .. }) => return Err(KvsError::Closed),
                    Err(MeshError::PeerGone { .. }) => {
                        if self.move_on() {
                            continue 'attempts;
                        }
                        return Err(self.gone());
                    }
                    Err(e) => return Err(KvsError::Unavailable(e.to_string())),
                }
            }
            if self.closed.load(Ordering::Acquire) {
                return Err(KvsError::Closed);
            }
            attempt += 1;
        }
        Err(self.limits.timed_out(op))
    }
}
