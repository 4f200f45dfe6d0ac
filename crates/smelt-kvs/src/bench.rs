//! A load generator for the store: clients loop over random gets and sets for a fixed
//! time, every set writing a value never written before (client id and sequence
//! number), with latencies and, if asked, the full history. It drives any store that
//! implements [`Driven`]: the smelt store here ([`run`]), the raft-rs baseline in
//! `smelt-bench` (`smelt_bench::kvs::run_raft`), with the same load.

use crate::config::{KvsError, StoreConfig};
use crate::history::{HistoryOp, OpKind};
use crate::store::{Store, StoreReport};
use crate::Client;
use serde::Serialize;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The store (its `clients` clients generate the load).
    pub store: StoreConfig,
    /// Share of gets among operations (0 to 1).
    pub get_ratio: f64,
    /// How long the clients run.
    pub duration: Duration,
    /// Keys are drawn uniformly from `0..keys`.
    pub keys: u64,
    /// Seed of the clients' random choices.
    pub seed: u64,
    /// Keep every operation (for `--history` and the checker).
    pub history: bool,
    /// OS CPU of each client's thread (pinned where allowed); default unpinned.
    pub client_cpus: Option<Vec<u32>>,
    /// Replicas to stop (fail-stop) during the run, and when (from its start).
    pub crashes: Vec<(Duration, Victim)>,
}

/// A replica to stop during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Victim {
    /// The root of the current view (1Paxos acceptor, 2PC coordinator).
    Acceptor,
    /// The 1Paxos leader of the current view.
    Leader,
    /// Replica `n`.
    Replica(usize),
}

impl std::str::FromStr for Victim {
    type Err = String;
    fn from_str(s: &str) -> Result<Victim, String> {
        match s.trim() {
            "acceptor" | "root" | "coordinator" => Ok(Victim::Acceptor),
            "leader" => Ok(Victim::Leader),
            other => match other.strip_prefix("replica:").map(|n| n.parse::<usize>()) {
                Some(Ok(n)) => Ok(Victim::Replica(n)),
                _ => Err(format!(
                    "unknown replica '{other}' (known: acceptor, leader, replica:N)"
                )),
            },
        }
    }
}

impl BenchConfig {
    /// Defaults: 80 % gets, 1 s, 1000 keys, no history.
    pub fn new(store: StoreConfig) -> BenchConfig {
        BenchConfig {
            store,
            get_ratio: 0.8,
            duration: Duration::from_secs(1),
            keys: 1000,
            seed: 1,
            history: false,
            client_cpus: None,
            crashes: Vec::new(),
        }
    }
}

/// Throughput and latency of one kind of operation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OpStats {
    /// Operations that completed.
    pub ok: u64,
    /// Operations that failed (timed out, refused).
    pub failed: u64,
    /// Completed operations per second, all clients together.
    pub per_sec: f64,
    /// Median latency of completed operations, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// Mean, ns.
    pub mean_ns: u64,
}

/// Latencies in log-linear buckets (64 per power of two: within 1.6 %), so that a
/// long run takes constant memory.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    n: u64,
    sum: u128,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; 64 * 58 + 128],
            n: 0,
            sum: 0,
        }
    }
}

impl Histogram {
    fn index(v: u64) -> usize {
        if v < 128 {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as usize; // 7..=63
        64 * (e - 6) + (v >> (e - 6)) as usize
    }

    /// A value in the middle of bucket `i`.
    fn value(i: usize) -> u64 {
        if i < 128 {
            return i as u64;
        }
        let e = i / 64 + 5;
        let m = (i % 64 + 64) as u64;
        let lo = m << (e - 6);
        lo + (1u64 << (e - 6)) / 2
    }

    /// Records one value.
    pub fn record(&mut self, v: u64) {
        self.counts[Self::index(v)] += 1;
        self.n += 1;
        self.sum += v as u128;
    }

    /// Adds another histogram's values.
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.n += o.n;
        self.sum += o.sum;
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// True if nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The `q` quantile (0 to 1), within the bucket precision (0 if empty).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((self.n - 1) as f64 * q.clamp(0.0, 1.0)).round() as u64;
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen > rank {
                return Self::value(i);
            }
        }
        0
    }

    /// The mean (exact).
    pub fn mean(&self) -> u64 {
        if self.n == 0 {
            0
        } else {
            (self.sum / self.n as u128) as u64
        }
    }
}

impl OpStats {
    fn of(h: &Histogram, failed: u64, secs: f64) -> OpStats {
        OpStats {
            ok: h.len(),
            failed,
            per_sec: h.len() as f64 / secs.max(1e-9),
            p50_ns: h.quantile(0.5),
            p99_ns: h.quantile(0.99),
            mean_ns: h.mean(),
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// Protocol and tree (`1paxos over adaptive-shuffled`).
    pub setup: String,
    /// Sets.
    pub sets: OpStats,
    /// Gets.
    pub gets: OpStats,
    /// The time the clients ran.
    pub elapsed: Duration,
    /// Attempts beyond the first, all clients together.
    pub retries: u64,
    /// The first failure a client saw, if any.
    pub first_error: Option<String>,
    /// Every operation, if asked for (by call time).
    pub history: Vec<HistoryOp>,
    /// The replicas' reports.
    pub report: StoreReport,
    /// The replicas stopped during the run: when (from its start) and which.
    pub crashed: Vec<(Duration, usize)>,
}

/// The value a benchmark set writes: unique per (client, sequence number).
pub fn unique_value(client: usize, n: u64) -> u64 {
    ((client as u64 + 1) << 40) | (n & ((1 << 40) - 1))
}

/// Runs the store under load for `cfg.duration` (each client's last operation may
/// take up to its attempts × attempt timeout more), then closes it.
pub fn run(cfg: &BenchConfig) -> Result<BenchResult, KvsError> {
    validate(cfg)?;
    let store = Store::start(cfg.store.clone())?;
    drive(cfg, store, store_setup(&cfg.store))
}

/// A store the load generator drives (the smelt store, or a baseline such as the
/// raft-rs store of `smelt-bench`).
pub trait Driven {
    /// Its clients.
    type C: Loader + Send;
    /// The clients (client `c` is element `c`).
    fn take_clients(&mut self) -> Vec<Self::C>;
    /// The replica [`Victim::Acceptor`] names.
    fn root(&self) -> usize;
    /// The replica [`Victim::Leader`] names.
    fn leader(&self) -> usize;
    /// Stops `replica` as a fail-stop crash.
    fn crash(&mut self, replica: usize) -> Result<(), KvsError>;
    /// Closes the store: every replica's report.
    fn close(self) -> Result<StoreReport, KvsError>;
}

/// A client of a [`Driven`] store.
pub trait Loader {
    /// Its id (0-based, as in histories).
    fn id(&self) -> usize;
    /// Attempts beyond the first so far.
    fn retries(&self) -> u64;
    /// The value of `key`.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvsError>;
    /// Sets `key` to `value`.
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvsError>;
}

macro_rules! driven {
    ($store:ty, $client:ty, $root:expr) => {
        impl Driven for $store {
            type C = $client;
            fn take_clients(&mut self) -> Vec<$client> {
                <$store>::take_clients(self)
            }
            fn root(&self) -> usize {
                $root(self)
            }
            fn leader(&self) -> usize {
                <$store>::leader(self)
            }
            fn crash(&mut self, replica: usize) -> Result<(), KvsError> {
                <$store>::crash(self, replica)
            }
            fn close(self) -> Result<StoreReport, KvsError> {
                <$store>::close(self)
            }
        }
        impl Loader for $client {
            fn id(&self) -> usize {
                <$client>::id(self)
            }
            fn retries(&self) -> u64 {
                <$client>::retries(self)
            }
            fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvsError> {
                <$client>::get(self, key)
            }
            fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvsError> {
                <$client>::set(self, key, value)
            }
        }
    };
}
driven!(Store, Client, Store::root);

/// Checks `cfg` before a store is started for it: a get ratio from 0 to 1, keys and
/// values of at least 8 bytes, keys and clients, crashes of replicas that exist within
/// the run.
pub fn validate(cfg: &BenchConfig) -> Result<(), KvsError> {
    if !(0.0..=1.0).contains(&cfg.get_ratio) {
        return Err(KvsError::Config(format!(
            "get ratio {} is not between 0 and 1",
            cfg.get_ratio
        )));
    }
    if cfg.store.key_len < 8 || cfg.store.value_len < 8 {
        return Err(KvsError::Config(format!(
            "the benchmark writes 8-byte keys and values; the store has {}-byte keys and {}-byte values",
            cfg.store.key_len, cfg.store.value_len
        )));
    }
    if cfg.keys == 0 {
        return Err(KvsError::Config(
            "the benchmark needs at least one key".into(),
        ));
    }
    if cfg.store.clients == 0 {
        return Err(KvsError::Config(
            "the benchmark needs at least one client".into(),
        ));
    }
    for &(at, v) in &cfg.crashes {
        if let Victim::Replica(n) = v {
            if n >= cfg.store.replicas {
                return Err(KvsError::Config(format!(
                    "replica {n} to crash does not exist (0..{})",
                    cfg.store.replicas
                )));
            }
        }
        if at > cfg.duration {
            return Err(KvsError::Config(format!(
                "a crash at {at:?} is after the run's {:?}",
                cfg.duration
            )));
        }
    }
    Ok(())
}

/// Runs `cfg`'s load on `store` (started for `cfg.store`, checked by [`validate`]) for
/// `cfg.duration`, then closes it; `setup` names it in the result.
pub fn drive<S: Driven>(
    cfg: &BenchConfig,
    mut store: S,
    setup: String,
) -> Result<BenchResult, KvsError> {
    let clients = store.take_clients();
    let value_len = cfg.store.value_len;
    let base = Instant::now();
    let deadline = base + cfg.duration;
    struct PerClient {
        set_lat: Histogram,
        get_lat: Histogram,
        set_failed: u64,
        get_failed: u64,
        retries: u64,
        first_error: Option<String>,
        history: Vec<HistoryOp>,
    }
    let mut crashed = Vec::new();
    let mut crash_error = None;
    let per: Vec<PerClient> = std::thread::scope(|s| {
        let hs: Vec<_> = clients
            .into_iter()
            .map(|mut c| {
                let seed = cfg.seed;
                let pin = cfg.client_cpus.as_ref().map(|v| v[c.id()]);
                s.spawn(move || {
                    if let Some(cpu) = pin {
                        let _ = smelt_transport::pin_current_thread(smelt_mesh::CpuId(cpu));
                    }
                    let id = c.id();
                    let mut x = seed
                        .wrapping_add(id as u64)
                        .wrapping_mul(0x9e3779b97f4a7c15)
                        | 1;
                    let mut rnd = move || {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x
                    };
                    let mut p = PerClient {
                        set_lat: Histogram::default(),
                        get_lat: Histogram::default(),
                        set_failed: 0,
                        get_failed: 0,
                        retries: 0,
                        first_error: None,
                        history: Vec::new(),
                    };
                    let mut n = 0u64;
                    let mut value = vec![0u8; value_len];
                    loop {
                        let t0 = Instant::now();
                        if t0 >= deadline {
                            break;
                        }
                        let key = rnd() % cfg.keys;
                        let kb = key.to_le_bytes();
                        let is_get = (rnd() % 1_000_000) as f64 / 1e6 < cfg.get_ratio;
                        let mut home_gone = false;
                        let (ok, v) = if is_get {
                            match c.get(&kb) {
                                Ok(v) => (
                                    true,
                                    v.map(|b| {
                                        let mut w = [0u8; 8];
                                        let k = b.len().min(8);
                                        w[..k].copy_from_slice(&b[..k]);
                                        u64::from_le_bytes(w)
                                    }),
                                ),
                                Err(e) => {
                                    home_gone = matches!(e, KvsError::HomeFailed { .. });
                                    p.first_error.get_or_insert_with(|| e.to_string());
                                    (false, None)
                                }
                            }
                        } else {
                            n += 1;
                            let u = unique_value(id, n);
                            value[..8].copy_from_slice(&u.to_le_bytes());
                            match c.set(&kb, &value) {
                                Ok(()) => (true, Some(u)),
                                Err(e) => {
                                    home_gone = matches!(e, KvsError::HomeFailed { .. });
                                    p.first_error.get_or_insert_with(|| e.to_string());
                                    (false, Some(u))
                                }
                            }
                        };
                        let t1 = Instant::now();
                        let lat = (t1 - t0).as_nanos() as u64;
                        match (is_get, ok) {
                            (true, true) => p.get_lat.record(lat),
                            (true, false) => p.get_failed += 1,
                            (false, true) => p.set_lat.record(lat),
                            (false, false) => p.set_failed += 1,
                        }
                        if cfg.history {
                            p.history.push(HistoryOp {
                                client: id,
                                op: if is_get { OpKind::Get } else { OpKind::Set },
                                key,
                                value: v,
                                call_ns: (t0 - base).as_nanos() as u64,
                                return_ns: (t1 - base).as_nanos() as u64,
                                ok,
                            });
                        }
                        if home_gone {
                            // Nowhere to send anything any more.
                            break;
                        }
                        if !ok {
                            // A client backs off a little before trying again.
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    p.retries = c.retries();
                    p
                })
            })
            .collect();
        // Stop replicas on schedule while the clients run.
        for &(at, v) in &cfg.crashes {
            std::thread::sleep((base + at).saturating_duration_since(Instant::now()));
            let r = match v {
                Victim::Acceptor => store.root(),
                Victim::Leader => store.leader(),
                Victim::Replica(n) => n,
            };
            match store.crash(r) {
                Ok(()) => crashed.push((base.elapsed(), r)),
                Err(e) => crash_error = Some(e),
            }
        }
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| PerClient {
                    set_lat: Histogram::default(),
                    get_lat: Histogram::default(),
                    set_failed: 0,
                    get_failed: 0,
                    retries: 0,
                    first_error: Some("a client thread panicked".into()),
                    history: Vec::new(),
                })
            })
            .collect()
    });
    let elapsed = base.elapsed();
    let report = store.close()?;
    if let Some(e) = crash_error {
        return Err(e);
    }
    let secs = elapsed.as_secs_f64();
    let mut set_lat = Histogram::default();
    let mut get_lat = Histogram::default();
    let (mut sf, mut gf, mut retries) = (0, 0, 0);
    let mut first_error = None;
    let mut history = Vec::new();
    for p in per {
        set_lat.merge(&p.set_lat);
        get_lat.merge(&p.get_lat);
        sf += p.set_failed;
        gf += p.get_failed;
        retries += p.retries;
        if first_error.is_none() {
            first_error = p.first_error;
        }
        history.extend(p.history);
    }
    history.sort_by_key(|h| (h.call_ns, h.client));
    Ok(BenchResult {
        setup,
        sets: OpStats::of(&set_lat, sf, secs),
        gets: OpStats::of(&get_lat, gf, secs),
        elapsed,
        retries,
        first_error,
        history,
        report,
        crashed,
    })
}

fn store_setup(c: &StoreConfig) -> String {
    format!("{} over {}", c.protocol, c.tree.name())
}

#[cfg(test)]
mod tests {
    use super::Histogram;

    #[test]
    fn histogram_quantiles_within_two_percent() {
        let mut h = Histogram::default();
        assert_eq!((h.quantile(0.5), h.mean(), h.is_empty()), (0, 0, true));
        let mut v: Vec<u64> = (0..100_000u64)
            .map(|i| (i * 7919) % 3_000_000 + 1)
            .collect();
        for &x in &v {
            h.record(x);
        }
        v.sort_unstable();
        for q in [0.0, 0.01, 0.5, 0.9, 0.99, 1.0] {
            let exact = v[((v.len() - 1) as f64 * q).round() as usize] as f64;
            let got = h.quantile(q) as f64;
            assert!(
                (got - exact).abs() <= exact * 0.02 + 1.0,
                "q {q}: {got} vs {exact}"
            );
        }
        for x in [0u64, 1, 127, 128, 129, 1 << 20, u64::MAX / 3, u64::MAX] {
            let i = Histogram::index(x);
            let back = Histogram::value(i) as f64;
            assert!(
                (back - x as f64).abs() <= x as f64 * 0.02 + 1.0,
                "{x} -> {i} -> {back}"
            );
        }
        let mut g = Histogram::default();
        g.merge(&h);
        assert_eq!((g.len(), g.mean()), (h.len(), h.mean()));
    }
}
