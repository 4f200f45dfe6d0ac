//! Global memory from tasks: Itoyori-style `checkout(range, mode)` / `checkin` over
//! `smelt-global`'s arrays, and the fences the task layer applies at steals and syncs.
//!
//! A checkout copies a range of a global array into a local buffer the task works on:
//! [`Access::Read`] and [`Access::ReadWrite`] read the range (through the array's cache of
//! other nodes' lines, when it has one), [`Access::Write`] does not read it (the buffer
//! starts at zero and every element must be written). [`Checkout::checkin`] writes a
//! `Write`/`ReadWrite` buffer back (`put`); a checkout dropped without checkin writes
//! nothing.
//!
//! **Consistency** (the rules of Itoyori and of the DSM slides, for data-race-free
//! programs): two tasks that may run at the same time check out disjoint ranges, or only
//! read. Inside a process, a `join`/`scope`/`TaskGroup` sync is an acquire and the end of
//! a task a release (the latches), and the members of one process share their arrays'
//! memory and caches, so nothing more is needed. Across members ([`crate::dist`]) the
//! arrays given in [`TaskConfig::fences`](crate::dist::TaskConfig::fences) are fenced
//! where the task layer synchronises: a task that ran on another member than its
//! spawner's ends with `SD_fence` (write-back) before its result goes out; running a
//! stolen task and receiving a remote result start with `SI_fence` (invalidate). So a
//! task program needs no explicit fences.

use crate::TaskError;
use smelt_global::{Element, GlobalArray, GlobalError};
use std::ops::{Deref, Range};

/// What a checkout will do with its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read the range; nothing is written back.
    Read,
    /// Write every element; the range is not read, the buffer is written back.
    Write,
    /// Read the range, change it, write it back.
    ReadWrite,
}

impl From<GlobalError> for TaskError {
    fn from(e: GlobalError) -> Self {
        TaskError::Global(e.to_string())
    }
}

/// A range of a global array checked out into a local buffer.
#[derive(Debug)]
#[must_use = "a Write or ReadWrite checkout is written back only by checkin"]
pub struct Checkout<'a, T: Element> {
    array: &'a GlobalArray<T>,
    index: u64,
    data: Vec<T>,
    mode: Access,
}

/// Checks out `range` of `array` in `mode`. An empty range is fine; a range outside the
/// array or reversed is an error.
pub fn checkout<T: Element>(
    array: &GlobalArray<T>,
    range: Range<u64>,
    mode: Access,
) -> Result<Checkout<'_, T>, TaskError> {
    if range.start > range.end {
        return Err(TaskError::Invalid(format!(
            "a reversed range {}..{}",
            range.start, range.end
        )));
    }
    let n = usize::try_from(range.end - range.start)
        .map_err(|_| TaskError::Invalid("a range larger than memory".into()))?;
    array.layout().check(range.start, n)?;
    let mut data = vec![T::from_word(0); n];
    if mode != Access::Write && n > 0 {
        array.get(range.start, &mut data)?;
    }
    Ok(Checkout {
        array,
        index: range.start,
        data,
        mode,
    })
}

impl<T: Element> Checkout<'_, T> {
    /// The global index of the buffer's first element.
    pub fn start(&self) -> u64 {
        self.index
    }

    /// The mode it was checked out in.
    pub fn mode(&self) -> Access {
        self.mode
    }

    /// The buffer, to change (`Write` and `ReadWrite` only: a `Read` checkout is never
    /// written back, so changing it is refused).
    pub fn as_mut_slice(&mut self) -> Result<&mut [T], TaskError> {
        match self.mode {
            Access::Read => Err(TaskError::Invalid(
                "a Read checkout cannot be written (check out in Write or ReadWrite mode)".into(),
            )),
            _ => Ok(&mut self.data),
        }
    }

    /// Ends the checkout: a `Write` or `ReadWrite` buffer is written back.
    pub fn checkin(self) -> Result<(), TaskError> {
        if self.mode != Access::Read && !self.data.is_empty() {
            self.array.put(self.index, &self.data)?;
        }
        Ok(())
    }
}

impl<T: Element> Deref for Checkout<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data
    }
}

/// Something the task layer fences at its synchronisation points across members.
pub trait Fence: Send + Sync {
    /// `SD_fence`: this member's writes are complete at their owners.
    fn release(&self) -> Result<(), TaskError>;
    /// `SI_fence`: later reads see what was written back before.
    fn acquire(&self) -> Result<(), TaskError>;
}

impl<T: Element> Fence for GlobalArray<T> {
    fn release(&self) -> Result<(), TaskError> {
        Ok(self.fence_writeback()?)
    }
    fn acquire(&self) -> Result<(), TaskError> {
        Ok(self.fence_invalidate()?)
    }
}

impl<F: Fence + ?Sized> Fence for &F {
    fn release(&self) -> Result<(), TaskError> {
        (**self).release()
    }
    fn acquire(&self) -> Result<(), TaskError> {
        (**self).acquire()
    }
}
