//! The PP scheme's buffer: one per (source process, destination process), filled by
//! every worker of the source process with atomics.
//!
//! Publish protocol. A buffer has `g` slots, a `claimed` counter and a `written`
//! counter. An inserter claims slot `i = claimed.fetch_add(1)`; if `i < g` it writes
//! the slot's words (relaxed stores) and then `written.fetch_add(1, Release)`. The
//! inserter that claimed the last slot (`i == g - 1`) owns the full buffer: it waits
//! until `written == g` (every claimed slot is written; an `Acquire` load makes the
//! writes visible), copies the slots out, resets `written` and then releases the
//! buffer with `claimed.store(0, Release)`. Inserters that got `i >= g` (the buffer is
//! being shipped) back off until `claimed < g` and claim again. A flush closes a
//! partial buffer by `claimed.fetch_add(g)`: if the old value `c` was below `g`, the
//! flush owns the `c` claimed slots and ships them as above; otherwise someone else is
//! shipping the buffer. Every slot claimed in one generation is therefore shipped
//! exactly once, in that generation's message.

use crate::AggError;
use crossbeam_utils::CachePadded;
use smelt_transport::{Backoff, WaitPolicy};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct PpBuf {
    g: usize,
    item: usize,
    /// Words per slot: the destination worker, then the item's bytes.
    per: usize,
    claimed: CachePadded<AtomicUsize>,
    written: CachePadded<AtomicUsize>,
    /// When slot 0 was claimed, in ns since `base` plus 1 (0: empty).
    since: AtomicU64,
    words: Box<[AtomicU64]>,
}

/// Waits with backoff (spin, yield, then short naps) until `ready`, for at most
/// `limit`.
pub(crate) fn wait_until(
    wait: &WaitPolicy,
    limit: Duration,
    what: &str,
    mut ready: impl FnMut() -> bool,
) -> Result<(), AggError> {
    let mut b = Backoff::with_policy(wait);
    let mut start: Option<Instant> = None;
    let mut nap = wait.park_initial;
    while !ready() {
        if b.is_completed() {
            let s = *start.get_or_insert_with(Instant::now);
            if s.elapsed() > limit {
                return Err(AggError::Timeout {
                    what: what.into(),
                    after: limit,
                });
            }
            std::thread::park_timeout(nap);
            nap = (nap * 2).min(wait.park_max);
        } else {
            b.snooze();
        }
    }
    Ok(())
}

impl PpBuf {
    pub(crate) fn new(g: usize, item: usize) -> PpBuf {
        let per = 1 + item.div_ceil(8);
        PpBuf {
            g,
            item,
            per,
            claimed: CachePadded::new(AtomicUsize::new(0)),
            written: CachePadded::new(AtomicUsize::new(0)),
            since: AtomicU64::new(0),
            words: (0..g * per).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Adds `item` for worker `w` of the destination process: the full buffer's
    /// message (items with their worker in front) if this insert filled it.
    pub(crate) fn insert(
        &self,
        w: u16,
        item: &[u8],
        base: Instant,
        wait: &WaitPolicy,
        limit: Duration,
    ) -> Result<Option<Vec<u8>>, AggError> {
        loop {
            if self.claimed.load(Ordering::Acquire) >= self.g {
                wait_until(wait, limit, "for a shared PP buffer being shipped", || {
                    self.claimed.load(Ordering::Acquire) < self.g
                })?;
                continue;
            }
            let i = self.claimed.fetch_add(1, Ordering::AcqRel);
            if i >= self.g {
                continue;
            }
            if i == 0 {
                self.since
                    .store(base.elapsed().as_nanos() as u64 + 1, Ordering::Relaxed);
            }
            let at = i * self.per;
            self.words[at].store(w as u64, Ordering::Relaxed);
            for (k, c) in item.chunks(8).enumerate() {
                let mut b = [0u8; 8];
                b[..c.len()].copy_from_slice(c);
                self.words[at + 1 + k].store(u64::from_le_bytes(b), Ordering::Relaxed);
            }
            self.written.fetch_add(1, Ordering::Release);
            if i == self.g - 1 {
                return self.take(self.g, wait, limit).map(Some);
            }
            return Ok(None);
        }
    }

    /// Ships the partial buffer, if no one else is shipping it: its message (None if
    /// it was empty or someone else had it).
    pub(crate) fn flush(
        &self,
        wait: &WaitPolicy,
        limit: Duration,
    ) -> Result<Option<Vec<u8>>, AggError> {
        if self.claimed.load(Ordering::Acquire) == 0 {
            return Ok(None);
        }
        let c = self.claimed.fetch_add(self.g, Ordering::AcqRel);
        if c >= self.g {
            return Ok(None);
        }
        let v = self.take(c, wait, limit)?;
        Ok((c > 0).then_some(v))
    }

    /// True if the buffer holds items claimed longer ago than `d`.
    pub(crate) fn older_than(&self, d: Duration, base: Instant) -> bool {
        let s = self.since.load(Ordering::Relaxed);
        s != 0 && (base.elapsed().as_nanos() as u64 + 1).saturating_sub(s) >= d.as_nanos() as u64
    }

    fn take(&self, c: usize, wait: &WaitPolicy, limit: Duration) -> Result<Vec<u8>, AggError> {
        wait_until(
            wait,
            limit,
            "for the slots of a shared PP buffer to be written",
            || self.written.load(Ordering::Acquire) >= c,
        )?;
        let mut out = Vec::with_capacity(c * (self.item + 2));
        for i in 0..c {
            let at = i * self.per;
            let w = self.words[at].load(Ordering::Relaxed) as u16;
            out.extend_from_slice(&w.to_le_bytes());
            let mut left = self.item;
            for k in 0..self.per - 1 {
                let b = self.words[at + 1 + k].load(Ordering::Relaxed).to_le_bytes();
                let n = left.min(8);
                out.extend_from_slice(&b[..n]);
                left -= n;
            }
        }
        self.since.store(0, Ordering::Relaxed);
        self.written.store(0, Ordering::Relaxed);
        self.claimed.store(0, Ordering::Release);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// 16 threads fill one shared buffer of 7 slots; every item comes out once.
    #[test]
    fn every_claimed_slot_ships_once() {
        let b = Arc::new(PpBuf::new(7, 12));
        let base = Instant::now();
        let per = 2000u32;
        let out = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..16u32 {
                let b = b.clone();
                let out = &out;
                s.spawn(move || {
                    let w = WaitPolicy::OVERSUBSCRIBED;
                    for i in 0..per {
                        let mut item = [0u8; 12];
                        item[..4].copy_from_slice(&t.to_le_bytes());
                        item[4..8].copy_from_slice(&i.to_le_bytes());
                        if let Some(m) = b
                            .insert(t as u16, &item, base, &w, Duration::from_secs(30))
                            .unwrap()
                        {
                            out.lock().unwrap().push(m);
                        }
                        if i % 97 == 0 {
                            if let Some(m) = b.flush(&w, Duration::from_secs(30)).unwrap() {
                                out.lock().unwrap().push(m);
                            }
                        }
                    }
                });
            }
        });
        if let Some(m) = b
            .flush(&WaitPolicy::OVERSUBSCRIBED, Duration::from_secs(1))
            .unwrap()
        {
            out.lock().unwrap().push(m);
        }
        let mut seen = vec![vec![false; per as usize]; 16];
        let mut n = 0;
        for m in out.into_inner().unwrap() {
            assert!(!m.is_empty() && m.len() % 14 == 0 && m.len() <= 7 * 14);
            for r in m.chunks_exact(14) {
                let w = u16::from_le_bytes([r[0], r[1]]) as usize;
                let t = u32::from_le_bytes(r[2..6].try_into().unwrap()) as usize;
                let i = u32::from_le_bytes(r[6..10].try_into().unwrap()) as usize;
                assert_eq!(w, t);
                assert!(!seen[t][i], "item {t}/{i} twice");
                seen[t][i] = true;
                n += 1;
            }
        }
        assert_eq!(n, 16 * per as usize);
    }
}
