//! Checking that an aggregator delivered every item once, at the right worker: the
//! check `smelt-bench-mpi agg` (smelt-bench) runs across MPI ranks and this crate's
//! process tests run across the processes of a host.
//!
//! The workers' state is a [`Tally`] and their handler [`receive`]. Every worker
//! inserts `items` 8-byte items ([`item`]), each for the worker [`destination`] names,
//! and tallies what it sends ([`send`]); the handler tallies what arrives and counts an
//! item that reached another worker than its destination. The tallies of every worker
//! of every process are merged ([`Tally::merge`]) and [`verify`] compares them: a
//! lost, duplicated, altered or misplaced item shows.
//!
//! ```
//! use smelt_agg::tally::{self, Tally};
//! use smelt_agg::{threads, AggConfig, Scheme};
//! use std::time::Duration;
//! let cfg = AggConfig::new(Scheme::PP, 8).buffer_items(16);
//! let workers = threads(2, 2, cfg, |_| Tally::default(), tally::receive).unwrap();
//! let t = tally::run(workers, 100, Duration::from_secs(30)).unwrap();
//! tally::verify(&t.sent, &t.received, 4 * 100).unwrap();
//! ```

use crate::{AggError, Out, Worker};
use smelt_ids::rng::mix;
use smelt_transport::Link;
use std::time::Duration;

/// A checksum of a stream of 8-byte items: how many, the sum and the xor of two
/// mixes of each (order does not matter, a lost, duplicated or altered item changes
/// them), and how many arrived at another worker than their [`destination`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Items.
    pub items: u64,
    /// The wrapping sum of their mixes.
    pub sum: u64,
    /// The xor of another mix of each.
    pub xor: u64,
    /// Items handled at a worker other than their destination.
    pub misplaced: u64,
}

impl Tally {
    /// Counts item `x`.
    pub fn add(&mut self, x: u64) {
        self.items += 1;
        self.sum = self.sum.wrapping_add(mix(x));
        self.xor ^= mix(x.rotate_left(17));
    }

    /// Adds the items of `o`.
    pub fn merge(&mut self, o: &Tally) {
        self.items += o.items;
        self.sum = self.sum.wrapping_add(o.sum);
        self.xor ^= o.xor;
        self.misplaced += o.misplaced;
    }

    /// The four numbers, in the order of the fields (to send or print them).
    pub fn words(&self) -> [u64; 4] {
        [self.items, self.sum, self.xor, self.misplaced]
    }

    /// A tally from its [`words`](Tally::words).
    pub fn from_words(w: [u64; 4]) -> Tally {
        Tally {
            items: w[0],
            sum: w[1],
            xor: w[2],
            misplaced: w[3],
        }
    }
}

/// The worker of a job of `workers` that item `x` is sent to (spread evenly).
pub fn destination(x: u64, workers: usize) -> usize {
    (mix(x ^ 0x5555) % workers.max(1) as u64) as usize
}

/// The `i`-th item of worker `worker` (distinct for every worker and `i` below 2^40).
pub fn item(worker: usize, i: u64) -> u64 {
    ((worker as u64) << 40) | i
}

/// The handler of a checked aggregator: tallies the item in the worker's state, and
/// counts it misplaced when it is not 8 bytes or this worker is not its
/// [`destination`].
pub fn receive(s: &mut Tally, item: &[u8], out: &mut Out<'_>) {
    let Ok(bytes) = <[u8; 8]>::try_from(item) else {
        s.misplaced += 1;
        return;
    };
    let x = u64::from_le_bytes(bytes);
    if destination(x, out.size()) != out.me() {
        s.misplaced += 1;
    }
    s.add(x);
}

/// Worker `w` inserts its `items` items ([`item`], each for its [`destination`]),
/// then terminates (waiting at most `limit`): the tally of what it sent.
pub fn send<L: Link + 'static>(
    w: &mut Worker<Tally, L>,
    items: u64,
    limit: Duration,
) -> Result<Tally, AggError> {
    let mut sent = Tally::default();
    for i in 0..items {
        let x = item(w.id(), i);
        w.insert_u64(x, destination(x, w.size()))?;
        sent.add(x);
    }
    w.terminate(limit)?;
    Ok(sent)
}

/// What the workers of one process sent and received, over all of them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// What they inserted.
    pub sent: Tally,
    /// What their handlers got.
    pub received: Tally,
    /// Messages they sent ([`crate::WorkerStats::messages`]).
    pub messages: u64,
}

/// Runs `workers` (this process's, of a job of [`receive`] handlers), each on its own
/// thread, each [`send`]ing `items` items: their totals, or the first error (a worker
/// thread that panicked is an error too).
pub fn run<L: Link + 'static>(
    workers: Vec<Worker<Tally, L>>,
    items: u64,
    limit: Duration,
) -> Result<Totals, AggError> {
    let each: Vec<Result<Totals, AggError>> = std::thread::scope(|s| {
        let hs: Vec<_> = workers
            .into_iter()
            .map(|mut w| {
                s.spawn(move || -> Result<Totals, AggError> {
                    let sent = send(&mut w, items, limit)?;
                    Ok(Totals {
                        sent,
                        received: *w.state(),
                        messages: w.stats().messages,
                    })
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(AggError::Invalid("a worker thread panicked".into())))
            })
            .collect()
    });
    let mut t = Totals::default();
    for w in each {
        let w = w?;
        t.sent.merge(&w.sent);
        t.received.merge(&w.received);
        t.messages += w.messages;
    }
    Ok(t)
}

/// The check over the whole job: `expected` items were sent, every one arrived once,
/// unaltered, at its destination. The error ([`AggError::Check`]) says what differs.
pub fn verify(sent: &Tally, received: &Tally, expected: u64) -> Result<(), AggError> {
    let wrong = if sent.items != expected {
        format!("{} items sent of {expected}", sent.items)
    } else if received.misplaced != 0 {
        format!("{} items at the wrong worker", received.misplaced)
    } else if received != sent {
        format!(
            "items lost, duplicated or altered: sent {:?}, received {:?}",
            sent.words(),
            received.words()
        )
    } else {
        return Ok(());
    };
    Err(AggError::Check(wrong))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(items: impl IntoIterator<Item = u64>) -> Tally {
        let mut t = Tally::default();
        items.into_iter().for_each(|x| t.add(x));
        t
    }

    #[test]
    fn verify_names_what_went_wrong() {
        let sent = of(0..10);
        // The same items in another order, merged from two workers: good.
        let mut got = of((5..10).rev());
        got.merge(&of(0..5));
        assert!(verify(&sent, &got, 10).is_ok());
        let err = |t: &Tally| verify(&sent, t, 10).unwrap_err().to_string();
        assert!(verify(&sent, &got, 11)
            .unwrap_err()
            .to_string()
            .contains("aggregation check failed: 10 items sent of 11"));
        let lost = of(1..10);
        assert!(err(&lost).contains("lost"));
        let twice = of((0..10).chain([3]));
        assert!(err(&twice).contains("duplicated"));
        let altered = of((0..9).chain([99]));
        assert!(err(&altered).contains("altered"));
        let mut misplaced = got;
        misplaced.misplaced = 1;
        assert!(err(&misplaced).contains("wrong worker"));
        assert_eq!(Tally::from_words(got.words()), got);
    }

    #[test]
    fn items_are_distinct_and_spread_over_the_workers() {
        let mut per = [0u32; 4];
        let mut seen = std::collections::HashSet::new();
        for w in 0..4 {
            for i in 0..1000 {
                assert!(seen.insert(item(w, i)));
                per[destination(item(w, i), 4)] += 1;
            }
        }
        assert!(per.iter().all(|&n| n > 800), "{per:?}");
    }
}
