//! Arrays spread over processes of one host: the elements live in a shared-memory
//! segment every member maps and reads and writes directly (atomic loads, stores and
//! read-modify-writes; no messages).
//!
//! The creator calls [`ArrayJob::create`] and starts each member with the variables
//! of [`ArrayJob::env`] (or joins members itself with [`ArrayJob::join`]); each
//! member calls [`join_from_env`] with the array's name. The segment follows
//! smelt's rules ([`smelt_transport::shm`]): created exclusively under an
//! unguessable name, mode 0600, checked at attach (owner, key, layout), unlinked as
//! soon as every member attached (or when the creator's handle is dropped), so a
//! crash leaves nothing in `/dev/shm`. A member that dies is reported to the others'
//! barriers as [`GlobalError::PeerGone`].

use crate::array::{check_type, Layout, Memory, CTRL_WORDS};
use crate::{Config, ElemType, Element, GlobalArray, GlobalError};
use smelt_transport::shm::{ShmJob, ShmMember};
use std::path::Path;
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"SMELTGA1";

/// The creator's handle on an array shared by member processes. Dropping it removes
/// the segment's name (members that attached keep their mappings).
#[derive(Debug)]
pub struct ArrayJob {
    job: ShmJob,
    name: String,
    layout: Layout,
}

pub(crate) fn encode(ty: ElemType, layout: Layout) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&(ty as u32).to_le_bytes());
    b.extend_from_slice(&(layout.members() as u32).to_le_bytes());
    b.extend_from_slice(&layout.len().to_le_bytes());
    b
}

pub(crate) fn decode(b: &[u8]) -> Result<(ElemType, Layout), GlobalError> {
    let bad = || GlobalError::Shm("the segment does not describe a global array".into());
    if b.len() != 24 || &b[..8] != MAGIC {
        return Err(bad());
    }
    let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
    let ty = ElemType::from_id(word(8)).ok_or_else(bad)?;
    let members = word(12) as usize;
    let len = u64::from_le_bytes(b[16..24].try_into().map_err(|_| bad())?);
    Ok((ty, Layout::new(len, members)?))
}

fn var_name(name: &str) -> String {
    format!("SMELT_GLOBAL_{name}")
}

fn check_name(name: &str) -> Result<(), GlobalError> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(GlobalError::Invalid(format!(
            "array name {name:?}: 1 to 64 of A-Z, 0-9 and _"
        )));
    }
    Ok(())
}

impl ArrayJob {
    /// Creates the shared memory of an array named `name` (`A-Z`, `0-9`, `_`: it
    /// names the environment variable members find it by) of `len` elements of type
    /// `ty`, spread over `members` processes.
    pub fn create(
        name: &str,
        ty: ElemType,
        len: u64,
        members: usize,
    ) -> Result<ArrayJob, GlobalError> {
        check_name(name)?;
        let layout = Layout::new(len, members)?;
        if members > smelt_transport::shm::MAX_MEMBERS as usize {
            return Err(GlobalError::Invalid(format!(
                "{members} member processes (at most {})",
                smelt_transport::shm::MAX_MEMBERS
            )));
        }
        let job = ShmJob::create_with_words(
            members as u32,
            &[],
            &encode(ty, layout),
            CTRL_WORDS + len as usize,
        )
        .map_err(|e| GlobalError::Shm(e.to_string()))?;
        Ok(ArrayJob {
            job,
            name: name.to_string(),
            layout,
        })
    }

    /// The environment member `rank` needs for [`join_from_env`] (one variable,
    /// `SMELT_GLOBAL_<name>`).
    pub fn env(&self, rank: usize) -> Vec<(String, String)> {
        vec![(
            var_name(&self.name),
            format!("{}:{}:{}", rank, self.job.key(), self.job.path().display()),
        )]
    }

    /// Members of the array.
    pub fn members(&self) -> usize {
        self.layout.members()
    }

    /// Joins as member `rank` from the creator's process.
    pub fn join<T: Element>(
        &self,
        rank: usize,
        cfg: Config,
    ) -> Result<GlobalArray<T>, GlobalError> {
        attach(self.job.path(), &self.job.key(), rank, cfg)
    }

    /// Raises the segment's abort flag: every member's barrier ends with
    /// [`GlobalError::Aborted`].
    pub fn abort(&self) {
        self.job.abort();
    }
}

/// Attaches to the array at `path` as member `rank`, checking it is the job's (`key`)
/// and holds `T`s.
pub fn attach<T: Element>(
    path: &Path,
    key: &str,
    rank: usize,
    cfg: Config,
) -> Result<GlobalArray<T>, GlobalError> {
    let rank32 = u32::try_from(rank)
        .map_err(|_| GlobalError::Invalid(format!("member {rank} does not exist")))?;
    let member =
        ShmMember::attach(path, key, rank32).map_err(|e| GlobalError::Shm(e.to_string()))?;
    let (ty, layout) = decode(member.blob())?;
    check_type::<T>(ty)?;
    if member.members() as usize != layout.members()
        || member.words().len() != CTRL_WORDS + layout.len() as usize
    {
        return Err(GlobalError::Shm(
            "the segment's size does not match its array".into(),
        ));
    }
    Ok(GlobalArray::on_one_node(
        Memory::Shm(Arc::new(member)),
        layout,
        rank,
        cfg,
    ))
}

/// Joins the array named `name` as the environment says (set from
/// [`ArrayJob::env`]).
pub fn join_from_env<T: Element>(name: &str, cfg: Config) -> Result<GlobalArray<T>, GlobalError> {
    check_name(name)?;
    let var = var_name(name);
    let v = smelt_settings::text(&var)
        .map_err(|e| GlobalError::Invalid(e.to_string()))?
        .ok_or_else(|| {
            GlobalError::Invalid(format!(
                "{var} is not set: start members with ArrayJob::env"
            ))
        })?;
    let mut it = v.splitn(3, ':');
    let (Some(rank), Some(key), Some(path)) = (it.next(), it.next(), it.next()) else {
        return Err(GlobalError::Invalid(format!(
            "{var}={v:?} is not rank:key:path"
        )));
    };
    let rank = rank
        .parse::<usize>()
        .map_err(|_| GlobalError::Invalid(format!("{var}={v:?}: {rank:?} is not a rank")))?;
    attach(Path::new(path), key, rank, cfg)
}
