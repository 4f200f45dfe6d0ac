//! An application written on active messages: a distributed histogram.
//!
//! A table of `bins` counters is spread over the endpoints in equal blocks. Every
//! endpoint makes `updates` random increments of the whole table: each is a request to
//! the owner of the bin (carrying up to 8 bins, `per_message`), whose handler
//! increments its counters and replies. When an endpoint's requests are all answered
//! it tells endpoint 0, which, once every endpoint is done, tells them all to finish.
//! Every endpoint then checks its block against the counts it must hold (each
//! endpoint's updates are a deterministic function of the seed and its index, so any
//! endpoint can recompute everybody's).
//!
//! The same code runs over threads, processes and MPI ranks (any [`Endpoint`]).

use smelt_am::{AmError, Endpoint, MAX_ARGS};
use smelt_transport::Link;
use std::time::{Duration, Instant};

/// Handler: increment the bins in the arguments (a request).
pub const ADD: u8 = 1;
/// Handler: the reply to [`ADD`] (and to the control requests).
pub const ACK: u8 = 2;
/// Handler at endpoint 0: one endpoint finished its updates.
pub const DONE: u8 = 3;
/// Handler: every endpoint finished; stop serving.
pub const FINISH: u8 = 4;

/// What to run.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Bins in the whole table.
    pub bins: u64,
    /// Increments each endpoint makes.
    pub updates: u64,
    /// Bins per message (1 to 8).
    pub per_message: usize,
    /// Seed of the random bins.
    pub seed: u64,
    /// Longest wait for the others.
    pub timeout: Duration,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            bins: 1 << 16,
            updates: 100_000,
            per_message: 1,
            seed: 1,
            timeout: Duration::from_secs(60),
        }
    }
}

/// The histogram's state at one endpoint (empty by default: see [`state`]).
#[derive(Debug, Clone, Default)]
pub struct State {
    /// This endpoint's block of counters.
    pub counts: Vec<u64>,
    /// First bin of the block.
    pub first: u64,
    /// Endpoints that told endpoint 0 they are done (at endpoint 0).
    pub done: usize,
    /// Endpoint 0 said finish.
    pub finish: bool,
}

/// What one endpoint saw.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Report {
    /// Increments this endpoint made.
    pub updates: u64,
    /// Sum of this endpoint's block after the run.
    pub block_sum: u64,
    /// The block matches what every endpoint's updates put in it.
    pub ok: bool,
    /// Seconds from start to finish (after every endpoint was done).
    pub seconds: f64,
}

/// The block of bins of endpoint `i` of `n`: `[first, end)`.
pub fn block(bins: u64, n: usize, i: usize) -> (u64, u64) {
    let per = bins.div_ceil(n as u64);
    ((i as u64 * per).min(bins), ((i as u64 + 1) * per).min(bins))
}

/// The state endpoint `me` of `n` starts with.
pub fn state(o: &Opts, n: usize, me: usize) -> State {
    let (first, end) = block(o.bins, n, me);
    State {
        counts: vec![0; (end - first) as usize],
        first,
        done: 0,
        finish: false,
    }
}

/// The `k`-th bin endpoint `who` increments (splitmix64 of the seed, the endpoint and
/// `k`).
pub fn bin(o: &Opts, who: usize, k: u64) -> u64 {
    let z = o
        .seed
        .wrapping_add((who as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(k.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    smelt_ids::rng::finalize(z) % o.bins
}

/// Registers the histogram's handlers.
pub fn register<L: Link + 'static>(ep: &mut Endpoint<State, L>) -> Result<(), AmError> {
    ep.register(ADD, |s: &mut State, ctx, m| {
        for &b in m.args {
            // A bin outside this block is a bug of the sender: refuse the message.
            let Some(c) = b
                .checked_sub(s.first)
                .and_then(|i| s.counts.get_mut(i as usize))
            else {
                return;
            };
            *c += 1;
        }
        let _ = ctx.reply(ACK, &[]);
    })?;
    ep.register(ACK, |_, _, _| {})?;
    ep.register(DONE, |s: &mut State, ctx, _| {
        s.done += 1;
        let _ = ctx.reply(ACK, &[]);
    })?;
    ep.register(FINISH, |s: &mut State, ctx, _| {
        s.finish = true;
        let _ = ctx.reply(ACK, &[]);
    })
}

/// Runs the histogram at this endpoint (every endpoint of the job calls it).
pub fn run<L: Link + 'static>(ep: &mut Endpoint<State, L>, o: &Opts) -> Result<Report, AmError> {
    if !(1..=MAX_ARGS).contains(&o.per_message) || o.bins == 0 {
        return Err(AmError::Invalid(format!(
            "a histogram of {} bins with {} bins per message (1 to {MAX_ARGS})",
            o.bins, o.per_message
        )));
    }
    let (n, me) = (ep.size(), ep.me());
    let start = Instant::now();
    let mut pending: Vec<Vec<u64>> = vec![Vec::with_capacity(o.per_message); n];
    for k in 0..o.updates {
        let b = bin(o, me, k);
        let owner = ((b / o.bins.div_ceil(n as u64)) as usize).min(n - 1);
        let p = &mut pending[owner];
        p.push(b);
        if p.len() == o.per_message {
            ep.request(owner, ADD, p)?;
            pending[owner].clear();
        }
    }
    for (owner, p) in pending.iter().enumerate() {
        if !p.is_empty() {
            ep.request(owner, ADD, p)?;
        }
    }
    ep.quiesce(o.timeout)?;
    ep.request(0, DONE, &[])?;
    if me == 0 {
        ep.run_until(o.timeout, |s| s.done == n)?;
        for d in 0..n {
            ep.request(d, FINISH, &[])?;
        }
    }
    // Endpoints that finished first leave: each is reported once, and was done.
    let gone_ok = |r: Result<(), AmError>| match r {
        Err(AmError::PeerGone { .. }) => Ok(false),
        r => r.map(|()| true),
    };
    while !gone_ok(ep.run_until(o.timeout, |s| s.finish))? {}
    while !gone_ok(ep.quiesce(o.timeout))? {}
    let seconds = start.elapsed().as_secs_f64();
    // What the block must hold.
    let s = ep.state();
    let mut want = vec![0u64; s.counts.len()];
    for who in 0..n {
        for k in 0..o.updates {
            let b = bin(o, who, k);
            if let Some(c) = b
                .checked_sub(s.first)
                .and_then(|i| want.get_mut(i as usize))
            {
                *c += 1;
            }
        }
    }
    Ok(Report {
        updates: o.updates,
        block_sum: s.counts.iter().sum(),
        ok: want == s.counts,
        seconds,
    })
}
