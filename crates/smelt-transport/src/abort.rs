//! A shared abort ("poison") flag that wakes every waiter of the channels it guards.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{Thread, ThreadId};

/// A flag shared by a set of channels (e.g. every channel of a group). Raising it makes
/// every blocked and every later blocking operation on those channels return
/// [`TransportError::Aborted`](crate::TransportError::Aborted) promptly, and wakes parked
/// waiters. Cloning gives another handle to the same flag.
#[derive(Clone, Debug, Default)]
pub struct Abort(Arc<AbortInner>);

#[derive(Debug, Default)]
struct AbortInner {
    /// On a line of its own: every collective reads it, and registering a parked
    /// thread writes `parked`.
    raised: crossbeam_utils::CachePadded<AtomicBool>,
    parked: Mutex<Vec<(ThreadId, Thread)>>,
}

impl Abort {
    /// A new flag, not raised.
    pub fn new() -> Abort {
        Abort::default()
    }

    /// Raises the flag and wakes every thread that parked while waiting on a channel
    /// guarded by it. Idempotent.
    pub fn trigger(&self) {
        self.0.raised.store(true, Ordering::SeqCst);
        let parked = self.0.parked.lock().unwrap_or_else(|e| e.into_inner());
        for (_, t) in parked.iter() {
            t.unpark();
        }
    }

    /// True once [`trigger`](Abort::trigger) was called.
    #[inline]
    pub fn is_triggered(&self) -> bool {
        self.0.raised.load(Ordering::Acquire)
    }

    /// Records the calling thread as one to wake on `trigger` (before it parks), then
    /// returns whether the flag is already raised.
    pub(crate) fn register_current(&self) -> bool {
        let me = std::thread::current();
        {
            let mut parked = self.0.parked.lock().unwrap_or_else(|e| e.into_inner());
            if !parked.iter().any(|(id, _)| *id == me.id()) {
                parked.push((me.id(), me));
            }
        }
        self.0.raised.load(Ordering::SeqCst)
    }

    /// True if both handles refer to the same flag.
    pub fn same_as(&self, other: &Abort) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
