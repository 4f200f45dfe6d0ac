//! Active messages between threads: requests and replies, bulk data, floods through
//! tiny queues, protection, errors, ordering, departures.

use smelt_am::{threads, AmConfig, AmError, Endpoint, LinkConfig, Reason, Returned};
use smelt_transport::stress_scale;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);
const ECHO: u8 = 1;
const GOT: u8 = 2;

fn cfg(capacity: usize) -> AmConfig {
    AmConfig {
        link: LinkConfig::default().capacity(capacity).timeout(T),
        ..AmConfig::default()
    }
}

/// Serves until every other endpoint left.
fn serve<S>(ep: &mut Endpoint<S>) {
    loop {
        match ep.wait(T) {
            Ok(_) => {}
            Err(AmError::PeerGone { .. }) => {}
            Err(AmError::Timeout { what, .. }) if what.contains("left") => return,
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn requests_get_replies_with_short_and_bulk_data() {
    #[derive(Default)]
    struct Got {
        replies: Vec<(Vec<u64>, Vec<u8>)>,
    }
    let mut eps = threads(2, cfg(8), |_| Got::default()).unwrap();
    let mut server = eps.pop().unwrap();
    let mut client = eps.pop().unwrap();
    assert_eq!((client.me(), server.me(), client.size()), (0, 1, 2));
    server
        .register(ECHO, |_, ctx, m| {
            // Echo the words reversed, and the data with each byte plus one.
            let args: Vec<u64> = m.args.iter().rev().copied().collect();
            if m.data.is_empty() && m.args.len() < 8 {
                ctx.reply(GOT, &args).unwrap();
            } else {
                let data: Vec<u8> = m.data.iter().map(|b| b.wrapping_add(1)).collect();
                ctx.reply_bulk(GOT, &args, &data).unwrap();
            }
        })
        .unwrap();
    client
        .register(GOT, |g: &mut Got, _, m| {
            g.replies.push((m.args.to_vec(), m.data.to_vec()))
        })
        .unwrap();
    // Sizes around the chunk and the link (8 slots: 384 bytes) boundaries.
    let sizes = [
        0usize,
        1,
        7,
        300,
        383,
        384,
        385,
        8191,
        8192,
        8193,
        100_001,
        1 << 20,
    ];
    std::thread::scope(|s| {
        s.spawn(move || serve(&mut server));
        for (k, &n) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..n).map(|i| (i * 7 + k) as u8).collect();
            let args: Vec<u64> = (0..=(k % 9) as u64).map(|a| a * 1000 + k as u64).collect();
            let args = &args[..args.len().min(8)];
            if n == 0 {
                client.request(1, ECHO, args).unwrap();
            } else {
                client.request_bulk(1, ECHO, args, &data).unwrap();
            }
            client.quiesce(T).unwrap();
            let (got_args, got_data) = client
                .state_mut()
                .replies
                .pop()
                .unwrap_or_else(|| panic!("size {n}: {:?}", client.take_returned()));
            assert_eq!(
                got_args,
                args.iter().rev().copied().collect::<Vec<_>>(),
                "size {n}"
            );
            assert_eq!(
                got_data,
                data.iter().map(|b| b.wrapping_add(1)).collect::<Vec<_>>(),
                "size {n}"
            );
        }
        assert_eq!(client.stats().requests_sent, sizes.len() as u64);
        assert_eq!(client.outstanding_total(), 0);
        drop(client);
    });
}

#[test]
fn all_to_all_floods_through_tiny_queues_deliver_everything_once() {
    // 16 endpoints on 2 CPUs, queues of 2 slots, every endpoint sends to every other.
    let n = 16;
    let per_peer = 200 * stress_scale() as usize;
    #[derive(Default, Clone)]
    struct S {
        /// Next sequence number expected from each sender.
        next: Vec<u64>,
        /// Sum of the values received.
        sum: u64,
        replies: usize,
        ok: bool,
    }
    let eps = threads(n, cfg(2), |_| S {
        next: vec![0; n],
        ok: true,
        ..S::default()
    })
    .unwrap();
    let results: Vec<S> = std::thread::scope(|s| {
        let handles: Vec<_> = eps
            .into_iter()
            .map(|mut ep| {
                s.spawn(move || {
                    ep.register(ECHO, |st: &mut S, ctx, m| {
                        // Per-pair FIFO: sequence numbers arrive in order.
                        st.ok &= st.next[m.from] == m.args[0];
                        st.next[m.from] += 1;
                        st.sum += m.args[1];
                        ctx.reply(GOT, &[m.args[0]]).unwrap();
                    })
                    .unwrap();
                    ep.register(GOT, |st: &mut S, _, _| st.replies += 1)
                        .unwrap();
                    let me = ep.me();
                    for i in 0..per_peer as u64 {
                        for d in (0..n).filter(|&d| d != me) {
                            ep.request(d, ECHO, &[i, (me * 1_000_000) as u64 + i])
                                .unwrap();
                        }
                    }
                    // Every request answered, every request of the others received
                    // (and so answered: the handler replies at once). Endpoints that
                    // finished first leave: reported once each, then ignored.
                    let want = per_peer * (n - 1);
                    loop {
                        match ep.run_until(T, |st| {
                            st.replies == want && st.next.iter().sum::<u64>() as usize == want
                        }) {
                            Ok(()) => break,
                            Err(AmError::PeerGone { .. }) => {}
                            Err(e) => panic!("endpoint {me}: {e}"),
                        }
                    }
                    ep.into_state()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let per = per_peer as u64;
    for (me, st) in results.iter().enumerate() {
        assert!(st.ok, "endpoint {me}: out of order");
        assert_eq!(st.replies, per_peer * (n - 1), "endpoint {me}: replies");
        let want: u64 = (0..n as u64)
            .filter(|&d| d != me as u64)
            .map(|d| d * 1_000_000 * per + per * (per - 1) / 2)
            .sum();
        assert_eq!(st.sum, want, "endpoint {me}: every message once");
    }
}

#[test]
fn protection_and_handler_errors_come_back_to_handler_zero() {
    let mut eps = threads(2, cfg(2048), |_| Vec::<String>::new()).unwrap();
    let mut b = eps.pop().unwrap();
    let mut a = eps.pop().unwrap();
    const SILENT: u8 = 3;
    const TWICE: u8 = 4;
    const PANICS: u8 = 5;
    const BULK: u8 = 6;
    b.register(ECHO, |log: &mut Vec<String>, ctx, _| {
        log.push("echo".into());
        ctx.reply(GOT, &[]).unwrap();
    })
    .unwrap();
    b.register(SILENT, |log: &mut Vec<String>, _, _| {
        log.push("silent".into())
    })
    .unwrap();
    b.register(TWICE, |log: &mut Vec<String>, ctx, _| {
        ctx.reply(GOT, &[1]).unwrap();
        log.push(format!("{:?}", ctx.reply(GOT, &[2]).unwrap_err()));
    })
    .unwrap();
    b.register(PANICS, |_, _, _| panic!("handler bug")).unwrap();
    b.register(BULK, |_, ctx, _| ctx.reply(GOT, &[]).unwrap())
        .unwrap();
    a.register(GOT, |log: &mut Vec<String>, ctx, m| {
        log.push(format!("got {:?}", m.args));
        // Replies cannot be replied to.
        log.push(format!("{:?}", ctx.reply(GOT, &[]).unwrap_err()));
    })
    .unwrap();

    // Handler 0 is reserved; too many words; too much data.
    assert_eq!(a.register(0, |_, _, _| {}), Err(AmError::ReservedHandler));
    assert_eq!(a.request(1, 0, &[]), Err(AmError::ReservedHandler));
    assert_eq!(
        a.request(1, ECHO, &[0; 9]),
        Err(AmError::TooManyArgs { n: 9 })
    );
    assert!(matches!(
        a.request_bulk(1, ECHO, &[], &vec![0; (64 << 20) + 1]),
        Err(AmError::TooLarge { .. })
    ));
    assert_eq!(
        a.request(5, ECHO, &[]),
        Err(AmError::NoSuchDestination { dest: 5, size: 2 })
    );

    let right = a.dest_tag(1).unwrap();
    assert_eq!(right, b.tag());
    a.set_dest_tag(1, right ^ 1).unwrap();
    a.request(1, ECHO, &[7, 8]).unwrap();
    a.request_bulk(1, ECHO, &[9], &[0; 20_000]).unwrap();
    a.set_dest_tag(1, right).unwrap();
    a.request(1, 77, &[1]).unwrap(); // nobody at 77
    a.request(1, SILENT, &[2]).unwrap();
    a.request(1, TWICE, &[]).unwrap();
    a.request(1, PANICS, &[3]).unwrap();
    // Later messages still get through after all that.
    a.request(1, ECHO, &[]).unwrap();
    assert_eq!(a.outstanding(1), 7);

    // Serve b until it saw them all: the panic is reported by its poll, once.
    let mut panicked = 0;
    while b.state().len() < 3 || panicked == 0 {
        match b.wait(T) {
            Ok(_) => {}
            Err(AmError::HandlerPanicked {
                handler,
                from,
                message,
            }) => {
                assert_eq!((handler, from), (PANICS, 0));
                assert!(message.contains("handler bug"), "{message}");
                panicked += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(b.state().len(), 3);
    assert_eq!(b.state()[0], "silent");
    assert_eq!(b.state()[1], "AlreadyReplied");
    assert_eq!(b.state()[2], "echo");

    a.quiesce(T).unwrap();
    let ret: Vec<Returned> = a.take_returned();
    let reasons: Vec<(Reason, u8, Vec<u64>, usize)> = ret
        .iter()
        .map(|r| (r.reason, r.handler, r.args.clone(), r.data_len))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (Reason::WrongTag, ECHO, vec![7, 8], 0),
            (Reason::WrongTag, ECHO, vec![9], 20_000),
            (Reason::UnknownHandler, 77, vec![1], 0),
            (Reason::NoReply, SILENT, vec![2], 0),
            (Reason::HandlerPanicked, PANICS, vec![3], 0),
        ]
    );
    assert!(ret.iter().all(|r| r.was_request && r.by == 1));
    // a's reply handler ran for TWICE's first reply and for the last ECHO.
    assert_eq!(
        a.state().as_slice(),
        ["got [1]", "NotARequest", "got []", "NotARequest"]
    );
    assert_eq!(a.stats().returned_received, 5);
    assert_eq!(b.stats().returned_sent, 5);
    // A second reply of TWICE was refused at b, not sent.
    assert_eq!(b.stats().replies_sent, 2);
    assert_eq!(a.outstanding_total(), 0);
}

#[test]
fn a_registered_handler_zero_sees_returns_and_a_changed_tag_locks_senders_out() {
    let mut eps = threads(2, cfg(8), |_| 0usize).unwrap();
    let mut b = eps.pop().unwrap();
    let mut a = eps.pop().unwrap();
    a.on_returned(|n: &mut usize, r| {
        assert_eq!(r.reason, Reason::WrongTag);
        *n += 1;
    });
    b.register(ECHO, |n: &mut usize, ctx, _| {
        *n += 1;
        ctx.reply(GOT, &[]).unwrap();
    })
    .unwrap();
    a.register(GOT, |_, _, _| {}).unwrap();
    b.set_tag(12345);
    a.request(1, ECHO, &[]).unwrap();
    while a.outstanding_total() > 0 {
        b.poll().unwrap();
        a.poll().unwrap();
    }
    assert_eq!((*a.state(), *b.state()), (1, 0));
    assert!(a.take_returned().is_empty(), "handler 0 took it");
    a.set_dest_tag(1, 12345).unwrap();
    a.request(1, ECHO, &[]).unwrap();
    while a.outstanding_total() > 0 {
        b.poll().unwrap();
        a.poll().unwrap();
    }
    assert_eq!((*a.state(), *b.state()), (1, 1));
}

#[test]
fn unexpected_replies_and_foreign_messages_never_reach_handlers() {
    // A reply with no request outstanding, forged through the wire format.
    let mut eps = threads(2, cfg(8), |_| 0u32).unwrap();
    let mut b = eps.pop().unwrap();
    let mut a = eps.pop().unwrap();
    a.register(GOT, |n: &mut u32, _, _| *n += 1).unwrap();
    b.register(ECHO, |_, ctx, _| {
        ctx.reply(GOT, &[]).unwrap();
        // What a second reply would look like, if the layer did not stop it.
        assert_eq!(ctx.reply(GOT, &[]), Err(AmError::AlreadyReplied));
    })
    .unwrap();
    a.request(1, ECHO, &[]).unwrap();
    while *a.state() == 0 {
        b.poll().unwrap();
        a.poll().unwrap();
    }
    assert_eq!(*a.state(), 1);
    assert_eq!(a.outstanding_total(), 0);
}

#[test]
fn replies_to_queued_requests_travel_in_batches_in_order() {
    // What the client saw, in order: replies (their word) and returned messages.
    #[derive(Default, Debug)]
    struct Seen(Vec<i64>);
    for capacity in [256, 4] {
        let mut eps = threads(2, cfg(capacity), |_| Seen::default()).unwrap();
        let mut server = eps.pop().unwrap();
        let mut client = eps.pop().unwrap();
        // Two argument words (and none, every third request), echoed back.
        server
            .register(ECHO, |_, ctx, m| ctx.reply(GOT, m.args).unwrap())
            .unwrap();
        client
            .register(GOT, |s: &mut Seen, _, m| {
                if let Some(&w) = m.args.first() {
                    assert_eq!(m.args, [w, !w], "the reply's words");
                    s.0.push(w as i64);
                } else {
                    s.0.push(-1);
                }
            })
            .unwrap();
        client.on_returned(|s: &mut Seen, r| s.0.push(-1000 - r.handler as i64));
        // More requests than a few slots hold; one of them to a handler nobody
        // registered: it comes back between the replies around it.
        let n = if capacity == 256 { 60 } else { 3 };
        let mut expected = Vec::new();
        std::thread::scope(|s| {
            s.spawn(|| serve(&mut server));
            for i in 0..n as u64 {
                if i == n as u64 / 2 {
                    client.request(1, 9, &[i]).unwrap();
                    expected.push(-1009);
                }
                if i % 3 == 2 {
                    client.request(1, ECHO, &[]).unwrap();
                    expected.push(-1);
                } else {
                    client.request(1, ECHO, &[i, !i]).unwrap();
                    expected.push(i as i64);
                }
            }
            client.quiesce(T).unwrap();
            assert_eq!(client.state().0, expected, "capacity {capacity}");
            drop(client);
        });
    }
    // A server that finds a burst of requests already queued answers them in a few
    // link messages, not one per reply.
    let mut eps = threads(2, cfg(256), |_| Seen::default()).unwrap();
    let mut server = eps.pop().unwrap();
    let mut client = eps.pop().unwrap();
    server
        .register(ECHO, |_, ctx, m| ctx.reply(GOT, m.args).unwrap())
        .unwrap();
    client
        .register(GOT, |s: &mut Seen, _, m| s.0.push(m.args[0] as i64))
        .unwrap();
    for i in 0..40 {
        client.request(1, ECHO, &[i]).unwrap();
    }
    assert_eq!(server.poll().unwrap(), 40);
    let batches = server.stats().reply_batches;
    assert!((1..=2).contains(&batches), "{:?}", server.stats());
    assert_eq!(server.stats().replies_sent, 40);
    // Each poll runs one message's handler per reply, at most as many as asked.
    assert_eq!(client.poll_some(5).unwrap(), 5);
    while client.outstanding_total() > 0 {
        client.poll().unwrap();
    }
    assert_eq!(client.state().0, (0..40).collect::<Vec<i64>>());
    assert_eq!(client.stats().handled, 40);
}

#[test]
fn a_requester_with_half_a_link_unanswered_takes_its_replies_in_first() {
    // Links of 8 slots: at 4 unanswered requests to one endpoint, the next request
    // runs the requester's handlers before it goes.
    let mut eps = threads(2, cfg(8), |_| 0u64).unwrap();
    let mut server = eps.pop().unwrap();
    let mut client = eps.pop().unwrap();
    server
        .register(ECHO, |_, ctx, m| ctx.reply(GOT, m.args).unwrap())
        .unwrap();
    client
        .register(GOT, |n: &mut u64, _, m| *n += m.args[0])
        .unwrap();
    for i in 1..=3 {
        client.request(1, ECHO, &[i]).unwrap();
    }
    assert_eq!(server.poll().unwrap(), 3);
    // 3 unanswered: sent without running a handler.
    client.request(1, ECHO, &[4]).unwrap();
    assert_eq!((*client.state(), client.outstanding(1)), (0, 4));
    // 4 unanswered: the 3 replies waiting run first.
    client.request(1, ECHO, &[5]).unwrap();
    assert_eq!((*client.state(), client.outstanding(1)), (1 + 2 + 3, 2));
    while server.poll().unwrap() > 0 {}
    client.quiesce(T).unwrap();
    assert_eq!(*client.state(), 15);
}

#[test]
fn messages_to_self_and_requests_from_handlers_context() {
    let mut eps = threads(1, cfg(4), |_| 0u64).unwrap();
    let mut a = eps.pop().unwrap();
    a.register(ECHO, |_, ctx, m| ctx.reply(GOT, &[m.args[0] * 2]).unwrap())
        .unwrap();
    a.register(GOT, |s: &mut u64, _, m| *s += m.args[0])
        .unwrap();
    for i in 0..100 {
        a.request(0, ECHO, &[i]).unwrap();
    }
    a.request_bulk(0, ECHO, &[1], &vec![5; 50_000]).unwrap();
    a.quiesce(T).unwrap();
    assert_eq!(*a.state(), 99 * 100 + 2);
}

#[test]
fn a_departed_endpoint_is_reported_and_sends_to_it_fail() {
    let mut eps = threads(3, cfg(4), |_| 0u32).unwrap();
    let c = eps.pop().unwrap();
    let mut b = eps.pop().unwrap();
    let mut a = eps.pop().unwrap();
    b.register(ECHO, |n: &mut u32, ctx, _| {
        *n += 1;
        ctx.reply(GOT, &[]).unwrap()
    })
    .unwrap();
    a.register(GOT, |_, _, _| {}).unwrap();
    // A request b never answers: b leaves with it queued.
    a.request(1, ECHO, &[]).unwrap();
    drop(b);
    drop(c);
    let mut gone = Vec::new();
    for _ in 0..2 {
        match a.wait(T) {
            Err(AmError::PeerGone { dest }) => gone.push(dest),
            other => panic!("{other:?}"),
        }
    }
    gone.sort();
    assert_eq!(gone, [1, 2]);
    assert_eq!(
        a.outstanding_total(),
        0,
        "requests to the departed are forgotten"
    );
    assert_eq!(a.request(1, ECHO, &[]), Err(AmError::PeerGone { dest: 1 }));
    assert!(matches!(
        a.wait(Duration::from_millis(50)),
        Err(AmError::Timeout { .. })
    ));
    // A flood into a peer that leaves mid-way fails instead of hanging.
    let mut eps = threads(2, cfg(2), |_| ()).unwrap();
    let b = eps.pop().unwrap();
    let mut a = eps.pop().unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(b);
    });
    let mut err = None;
    for _ in 0..1_000_000 {
        if let Err(e) = a.request(1, ECHO, &[]) {
            err = Some(e);
            break;
        }
    }
    t.join().unwrap();
    assert_eq!(err, Some(AmError::PeerGone { dest: 1 }));
}

#[test]
fn bad_configurations_are_refused() {
    for c in [
        AmConfig {
            link: LinkConfig::default().capacity(1),
            ..AmConfig::default()
        },
        AmConfig {
            bulk_chunk: 0,
            ..AmConfig::default()
        },
        AmConfig {
            poll: smelt_am::PollPolicy::Every(0),
            ..AmConfig::default()
        },
    ] {
        assert!(matches!(threads(2, c, |_| ()), Err(AmError::Invalid(_))));
    }
    assert!(matches!(
        threads(0, AmConfig::default(), |_| ()),
        Err(AmError::Invalid(_))
    ));
}
