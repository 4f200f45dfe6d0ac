//! The description of an array in a node's segment (MPI jobs): what the node's
//! leader writes in the segment's blob and every rank of the node checks.

use crate::array::Layout;
use crate::{ElemType, GlobalError};

const MAGIC: &[u8; 8] = b"SMELTGA1";

/// The blob of an array of `ty` elements laid out as `layout`.
pub(crate) fn encode(ty: ElemType, layout: Layout) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&(ty as u32).to_le_bytes());
    b.extend_from_slice(&(layout.members() as u32).to_le_bytes());
    b.extend_from_slice(&layout.len().to_le_bytes());
    b
}

/// The element type and layout [`encode`] wrote.
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
