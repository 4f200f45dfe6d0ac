//! Global arrays over processes of this host, members of one world (the job's one
//! shared-memory segment, which every member maps): writes seen after barriers (the
//! work-stealing example is smelt-bench's `global_stealing` test), a member making
//! the array with the wrong element type, a member killed with SIGKILL, and nothing
//! left in /dev/shm.

#[path = "../../../tests/support/members.rs"]
mod members;

use smelt_global::{ElemType, GlobalArray, GlobalConfig, GlobalError};
use smelt_mesh::world::{WorldBuilder, WorldJob};
use smelt_mesh::{Rank, World};
use std::process::Child;
use std::time::Duration;

const ROLE: &str = "TEST_SMELT_GLOBAL_ROLE";
const MEMBERS: usize = 4;

fn cfg() -> GlobalConfig {
    GlobalConfig {
        link: smelt_global::LinkConfig::default().timeout(Duration::from_secs(60)),
        ..GlobalConfig::default()
    }
}

fn spawn(job: &WorldJob, rank: usize, role: &str) -> Child {
    members::spawn_entry(job.env(Rank(rank)), ROLE, role)
}

fn drf(a: &smelt_global::GlobalArray<i64>) {
    let m = a.members();
    let len = a.len();
    for round in 0..5u64 {
        // The last element is the round counter (accumulated), not written by puts.
        let b = a.layout().block((a.rank() + round as usize + 1) % m);
        let target = b.start..b.end.min(len - 1);
        let data: Vec<i64> = target
            .clone()
            .map(|i| -((round * 10_000 + i) as i64))
            .collect();
        a.put(target.start, &data).unwrap();
        a.accumulate(len - 1, &[1], smelt_global::AccumulateOp::Sum)
            .unwrap();
        a.barrier().unwrap();
        let mut all = vec![0i64; len as usize - 1];
        a.get(0, &mut all).unwrap();
        for (i, v) in all.iter().enumerate() {
            assert_eq!(
                *v,
                -((round * 10_000 + i as u64) as i64),
                "round {round} index {i}"
            );
        }
        assert_eq!(a.get_one(len - 1).unwrap(), ((round + 1) * m as u64) as i64);
        a.barrier().unwrap();
    }
}

/// The member processes' side (does nothing when run as a test of its own).
#[test]
fn member_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let w = World::from_env().unwrap();
    match role.as_str() {
        "drf" => drf(&GlobalArray::<i64>::from_world(&w, 1001, cfg()).unwrap()),
        "wrong_type" => match GlobalArray::<f64>::from_world(&w, 10, cfg()) {
            Err(GlobalError::WrongType { array, requested }) => {
                assert_eq!((array, requested), (ElemType::I64, ElemType::F64));
                std::process::exit(3);
            }
            r => panic!("made as f64: {r:?}"),
        },
        "wrong_len" => match GlobalArray::<i64>::from_world(&w, 11, cfg()) {
            Err(GlobalError::World(smelt_mesh::WorldError::Mismatch(_))) => std::process::exit(4),
            r => panic!("made with another length: {r:?}"),
        },
        "sleeper" => {
            let _a = GlobalArray::<u64>::from_world(&w, 64, cfg()).unwrap();
            std::thread::sleep(Duration::from_secs(60));
        }
        r => panic!("unknown role {r}"),
    }
}

fn shm_entries() -> Vec<String> {
    let uid = std::fs::metadata("/proc/self").map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid()
    });
    let prefix = format!("smelt-{}-", uid.unwrap_or(0));
    std::fs::read_dir(smelt_transport::shm::shm_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_write_is_seen_after_a_barrier_across_processes() {
    let job = WorldBuilder::new(MEMBERS).create_job(false).unwrap();
    let kids: Vec<Child> = (1..MEMBERS).map(|r| spawn(&job, r, "drf")).collect();
    let w = job.join(Rank(0)).unwrap();
    drf(&GlobalArray::<i64>::from_world(&w, 1001, cfg()).unwrap());
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
}

#[test]
fn making_it_with_another_element_type_or_length_is_refused() {
    for (role, code) in [("wrong_type", 3), ("wrong_len", 4)] {
        let job = WorldBuilder::new(2).create_job(false).unwrap();
        let w = job.join(Rank(0)).unwrap();
        let _a = GlobalArray::<i64>::from_world(&w, 10, cfg()).unwrap();
        let st = spawn(&job, 1, role).wait().unwrap();
        assert_eq!(st.code(), Some(code), "{role}");
    }
    assert!(GlobalArray::<u64>::from_world(&World::threads(2).unwrap()[0], 0, cfg()).is_err());
}

/// The test's own segment is watched by its name: the other tests of this binary run
/// at the same time and make segments of their own (comparing the whole of /dev/shm
/// before and after saw theirs).
#[test]
fn a_killed_member_is_an_error_at_the_barrier_and_nothing_is_left_behind() {
    let job = WorldBuilder::new(2).create_job(false).unwrap();
    let name = job
        .path()
        .file_name()
        .expect("a segment file")
        .to_string_lossy()
        .into_owned();
    let present = || shm_entries().contains(&name);
    assert!(present(), "{name} is not in the shared-memory directory");
    let mut kid = spawn(&job, 1, "sleeper");
    let me = GlobalArray::<u64>::from_world(&job.join(Rank(0)).unwrap(), 64, cfg()).unwrap();
    // Both attached: the name is gone already.
    let t = std::time::Instant::now();
    while present() && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    kid.kill().unwrap();
    kid.wait().unwrap();
    match me.barrier() {
        Err(GlobalError::PeerGone { member: 1 }) => {}
        r => panic!("{r:?}"),
    }
    drop(job);
    assert!(!present(), "left in /dev/shm: {name}");
}
