//! What shared-memory jobs (a [`WorldJob`](crate::world::WorldJob), which
//! `smelt_runtime::process::GroupJob` wraps) share: their accessors over the segment, and
//! the one environment encoding that tells a member process how to join a world
//! (`SMELT_JOB`, `SMELT_JOB_KEY`, `SMELT_RANK`).

use smelt_ids::Rank;
use smelt_transport::shm::ShmJob;
use std::path::PathBuf;

/// The accessors of a job held in field `shm` ([`ShmJob`]): `path`, `key`, `joined`,
/// `has_joined` and `is_dead`.
#[macro_export]
#[doc(hidden)]
macro_rules! shm_job_accessors {
    () => {
        /// The segment's path.
        pub fn path(&self) -> &Path {
            self.shm.path()
        }

        /// The job's key.
        pub fn key(&self) -> String {
            self.shm.key()
        }

        /// Members that have joined so far.
        pub fn joined(&self) -> usize {
            self.shm.attached() as usize
        }

        /// True once member `rank` has joined (it may have left or died since).
        pub fn has_joined(&self, rank: Rank) -> bool {
            self.shm.has_joined(rank.index() as u32)
        }

        /// True once member `rank`'s process died after joining.
        pub fn is_dead(&self, rank: Rank) -> bool {
            self.shm.is_dead(rank.index() as u32)
        }
    };
}

/// The names of the variables holding a job's segment path, its key and a member's
/// rank.
pub type JoinVars = [&'static str; 3];

/// The environment member `rank` of the job in `shm` needs to join, in `vars`.
pub fn join_env(shm: &ShmJob, vars: JoinVars, rank: Rank) -> Vec<(String, String)> {
    let [job, key, rank_var] = vars;
    vec![
        (job.into(), shm.path().display().to_string()),
        (key.into(), shm.key()),
        (rank_var.into(), rank.to_string()),
    ]
}

/// The segment path, key and rank (as written) that [`join_env`] set in `vars`;
/// `unset(name)` is the error for a variable that is not set.
pub fn read_join_env<E>(
    vars: JoinVars,
    unset: impl Fn(&str) -> E,
) -> Result<(PathBuf, String, String), E> {
    let var = |k: &str| match smelt_settings::raw(k) {
        Some(v) => Ok(v.to_string_lossy().into_owned()),
        None => Err(unset(k)),
    };
    let [job, key, rank] = vars;
    Ok((PathBuf::from(var(job)?), var(key)?, var(rank)?))
}
