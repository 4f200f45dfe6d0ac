//! Worlds (`smelt_mesh::world`): threads and processes, meshes and regions made by
//! collective calls and checked against sequential results, mismatched calls, dead
//! members, nothing left in the segment directory, garbage environments.
//!
//! The process tests start this test binary again as the members (the ignored test
//! `member` is their entry point), through the launcher library, with the variables
//! of `WorldJob::env`.

#[path = "../../../tests/support/members.rs"]
mod members;

use smelt_mesh::launch::Members;
use smelt_mesh::mesh::MeshError;
use smelt_mesh::world::{MeshSpec, World, WorldBuilder, WorldError, WorldKind};
use smelt_mesh::{CpuId, Rank};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

/// What every member does in `exchange`: sends `rank + 1` to every other member over
/// an all-to-all mesh, adds what it receives, adds `rank + 1` to word 0 of a shared
/// region, and returns (sum received, region total seen after everyone added).
fn exchange(w: &World) -> Result<(u64, u64), WorldError> {
    let n = w.size();
    let me = w.rank().index();
    let mut mesh = w.mesh(&MeshSpec::all_to_all().capacity(8))?;
    let region = w.region(16)?;
    region.words()[0].fetch_add(me as u64 + 1, Ordering::AcqRel);
    for p in 0..n {
        if p != me {
            mesh.send_word(Rank(p), 1, me as u64 + 1, T)?;
        }
    }
    let mut got = 0;
    let mut buf = [0u8; 8];
    // From each member in turn: a fast member's second-round message may come
    // before a slow member's first.
    for p in (0..n).filter(|&p| p != me) {
        let (tag, len) = mesh.recv_from(Rank(p), &mut buf, T)?;
        assert_eq!((tag, len), (1, 8));
        got += u64::from_le_bytes(buf);
    }
    // Everyone's addition happened before its messages were sent.
    let total = region.words()[0].load(Ordering::Acquire);
    // A second round, so no member leaves (closing its links) before the others
    // finished receiving.
    for p in 0..n {
        if p != me {
            mesh.send_word(Rank(p), 2, 0, T)?;
        }
    }
    for p in (0..n).filter(|&p| p != me) {
        let (tag, _) = mesh.recv_from(Rank(p), &mut buf, T)?;
        assert_eq!(tag, 2);
    }
    Ok((got, total))
}

fn expected(n: usize) -> (Vec<u64>, u64) {
    let all: u64 = (1..=n as u64).sum();
    ((0..n).map(|r| all - (r as u64 + 1)).collect(), all)
}

fn check_threads(n: usize) {
    let worlds = World::threads(n).unwrap();
    assert!(worlds.iter().enumerate().all(|(r, w)| w.rank() == Rank(r)
        && w.size() == n
        && w.kind() == WorldKind::Threads
        && w.node() == 0
        && w.cpu().is_none()));
    let out = World::run(worlds, |w| exchange(&w).unwrap()).unwrap();
    let (sums, all) = expected(n);
    for (r, (got, total)) in out.into_iter().enumerate() {
        assert_eq!(got, sums[r], "member {r}");
        assert_eq!(total, all, "member {r}");
    }
}

#[test]
fn threads_world_of_2() {
    check_threads(2);
}

#[test]
fn threads_world_of_16_more_members_than_cpus() {
    check_threads(16);
}

#[test]
fn builder_gives_cpus_nodes_model_and_attributes() {
    let cpus = CpuId::list([0, 0, 1, 1]);
    let ws = WorldBuilder::new(4)
        .cpus(&cpus)
        .nodes(&[0, 0, 1, 1])
        .model(smelt_mesh::world::ModelRef::Path("m.json".into()))
        .attribute("tree", "flat")
        .threads()
        .unwrap();
    assert_eq!(ws[2].cpu(), Some(CpuId(1)));
    assert_eq!(ws[0].cpu_of(Rank(3)), Some(CpuId(1)));
    assert_eq!((ws[3].node(), ws[0].nodes()), (1, 2));
    assert_eq!(ws[1].attribute("tree"), Some("flat"));
    assert_eq!(
        ws[1].model(),
        Some(&smelt_mesh::world::ModelRef::Path("m.json".into()))
    );
    assert!(matches!(
        WorldBuilder::new(3).cpus(&cpus).threads(),
        Err(WorldError::Invalid(_))
    ));
    assert!(matches!(World::threads(0), Err(WorldError::Invalid(_))));
    // Spread over the CPUs this process may use, round-robin.
    let allowed = smelt_transport::allowed_cpus().unwrap();
    let ws = WorldBuilder::new(allowed.len() + 1)
        .spread()
        .threads()
        .unwrap();
    assert_eq!(ws[0].cpu(), Some(CpuId(allowed[0])));
    assert_eq!(ws[allowed.len()].cpu(), Some(CpuId(allowed[0])));
}

#[test]
fn hand_out_builds_once_and_gives_each_member_its_part() {
    let builds = std::sync::atomic::AtomicUsize::new(0);
    let out = World::run(World::threads(8).unwrap(), |w| {
        let a: String = w
            .hand_out("names", || {
                builds.fetch_add(1, Ordering::Relaxed);
                // Slow enough that the other members wait for it.
                std::thread::sleep(Duration::from_millis(20));
                Ok((0..8).map(|r| format!("part {r}")).collect())
            })
            .unwrap();
        // A builder that fails leaves the slot to the next member, never a hang.
        let b: Result<u8, _> =
            w.hand_out("failing", || Err(WorldError::Invalid("no parts".into())));
        (a, b.is_err())
    })
    .unwrap();
    assert_eq!(builds.load(Ordering::Relaxed), 1);
    for (r, (a, failed)) in out.into_iter().enumerate() {
        assert_eq!(a, format!("part {r}"));
        assert!(failed);
    }
    let job = WorldBuilder::new(1)
        .arena(1 << 20)
        .create_job(false)
        .unwrap();
    let w = job.join(Rank(0)).unwrap();
    assert!(matches!(
        w.hand_out("x", || Ok(vec![1u8])),
        Err(WorldError::Invalid(_))
    ));
}

#[test]
fn members_that_make_different_services_get_a_mismatch() {
    let out = World::run(World::threads(2).unwrap(), |w| {
        if w.rank() == Rank(0) {
            w.region(64).map(|_| ())
        } else {
            // Let member 0 make its region first.
            std::thread::sleep(Duration::from_millis(50));
            w.mesh(&MeshSpec::all_to_all()).map(|_| ())
        }
    })
    .unwrap();
    assert!(out[0].is_ok());
    assert!(
        matches!(&out[1], Err(WorldError::Mismatch(m)) if m.contains("region")),
        "{out:?}"
    );
    // The same between processes (all joined from this process).
    let job = WorldBuilder::new(2)
        .arena(1 << 20)
        .create_job(false)
        .unwrap();
    let a = job.join(Rank(0)).unwrap();
    let b = job.join(Rank(1)).unwrap();
    a.region(64).unwrap();
    let e = b.region(128).unwrap_err();
    assert!(matches!(&e, WorldError::Mismatch(_)), "{e}");
}

#[test]
fn process_job_joined_from_one_process() {
    let n = 3;
    let job = WorldBuilder::new(n)
        .cpus(&CpuId::list([0, 1, 0]))
        .arena(8 << 20)
        .create_job(false)
        .unwrap();
    let path = job.path().to_path_buf();
    assert!(path.exists());
    let worlds: Vec<World> = (0..n).map(|r| job.join(Rank(r)).unwrap()).collect();
    assert!(!path.exists(), "unlinked once every member joined");
    assert!(worlds
        .iter()
        .all(|w| w.kind() == WorldKind::Processes && w.cpu_of(Rank(1)) == Some(CpuId(1))));
    let out = std::thread::scope(|s| {
        let hs: Vec<_> = worlds
            .iter()
            .map(|w| s.spawn(move || exchange(w).unwrap()))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let (sums, all) = expected(n);
    for (r, (got, total)) in out.into_iter().enumerate() {
        assert_eq!((got, total), (sums[r], all), "member {r}");
    }
    // A service larger than what is left of the arena: an error naming the setting.
    let e = worlds[0].region(16 << 20).unwrap_err();
    assert!(e.to_string().contains("SMELT_WORLD_ARENA"), "{e}");
    // A rank joins once.
    assert!(job.join(Rank(0)).is_err());
}

/// Starts this test binary as member `rank` of `job`, doing `role`.
fn spawn_member(
    started: &mut Members,
    env: Vec<(String, String)>,
    role: &str,
) -> std::io::Result<usize> {
    started.spawn(
        &mut members::member_command(env, "WORLD_TEST_ROLE", role),
        None,
    )
}

/// Waits for every member (at most `limit`), returning (success, stdout+stderr) by
/// rank.
fn wait_all(started: &mut Members, limit: Duration) -> Vec<(bool, String)> {
    let children = (0..started.len())
        .map(|r| started.take(Rank(r)).unwrap())
        .collect();
    members::wait_all(children, limit)
}

#[test]
fn processes_through_the_launcher_exchange_and_share_a_region() {
    let n = 4;
    let job = WorldBuilder::new(n)
        .attribute("expect", "4")
        .create_job(true)
        .unwrap();
    let path = job.path().to_path_buf();
    // The launcher library starts every member with the world's variables.
    let mut started = Members::start(&job, |_| {
        members::member_command(Vec::new(), "WORLD_TEST_ROLE", "exchange")
    })
    .unwrap();
    let out = wait_all(&mut started, Duration::from_secs(60));
    for (r, (ok, text)) in out.iter().enumerate() {
        assert!(ok, "member {r}: {text}");
        let (sums, all) = expected(n);
        assert!(
            text.contains(&format!("member {r}: got {} total {all}", sums[r])),
            "member {r}: {text}"
        );
    }
    assert!(!path.exists(), "nothing left in the segment directory");
}

#[test]
fn a_killed_member_is_an_error_for_the_others_not_a_hang() {
    let job = WorldBuilder::new(2).create_job(true).unwrap();
    let path = job.path().to_path_buf();
    let mut members = Members::new();
    spawn_member(&mut members, job.env(Rank(0)), "wait_for_dead").unwrap();
    spawn_member(&mut members, job.env(Rank(1)), "die").unwrap();
    let start = Instant::now();
    let out = wait_all(&mut members, Duration::from_secs(30));
    assert!(!out[1].0, "the dying member fails");
    assert!(out[0].0, "member 0: {}", out[0].1);
    assert!(out[0].1.contains("peer gone: member 1"), "{}", out[0].1);
    assert!(start.elapsed() < Duration::from_secs(15));
    drop(job);
    assert!(!path.exists());
}

#[test]
fn garbage_environment_names_the_variable() {
    let job = WorldBuilder::new(2)
        .arena(1 << 20)
        .create_job(false)
        .unwrap();
    let good = job.env(Rank(1));
    let set = |k: &str, v: &str| {
        let mut e: Vec<(String, String)> = good.iter().filter(|(n, _)| n != k).cloned().collect();
        e.push((k.into(), v.into()));
        e
    };
    let cases = [
        (set("SMELT_RANK", "one"), "SMELT_RANK"),
        (set("SMELT_RANK", "7"), "SMELT_RANK"),
        (set("SMELT_JOB_KEY", "xyz"), "SMELT_JOB_KEY"),
        (set("SMELT_JOB", "/nonexistent/smelt-seg"), "SMELT_JOB"),
        (set("SMELT_SIZE", "3"), "SMELT_SIZE"),
        (set("SMELT_SIZE", "many"), "SMELT_SIZE"),
        (
            good.iter()
                .filter(|(n, _)| n != "SMELT_JOB")
                .cloned()
                .collect(),
            "SMELT_JOB",
        ),
    ];
    for (env, var) in cases {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "member",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_remove("SMELT_JOB")
        .env_remove("SMELT_JOB_KEY")
        .env_remove("SMELT_RANK")
        .env_remove("SMELT_SIZE")
        .envs(env)
        .env("WORLD_TEST_ROLE", "join_only");
        let o = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            text.contains(&format!("join error: {var} ")),
            "{var}: {text}"
        );
    }
}

#[test]
fn a_launcher_killed_before_its_members_joined_leaves_no_segment() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "member",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("WORLD_TEST_ROLE", "creator")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The creator prints its segment's path, then waits for members that never come.
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let path = loop {
        let mut line = String::new();
        let n = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert!(n > 0, "the creator ended without a segment");
        // After the harness's "test member ... ".
        if let Some(i) = line.find("segment ") {
            break std::path::PathBuf::from(line[i + 8..].trim());
        }
    };
    assert!(path.exists());
    child.kill().unwrap(); // SIGKILL: no destructor runs
    child.wait().unwrap();
    let start = Instant::now();
    while path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{} outlived its creator",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_garbage_arena_size_names_the_setting() {
    for (value, expect) in [
        ("lots", "create error: SMELT_WORLD_ARENA"),
        ("64", "create error: world: an arena of 64 bytes"),
        ("2M", "created 2"),
    ] {
        let o = Command::new(std::env::current_exe().unwrap())
            .args([
                "member",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("WORLD_TEST_ROLE", "create")
            .env("SMELT_WORLD_ARENA", value)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(expect), "{value}: {text}");
    }
}

/// The member processes' entry point (run by the tests above, not on its own).
#[test]
#[ignore = "a member process of the other tests"]
fn member() {
    let role = std::env::var("WORLD_TEST_ROLE").unwrap_or_default();
    if role == "create" {
        match WorldBuilder::new(2).create_job(false) {
            Ok(job) => println!("created {}", job.size()),
            Err(e) => println!("create error: {e}"),
        }
        return;
    }
    if role == "creator" {
        let job = WorldBuilder::new(2).create_job(true).unwrap();
        println!("segment {}", job.path().display());
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let w = match World::from_env() {
        Ok(w) => w,
        Err(e) => {
            println!("join error: {e}");
            return;
        }
    };
    let me = w.rank().index();
    match role.as_str() {
        "exchange" => {
            assert_eq!(w.attribute("expect"), Some("4"));
            let (got, total) = exchange(&w).unwrap();
            println!("member {me}: got {got} total {total}");
        }
        "die" => {
            let _mesh = w.mesh(&MeshSpec::all_to_all()).unwrap();
            // Die without closing anything, as a crash would.
            std::process::abort();
        }
        "wait_for_dead" => {
            let mut mesh = w.mesh(&MeshSpec::all_to_all()).unwrap();
            let mut buf = [0u8; 8];
            match mesh.recv_any(&mut buf, T) {
                Err(MeshError::PeerGone { peer, .. }) => println!("peer gone: member {peer}"),
                other => panic!("{other:?}"),
            }
        }
        _ => println!("joined as member {me}"),
    }
}
