//! The software cache of elements on other nodes (`GlobalConfig::cache_lines`): lines of
//! [`LINE`] consecutive elements of one owner's block, kept after a read until the
//! next invalidate fence (`SI_fence`, also part of every barrier), at most
//! `cache_lines` of them (the oldest go first). This member's own puts update the
//! lines they touch (it reads its own writes); its accumulates drop them (the owner
//! combines). Under the consistency model (data-race-free programs synchronise, then
//! fence) a cached line is never stale where it matters: another member's write to it
//! reaches this member only through a synchronisation followed by an invalidate fence,
//! which empties the cache.

use crate::GlobalError;
use std::collections::{HashMap, VecDeque};

/// Elements per cache line.
pub const LINE: u64 = 64;

/// Cache hits and misses of one member's array (reads of elements on other nodes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads served from cached lines (per line touched).
    pub hits: u64,
    /// Lines fetched.
    pub misses: u64,
    /// Lines dropped by invalidate fences, accumulates and eviction.
    pub dropped: u64,
}

#[derive(Debug)]
pub(crate) struct LineCache {
    cap: usize,
    lines: HashMap<(usize, u64), Box<[u64]>>,
    order: VecDeque<(usize, u64)>,
    pub(crate) stats: CacheStats,
}

impl LineCache {
    pub(crate) fn new(cap: usize) -> LineCache {
        LineCache {
            cap,
            lines: HashMap::new(),
            order: VecDeque::new(),
            stats: CacheStats::default(),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.cap > 0
    }

    /// Reads `out.len()` words of `owner`'s block from `offset` on (the block has
    /// `block_len` words), fetching missing lines with `fetch(start, buf)`.
    pub(crate) fn read(
        &mut self,
        owner: usize,
        offset: u64,
        out: &mut [u64],
        block_len: u64,
        mut fetch: impl FnMut(u64, &mut [u64]) -> Result<(), GlobalError>,
    ) -> Result<(), GlobalError> {
        let end = offset + out.len() as u64;
        let mut at = offset;
        while at < end {
            let line = at / LINE;
            let start = line * LINE;
            let key = (owner, line);
            if let Some(l) = self.lines.get(&key) {
                self.stats.hits += 1;
                let stop = (start + l.len() as u64).min(end);
                out[(at - offset) as usize..(stop - offset) as usize]
                    .copy_from_slice(&l[(at - start) as usize..(stop - start) as usize]);
                at = stop;
                continue;
            }
            self.stats.misses += 1;
            let len = LINE.min(block_len.saturating_sub(start));
            if len == 0 || at >= start + len {
                return Err(GlobalError::Invalid(format!(
                    "offset {at} outside a block of {block_len} elements"
                )));
            }
            let mut l = vec![0u64; len as usize].into_boxed_slice();
            fetch(start, &mut l)?;
            while self.lines.len() >= self.cap {
                match self.order.pop_front() {
                    Some(old) => {
                        if self.lines.remove(&old).is_some() {
                            self.stats.dropped += 1;
                        }
                    }
                    None => break,
                }
            }
            self.lines.insert(key, l);
            self.order.push_back(key);
        }
        Ok(())
    }

    /// This member wrote `words` at `offset` of `owner`'s block: cached lines follow.
    pub(crate) fn write(&mut self, owner: usize, offset: u64, words: &[u64]) {
        let end = offset + words.len() as u64;
        for line in offset / LINE..end.div_ceil(LINE) {
            if let Some(l) = self.lines.get_mut(&(owner, line)) {
                let start = line * LINE;
                let (a, b) = (offset.max(start), end.min(start + l.len() as u64));
                if a < b {
                    l[(a - start) as usize..(b - start) as usize]
                        .copy_from_slice(&words[(a - offset) as usize..(b - offset) as usize]);
                }
            }
        }
    }

    /// Drops the lines of `owner`'s block that `offset..offset+n` touches.
    pub(crate) fn drop_range(&mut self, owner: usize, offset: u64, n: u64) {
        for line in offset / LINE..(offset + n).div_ceil(LINE) {
            if self.lines.remove(&(owner, line)).is_some() {
                self.stats.dropped += 1;
            }
        }
    }

    /// Drops every line (the invalidate fence).
    pub(crate) fn clear(&mut self) {
        self.stats.dropped += self.lines.len() as u64;
        self.lines.clear();
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_fetched_once_follow_own_writes_and_go_at_fences() {
        let mut c = LineCache::new(2);
        let mut remote: Vec<u64> = (0..200).collect();
        let mut fetches = 0;
        let mut out = [0u64; 10];
        let fetch = |remote: &Vec<u64>| {
            let r = remote.clone();
            move |start: u64, buf: &mut [u64]| {
                buf.copy_from_slice(&r[start as usize..start as usize + buf.len()]);
                Ok(())
            }
        };
        c.read(3, 60, &mut out, 200, fetch(&remote)).unwrap(); // lines 0 and 1
        fetches += 2;
        assert_eq!(out.to_vec(), (60..70).collect::<Vec<_>>());
        assert_eq!(c.stats.misses, fetches);
        remote[61] = 999; // another member's write: not seen until the fence
        c.read(3, 61, &mut out[..1], 200, fetch(&remote)).unwrap();
        assert_eq!(out[0], 61);
        c.write(3, 62, &[7, 8]); // own writes are seen
        c.read(3, 62, &mut out[..2], 200, fetch(&remote)).unwrap();
        assert_eq!(&out[..2], &[7, 8]);
        c.clear();
        c.read(3, 61, &mut out[..1], 200, fetch(&remote)).unwrap();
        assert_eq!(out[0], 999);
        // The last line of a block is short; a third line evicts the oldest.
        c.read(3, 195, &mut out[..5], 200, fetch(&remote)).unwrap();
        c.read(3, 130, &mut out[..1], 200, fetch(&remote)).unwrap();
        assert_eq!(c.lines.len(), 2);
        c.drop_range(3, 192, 8);
        assert_eq!(c.lines.len(), 1);
        assert!(c.read(3, 250, &mut out[..1], 200, fetch(&remote)).is_err());
    }
}
