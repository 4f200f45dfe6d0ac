//! A third transport, written outside the runtime: links over standard-library
//! channels. The collectives run over it unchanged (built with `Member::with_links`),
//! which is what lets a new transport (MPI, a network engine) be added without touching
//! them.

mod common;

use common::{all_collectives, random_tree};
use smelt_runtime::{GroupConfig, GroupError, LinkEnd, Member, Rank};
use smelt_transport::{Abort, Link, TransportError};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::Duration;

/// One end of a link made of two unbounded standard-library channels.
struct ChanLink {
    tx: Sender<(u64, Vec<u8>)>,
    rx: Receiver<(u64, Vec<u8>)>,
    /// A message taken off the channel by `is_ready` or by a receive into a too-small
    /// buffer, delivered next.
    next: RefCell<Option<(u64, Vec<u8>)>>,
    closed: bool,
    /// Messages sent through this end (to check the collectives really used it).
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

const MAX: usize = 1 << 16;

fn chan_pair(sent: &std::sync::Arc<std::sync::atomic::AtomicU64>) -> (ChanLink, ChanLink) {
    let (a_tx, b_rx) = channel();
    let (b_tx, a_rx) = channel();
    let end = |tx, rx| ChanLink {
        tx,
        rx,
        next: RefCell::new(None),
        closed: false,
        sent: sent.clone(),
    };
    (end(a_tx, a_rx), end(b_tx, b_rx))
}

impl ChanLink {
    fn deliver(
        &mut self,
        (tag, msg): (u64, Vec<u8>),
        buf: &mut [u8],
    ) -> Result<(u64, usize), TransportError> {
        if buf.len() < msg.len() {
            let needed = msg.len();
            *self.next.get_mut() = Some((tag, msg));
            return Err(TransportError::BufferTooSmall {
                needed,
                got: buf.len(),
            });
        }
        buf[..msg.len()].copy_from_slice(&msg);
        Ok((tag, msg.len()))
    }
}

impl Link for ChanLink {
    fn max_message_len(&self) -> usize {
        MAX
    }
    fn try_send(&mut self, tag: u64, msg: &[u8]) -> Result<(), TransportError> {
        if msg.len() > MAX {
            return Err(TransportError::MessageTooLarge {
                len: msg.len(),
                max: MAX,
            });
        }
        self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.tx
            .send((tag, msg.to_vec()))
            .map_err(|_| TransportError::Disconnected)
    }
    fn send(
        &mut self,
        tag: u64,
        msg: &[u8],
        _timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        // Unbounded: a send never waits.
        self.try_send(tag, msg)
    }
    fn try_recv(&mut self, buf: &mut [u8]) -> Result<(u64, usize), TransportError> {
        if let Some(m) = self.next.get_mut().take() {
            return self.deliver(m, buf);
        }
        match self.rx.try_recv() {
            Ok(m) => self.deliver(m, buf),
            Err(TryRecvError::Empty) => Err(TransportError::Empty),
            Err(TryRecvError::Disconnected) => {
                self.closed = true;
                Err(TransportError::Disconnected)
            }
        }
    }
    fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<(u64, usize), TransportError> {
        if let Some(m) = self.next.get_mut().take() {
            return self.deliver(m, buf);
        }
        let t = timeout.unwrap_or(Duration::from_secs(3600));
        match self.rx.recv_timeout(t) {
            Ok(m) => self.deliver(m, buf),
            Err(RecvTimeoutError::Timeout) => Err(TransportError::Timeout(t)),
            Err(RecvTimeoutError::Disconnected) => {
                self.closed = true;
                Err(TransportError::Disconnected)
            }
        }
    }
    fn is_ready(&self) -> bool {
        // mpsc has no peek: take the next message off the channel and hold it back.
        let mut next = self.next.borrow_mut();
        if next.is_none() {
            *next = self.rx.try_recv().ok();
        }
        next.is_some()
    }
    fn is_disconnected(&self) -> bool {
        self.closed
    }
}

/// Members of a group over `trees` on channel links, one per rank.
fn members(
    trees: &[smelt_tree::Tree],
    sent: &std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> Result<Vec<Member<ChanLink>>, GroupError> {
    let n = trees[0].len();
    let abort = Abort::new();
    // Both ends of every edge, made when the first of its two members asks.
    let mut ends: HashMap<(usize, usize), (Option<ChanLink>, Option<ChanLink>)> = HashMap::new();
    let cfg = GroupConfig {
        link: smelt_runtime::LinkConfig::default().timeout(Duration::from_secs(20)),
        ..GroupConfig::default()
    };
    (0..n)
        .map(Rank)
        .map(|rank| {
            Member::with_links(trees, rank, &cfg, Some(abort.clone()), |e: LinkEnd| {
                let pair = ends.entry((e.tree, e.edge)).or_insert_with(|| {
                    let (p, c) = chan_pair(sent);
                    (Some(p), Some(c))
                });
                let end = if e.parent_side {
                    assert_eq!(e.parent, rank);
                    pair.0.take()
                } else {
                    assert_eq!(e.child, rank);
                    pair.1.take()
                };
                Ok(end.expect("each end asked for once"))
            })
        })
        .collect()
}

#[test]
fn every_collective_runs_over_a_link_written_outside_the_runtime() {
    for (i, n) in [1usize, 2, 3, 6, 11].into_iter().enumerate() {
        let tree = random_tree(n, 77 + i as u64);
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let ms = members(std::slice::from_ref(&tree), &sent).unwrap();
        std::thread::scope(|s| {
            let hs: Vec<_> = ms
                .into_iter()
                .map(|mut m| s.spawn(move || all_collectives(&mut m, 100)))
                .collect();
            for h in hs {
                h.join().unwrap().unwrap();
            }
        });
        let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
        if n > 1 {
            assert!(
                sent >= 100 * (n as u64 - 1),
                "n = {n}: only {sent} messages"
            );
        }
    }
}

#[test]
fn a_member_that_leaves_fails_the_others_over_a_custom_link() {
    let tree = random_tree(4, 5);
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ms = members(std::slice::from_ref(&tree), &sent).unwrap();
    let results: Vec<Result<(), GroupError>> = std::thread::scope(|s| {
        let hs: Vec<_> = ms
            .into_iter()
            .map(|mut m| {
                s.spawn(move || {
                    if m.rank() == Rank(2) {
                        // Leaves without taking part: its links close.
                        return Ok(());
                    }
                    m.barrier()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        results
            .iter()
            .enumerate()
            .filter(|(r, _)| *r != 2)
            .all(|(_, r)| r.is_err()),
        "{results:?}"
    );
}

#[test]
fn a_rank_outside_the_group_is_refused() {
    let tree = random_tree(3, 1);
    let r = Member::<ChanLink>::with_links(
        std::slice::from_ref(&tree),
        Rank(3),
        &GroupConfig::default(),
        None,
        |_| unreachable!("no link for a refused rank"),
    );
    assert!(matches!(r, Err(GroupError::Invalid(_))));
}
