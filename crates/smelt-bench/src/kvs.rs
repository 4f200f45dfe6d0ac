//! The store's workloads: the load generator (`smelt_kvs::bench`, re-exported; it
//! stays in the store crate because the store's own tests drive their linearizability
//! checks with it), the raft-rs baseline ([`raft`]: [`RaftStore`], [`run_raft`]),
//! which moved here so that `smelt-kvs` compiles no raft, protobuf or slog crate, and
//! the store's simulator on a model ([`sim`]).

pub mod raft;
pub mod sim;

pub use raft::{RaftClient, RaftStore};
pub use smelt_kvs::bench::{
    drive, run, unique_value, validate, BenchConfig, BenchResult, Driven, Histogram, Loader,
    OpStats, Victim,
};

use smelt_kvs::{KvsError, StoreReport};

/// [`run`] with the same store replicated by Raft instead ([`RaftStore`]: same
/// replicas, clients, homes, keys and values, the same load); `cfg.store`'s protocol
/// and tree do not apply, and a crash of `Victim::Acceptor` or `Victim::Leader` stops
/// Raft's current leader.
pub fn run_raft(cfg: &BenchConfig) -> Result<BenchResult, KvsError> {
    validate(cfg)?;
    let store = RaftStore::start(cfg.store.clone())?;
    drive(cfg, store, "raft (raft-rs, in memory)".into())
}

// Raft has no acceptor: its leader orders the log.
impl Driven for RaftStore {
    type C = RaftClient;
    fn take_clients(&mut self) -> Vec<RaftClient> {
        RaftStore::take_clients(self)
    }
    fn root(&self) -> usize {
        RaftStore::leader(self)
    }
    fn leader(&self) -> usize {
        RaftStore::leader(self)
    }
    fn crash(&mut self, replica: usize) -> Result<(), KvsError> {
        RaftStore::crash(self, replica)
    }
    fn close(self) -> Result<StoreReport, KvsError> {
        RaftStore::close(self)
    }
}

impl Loader for RaftClient {
    fn id(&self) -> usize {
        RaftClient::id(self)
    }
    fn retries(&self) -> u64 {
        RaftClient::retries(self)
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvsError> {
        RaftClient::get(self, key)
    }
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvsError> {
        RaftClient::set(self, key, value)
    }
}
