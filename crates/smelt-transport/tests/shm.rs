//! Rings shared between processes: the test binary re-runs itself as the other member
//! (`TEST_SMELT_SHM_CHILD=path,key,role`), so every test crosses a real process boundary.
#![cfg(not(loom))]

use smelt_transport::shm::{RingSpec, ShmError, ShmJob, ShmMember};
use smelt_transport::TransportError;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn scale() -> u64 {
    smelt_transport::stress_scale()
}

/// Messages of the streaming stress test: 10^6 by default, 10^7 at SMELT_STRESS=10.
fn stress_messages() -> u64 {
    1_000_000 * scale()
}

fn two_way() -> Vec<RingSpec> {
    RingSpec::both_ways(0, 1, 64).to_vec()
}

fn spawn_child(job: &ShmJob, role: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .stdout(std::process::Stdio::null())
        .env(
            "TEST_SMELT_SHM_CHILD",
            format!("{},{},{role}", job.path().display(), job.key()),
        )
        .spawn()
        .unwrap()
}

/// The child side of every test (does nothing in a normal run).
#[test]
fn child_entry() {
    let Ok(spec) = std::env::var("TEST_SMELT_SHM_CHILD") else {
        return;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let m = ShmMember::attach(parts[0].as_ref(), parts[1], 1).expect("child attaches");
    let mut rx = m.consumer(0).unwrap();
    let mut tx = m.producer(1).unwrap();
    match parts[2] {
        "echo" => loop {
            match rx.recv_word_tagged(Some(Duration::from_secs(20))) {
                Ok((tag, w)) => tx.send_word_tagged(tag, w + 1, None).unwrap(),
                Err(TransportError::Disconnected) => return,
                Err(e) => panic!("child: {e}"),
            }
        },
        "sink" => {
            let n: u64 = parts[3].parse().unwrap();
            let mut buf = [0u8; 256];
            for i in 0..n {
                let (tag, len) = rx
                    .recv_tagged(&mut buf, Some(Duration::from_secs(20)))
                    .unwrap();
                assert_eq!(tag, i, "sequence");
                let expect = (i % 100) as usize;
                assert_eq!(len, expect);
                assert!(buf[..len].iter().all(|&b| b == i as u8));
            }
            tx.send_word(n).unwrap();
        }
        "hang" => {
            tx.send_word(1).unwrap();
            std::thread::sleep(Duration::from_secs(60));
        }
        "exit" => {
            tx.send_word(1).unwrap();
            // Exits without dropping its ends or leaving the job.
            std::process::exit(0);
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn words_round_trip_across_processes_and_the_path_is_unlinked() {
    let job = ShmJob::create(2, &two_way(), b"job description").unwrap();
    let path = job.path().to_path_buf();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "segment mode");
    let me = ShmMember::attach(&path, &job.key(), 0).unwrap();
    assert_eq!(me.blob(), b"job description");
    let mut child = spawn_child(&job, "echo");
    let mut tx = me.producer(0).unwrap();
    let mut rx = me.consumer(1).unwrap();
    for i in 0..10_000u64 {
        tx.send_word_tagged(i * 3, i, None).unwrap();
        let (tag, w) = rx.recv_word_tagged(Some(Duration::from_secs(20))).unwrap();
        assert_eq!((tag, w), (i * 3, i + 1));
    }
    assert!(!path.exists(), "unlinked once both members attached");
    drop(tx);
    assert!(child.wait().unwrap().success());
}

#[test]
fn stress_stream_is_sequence_checked() {
    let n = stress_messages();
    let job = ShmJob::create(2, &two_way(), b"").unwrap();
    let me = ShmMember::attach(job.path(), &job.key(), 0).unwrap();
    let mut child = spawn_child(&job, &format!("sink,{n}"));
    let mut tx = me.producer(0).unwrap();
    let mut rx = me.consumer(1).unwrap();
    let mut msg = [0u8; 100];
    for i in 0..n {
        let len = (i % 100) as usize;
        msg[..len].fill(i as u8);
        tx.send_tagged(i, &msg[..len], Some(Duration::from_secs(20)))
            .unwrap();
    }
    assert_eq!(rx.recv_word_timeout(Duration::from_secs(60)).unwrap(), n);
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_killed_peer_is_an_error_within_a_second() {
    let job = ShmJob::create(2, &two_way(), b"").unwrap();
    let me = ShmMember::attach(job.path(), &job.key(), 0).unwrap();
    let mut child = spawn_child(&job, "hang");
    let mut rx = me.consumer(1).unwrap();
    assert_eq!(rx.recv_word_timeout(Duration::from_secs(20)).unwrap(), 1);
    child.kill().unwrap();
    let t = Instant::now();
    let r = rx.recv_word_timeout(Duration::from_secs(20));
    assert_eq!(r, Err(TransportError::PeerDied { peer: 1 }));
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "noticed after {:?}",
        t.elapsed()
    );
    assert!(job.is_dead(1));
    let _ = child.wait();
}

#[test]
fn a_peer_that_exits_without_leaving_is_an_error() {
    let job = ShmJob::create(2, &two_way(), b"").unwrap();
    let me = ShmMember::attach(job.path(), &job.key(), 0).unwrap();
    let mut child = spawn_child(&job, "exit");
    let mut rx = me.consumer(1).unwrap();
    let mut tx = me.producer(0).unwrap();
    assert_eq!(rx.recv_word_timeout(Duration::from_secs(20)).unwrap(), 1);
    let _ = child.wait();
    let r = rx.recv_word_timeout(Duration::from_secs(20));
    assert_eq!(r, Err(TransportError::PeerDied { peer: 1 }));
    // Sends fill the ring, then see the death too.
    let r = (0..100).try_for_each(|i| tx.send_word_timeout(i, Duration::from_secs(20)));
    assert_eq!(r, Err(TransportError::PeerDied { peer: 1 }));
}

#[test]
fn abort_ends_every_wait_at_once() {
    let job = ShmJob::create(2, &two_way(), b"").unwrap();
    let me = ShmMember::attach(job.path(), &job.key(), 0).unwrap();
    let mut rx = me.consumer(1).unwrap();
    let t = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            job.fail(1, "member 1 gave up");
        });
        assert_eq!(
            rx.recv_word_timeout(Duration::from_secs(20)),
            Err(TransportError::Aborted)
        );
    });
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(me.failure(), Some((1, "member 1 gave up".to_string())));
}

#[test]
fn strangers_stale_and_planted_segments_are_refused() {
    let job = ShmJob::create(2, &two_way(), b"").unwrap();
    // The wrong key: a stale segment of another job, or a guess.
    let e = ShmMember::attach(job.path(), &"0".repeat(32), 0).unwrap_err();
    assert!(matches!(e, ShmError::NotOurs { .. }), "{e}");
    assert!(e.to_string().contains("another job"), "{e}");
    // A rank beyond the job, and a rank taken twice.
    assert!(matches!(
        ShmMember::attach(job.path(), &job.key(), 2),
        Err(ShmError::Invalid(_))
    ));
    let first = ShmMember::attach(job.path(), &job.key(), 0).unwrap();
    assert!(ShmMember::attach(job.path(), &job.key(), 0).is_err());
    drop(first);

    let dir = tempfile::tempdir().unwrap();
    // A planted file: the right mode, no magic.
    let planted = dir.path().join("planted");
    std::fs::write(&planted, vec![0u8; 8192]).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = ShmMember::attach(&planted, &job.key(), 0).unwrap_err();
    assert!(e.to_string().contains("magic"), "{e}");
    // Readable by others.
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = ShmMember::attach(&planted, &job.key(), 0).unwrap_err();
    assert!(e.to_string().contains("other users"), "{e}");
    // A symbolic link to the real segment is not followed.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(job.path(), &link).unwrap();
    assert!(ShmMember::attach(&link, &job.key(), 1).is_err());
    // Another smelt version: the version field of a copy is changed.
    let mut bytes = std::fs::read(job.path()).unwrap();
    bytes[16] = b'9';
    let other = dir.path().join("other-version");
    std::fs::write(&other, &bytes).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = ShmMember::attach(&other, &job.key(), 1).unwrap_err();
    assert!(matches!(e, ShmError::Version { .. }), "{e}");
}

#[test]
fn too_little_shared_memory_is_a_clear_error_and_leaves_nothing() {
    if smelt_settings::is_set(smelt_settings::SHM_LIMIT) {
        let big = vec![RingSpec {
            producer: 0,
            consumer: 1,
            capacity: 1 << 20,
        }];
        let e = ShmJob::create(2, &big, b"").unwrap_err();
        assert!(matches!(e, ShmError::NoSpace { .. }), "{e}");
        assert!(e.to_string().contains("needs 67"), "{e}");
        return;
    }
    // The child's segments in a directory of its own (the other tests of this binary
    // make theirs in the default one at the same time): nothing may be left there.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "too_little_shared_memory_is_a_clear_error_and_leaves_nothing",
            "--test-threads=1",
        ])
        .env("SMELT_SHM_LIMIT", "1000000")
        .env("SMELT_SHM_DIR", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// `SMELT_SHM_LIMIT=abc` is an error naming the variable (it was silently ignored),
/// an empty `SMELT_SHM_DIR=` means /dev/shm (it gave "cannot inspect :"), and a
/// directory that is not there is an error naming `SMELT_SHM_DIR`. Run in a
/// child process: the variables are the process's.
#[test]
fn shm_settings_garbage_is_an_error_and_empty_dir_is_unset() {
    let spec = || {
        vec![RingSpec {
            producer: 0,
            consumer: 1,
            capacity: 4,
        }]
    };
    match std::env::var("TEST_SMELT_SHM_SETTINGS_CASE").as_deref() {
        Ok("limit") => {
            let e = ShmJob::create(2, &spec(), b"").unwrap_err();
            assert!(e.to_string().contains("SMELT_SHM_LIMIT"), "{e}");
            assert!(e.to_string().contains("abc"), "{e}");
            return;
        }
        Ok("missing") => {
            let e = ShmJob::create(2, &spec(), b"").unwrap_err();
            assert!(e.to_string().contains("SMELT_SHM_DIR"), "{e}");
            assert!(e.to_string().contains("/nonexistent/smelt-shm"), "{e}");
            return;
        }
        Ok("dir") => {
            let job = ShmJob::create(2, &spec(), b"").unwrap();
            assert!(
                job.path().starts_with("/dev/shm"),
                "{}",
                job.path().display()
            );
            return;
        }
        _ => {}
    }
    for (case, var, value) in [
        ("limit", "SMELT_SHM_LIMIT", "abc"),
        ("dir", "SMELT_SHM_DIR", ""),
        ("missing", "SMELT_SHM_DIR", "/nonexistent/smelt-shm"),
    ] {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "shm_settings_garbage_is_an_error_and_empty_dir_is_unset",
                "--test-threads=1",
            ])
            .env("TEST_SMELT_SHM_SETTINGS_CASE", case)
            .env(var, value)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{case}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
