//! Staging buffers carved from a world segment's arena (`ShmMember::arena_stage`):
//! chunks arrive intact and in order with their descriptors' tags, more chunks than
//! buffers wait for the receiver (flow control), data where a descriptor was due is
//! answered (left queued), each side opens once, and a sender whose receiver never
//! takes its chunks fails at its deadline or on abort instead of hanging.
#![cfg(not(loom))]

use smelt_transport::shm::{
    arena_link_bytes, arena_stage_bytes, ShmJob, ShmMember, ARENA_ALIGN, STAGED_TAG,
};
use smelt_transport::{Abort, Link, TransportError, WaitPolicy};
use std::time::{Duration, Instant};

fn attach(job: &ShmJob, rank: u32) -> ShmMember {
    ShmMember::attach(job.path(), &job.key(), rank).unwrap()
}

const T: Option<Duration> = Some(Duration::from_secs(10));

#[test]
fn chunks_cross_in_order_with_flow_control() {
    let job = ShmJob::create_world(3, b"stage", 64 << 20, false).unwrap();
    let (a, b, c) = (attach(&job, 0), attach(&job, 1), attach(&job, 2));
    let link_at = ARENA_ALIGN as u64;
    let stage_at = link_at + arena_link_bytes(16) as u64;
    let (slots, bytes) = (3, 1000);
    let w = WaitPolicy::OVERSUBSCRIBED;
    let mut la = a.arena_link(link_at, 16, 1, None).unwrap();
    let mut lb = b.arena_link(link_at, 16, 0, None).unwrap();
    let mut sa = a.arena_stage(stage_at, slots, bytes, 1, None, w).unwrap();
    let mut sb = b.arena_stage(stage_at, slots, bytes, 0, None, w).unwrap();
    assert_eq!((sa.chunk(), sa.slots(), sa.peer()), (1000, 3, 1));
    // Each side once; a third member is refused; sizes are checked.
    assert!(matches!(
        a.arena_stage(stage_at, slots, bytes, 1, None, w),
        Err(TransportError::NotYours(_))
    ));
    assert!(matches!(
        c.arena_stage(stage_at, slots, bytes, 0, None, w),
        Err(TransportError::NotYours(_))
    ));
    assert!(matches!(
        c.arena_stage(stage_at, 0, bytes, 0, None, w),
        Err(TransportError::NotYours(_))
    ));
    assert!(matches!(
        sa.send(&mut la, 1, &[0u8; 1001], T),
        Err(TransportError::MessageTooLarge {
            len: 1001,
            max: 1000
        })
    ));
    // 40 chunks of every length from 1 to 1000 bytes through 3 buffers: the sender
    // waits for the receiver, which checks each chunk and its tag.
    let lens: Vec<usize> = (0..40).map(|i| [1, 47, 999, 1000, 500][i % 5]).collect();
    let want = lens.clone();
    std::thread::scope(|s| {
        s.spawn(move || {
            for (i, &n) in lens.iter().enumerate() {
                let data: Vec<u8> = (0..n).map(|k| (k + i) as u8).collect();
                sa.send(&mut la, i as u64, &data, T).unwrap();
            }
            // Both directions: the receiver answers.
            let got = sb_reply(&mut sa, &mut la);
            assert_eq!(got, b"back".to_vec());
        });
        for (i, &n) in want.iter().enumerate() {
            if i % 7 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            let r = sb
                .recv(&mut lb, T, |tag, bytes| {
                    assert_eq!(tag, i as u64);
                    assert_eq!(bytes.len(), n);
                    assert!(bytes.iter().enumerate().all(|(k, &x)| x == (k + i) as u8));
                })
                .unwrap();
            assert!(r.is_ok(), "chunk {i}: {r:?}");
        }
        sb.send(&mut lb, 9, b"back", T).unwrap();
    });
}

/// The receiving side of the reply in [`chunks_cross_in_order_with_flow_control`].
fn sb_reply(s: &mut smelt_transport::shm::Stage, l: &mut impl Link) -> Vec<u8> {
    s.recv(l, T, |tag, b| {
        assert_eq!(tag, 9);
        b.to_vec()
    })
    .unwrap()
    .unwrap()
}

#[test]
fn data_where_a_chunk_was_due_is_answered_and_left_queued() {
    let job = ShmJob::create_world(2, b"stage", 64 << 20, false).unwrap();
    let (a, b) = (attach(&job, 0), attach(&job, 1));
    let link_at = ARENA_ALIGN as u64;
    let stage_at = link_at + arena_link_bytes(16) as u64;
    let w = WaitPolicy::DEDICATED;
    let mut la = a.arena_link(link_at, 16, 1, None).unwrap();
    let mut lb = b.arena_link(link_at, 16, 0, None).unwrap();
    let _sa = a.arena_stage(stage_at, 2, 256, 1, None, w).unwrap();
    let mut sb = b.arena_stage(stage_at, 2, 256, 0, None, w).unwrap();
    Link::send(&mut la, 5, &[7u8; 100], T).unwrap();
    Link::send_word(&mut la, 6, 42, T).unwrap();
    let r = sb.recv(&mut lb, T, |_, _| ()).unwrap();
    assert_eq!(r, Err((0, 100)));
    let mut buf = [0u8; 128];
    assert_eq!(Link::recv(&mut lb, &mut buf, T).unwrap(), (5, 100));
    // A word without the staged bit: its tag, taken.
    let r = sb.recv(&mut lb, T, |_, _| ()).unwrap();
    assert_eq!(r, Err((6, 8)));
    // A staged descriptor with no chunk behind it is refused, not read.
    Link::send_word(&mut la, 7 | STAGED_TAG, 10, T).unwrap();
    assert!(matches!(
        sb.recv(&mut lb, T, |_, _| ()),
        Err(TransportError::NotYours(_))
    ));
    assert!(arena_stage_bytes(2, 256) >= 2 * 2 * 256);
}

#[test]
fn a_sender_with_no_free_buffer_fails_at_its_deadline_or_on_abort() {
    let job = ShmJob::create_world(2, b"stage", 64 << 20, false).unwrap();
    let (a, b) = (attach(&job, 0), attach(&job, 1));
    let link_at = ARENA_ALIGN as u64;
    let stage_at = link_at + arena_link_bytes(16) as u64;
    let abort = Abort::new();
    let w = WaitPolicy::OVERSUBSCRIBED;
    let mut la = a.arena_link(link_at, 16, 1, None).unwrap();
    let _lb = b.arena_link(link_at, 16, 0, None).unwrap();
    let mut sa = a
        .arena_stage(stage_at, 2, 64, 1, Some(abort.clone()), w)
        .unwrap();
    let _sb = b.arena_stage(stage_at, 2, 64, 0, None, w).unwrap();
    sa.send(&mut la, 1, &[1; 64], T).unwrap();
    sa.send(&mut la, 2, &[2; 64], T).unwrap();
    let t = Instant::now();
    let r = sa.send(&mut la, 3, &[3; 64], Some(Duration::from_millis(50)));
    assert!(matches!(r, Err(TransportError::Timeout(_))), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(30));
            abort.trigger();
        });
        let r = sa.send(&mut la, 3, &[3; 64], T);
        assert_eq!(r, Err(TransportError::Aborted));
    });
}

#[test]
fn a_receive_whose_closure_panics_still_moves_on_to_the_next_chunk() {
    // The buffer goes back when the closure unwinds; the next receive must hand over
    // the next chunk, not the same buffer again (as the next chunk's, when the
    // lengths match).
    let job = ShmJob::create_world(2, b"stage", 64 << 20, false).unwrap();
    let (a, b) = (attach(&job, 0), attach(&job, 1));
    let link_at = ARENA_ALIGN as u64;
    let stage_at = link_at + arena_link_bytes(16) as u64;
    let w = WaitPolicy::DEDICATED;
    let mut la = a.arena_link(link_at, 16, 1, None).unwrap();
    let mut lb = b.arena_link(link_at, 16, 0, None).unwrap();
    let mut sa = a.arena_stage(stage_at, 2, 64, 1, None, w).unwrap();
    let mut sb = b.arena_stage(stage_at, 2, 64, 0, None, w).unwrap();
    sa.send(&mut la, 1, &[1; 8], T).unwrap();
    sa.send(&mut la, 2, &[2; 8], T).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sb.recv(&mut lb, T, |_, _| panic!("a combine that panics"))
    }));
    assert!(r.is_err());
    let got = sb
        .recv(&mut lb, T, |tag, bytes| (tag, bytes.to_vec()))
        .unwrap();
    assert_eq!(got, Ok((2, vec![2; 8])));
    // Both buffers were given back: two more chunks go without waiting.
    sa.send(&mut la, 3, &[3; 8], Some(Duration::ZERO)).unwrap();
    sa.send(&mut la, 4, &[4; 8], Some(Duration::ZERO)).unwrap();
    for k in [3u8, 4] {
        let got = sb
            .recv(&mut lb, T, |tag, bytes| (tag, bytes.to_vec()))
            .unwrap();
        assert_eq!(got, Ok((k as u64, vec![k; 8])));
    }
}
