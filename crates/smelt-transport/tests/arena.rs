//! A world segment's arena (`ShmJob::create_world`): parts carved by offset, each
//! link's ends opened once, marks that catch members making different things, bounds,
//! and the arena's pages allocated only as parts are carved.
#![cfg(not(loom))]

use smelt_transport::shm::{arena_link_bytes, ShmError, ShmJob, ShmMember, ARENA_ALIGN};
use smelt_transport::TransportError;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;

fn attach(job: &ShmJob, rank: u32) -> ShmMember {
    ShmMember::attach(job.path(), &job.key(), rank).unwrap()
}

#[test]
fn links_and_words_carved_from_the_arena() {
    let job = ShmJob::create_world(3, b"world", 64 << 20, false).unwrap();
    // Sparse: the file is as long as the arena, but its blocks are only the header's.
    let meta = std::fs::metadata(job.path()).unwrap();
    assert!(meta.len() >= 64 << 20);
    assert!(meta.blocks() * 512 < 1 << 20, "{} blocks", meta.blocks());
    let (a, b, c) = (attach(&job, 0), attach(&job, 1), attach(&job, 2));
    assert_eq!(a.arena_len(), 64 << 20);
    let off = ARENA_ALIGN as u64;
    let mut ab = a.arena_link(off, 8, 1, None).unwrap();
    let mut ba = b.arena_link(off, 8, 0, None).unwrap();
    ab.send(b"hello").unwrap();
    let mut buf = [0u8; 16];
    let n = ba.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello");
    ba.send_word(7).unwrap();
    assert_eq!(ab.recv_word().unwrap(), 7);
    // Each end once; a third member is refused.
    assert!(matches!(
        a.arena_link(off, 8, 1, None),
        Err(TransportError::NotYours(_))
    ));
    assert!(matches!(
        c.arena_link(off, 8, 0, None),
        Err(TransportError::NotYours(_))
    ));
    assert!(matches!(
        a.arena_link(off, 8, 0, None),
        Err(TransportError::NotYours(_))
    ));
    // Words: the same memory in every member, zeroed.
    let woff = off + arena_link_bytes(8) as u64;
    let wa = a.arena_words(woff, 100).unwrap();
    let wc = c.arena_words(woff, 100).unwrap();
    assert!(wa.iter().all(|w| w.load(Ordering::Relaxed) == 0));
    wa[99].store(42, Ordering::Release);
    assert_eq!(wc[99].load(Ordering::Acquire), 42);
    // Only the carved pages take memory.
    let meta = std::fs::metadata(job.path()).ok();
    if let Some(m) = meta {
        assert!(m.blocks() * 512 < 4 << 20, "{} blocks", m.blocks());
    }
}

#[test]
fn marks_bounds_and_alignment() {
    let job = ShmJob::create_world(2, b"", 1 << 20, false).unwrap();
    let (a, b) = (attach(&job, 0), attach(&job, 1));
    a.arena_mark(0, 11).unwrap();
    b.arena_mark(0, 11).unwrap();
    let e = b.arena_mark(0, 12).unwrap_err();
    assert!(
        matches!(&e, ShmError::Invalid(m) if m.contains("same order")),
        "{e}"
    );
    // Outside the arena, misaligned, or empty: refused, never mapped.
    assert!(a.arena_words(1 << 20, 1).is_err());
    assert!(a.arena_words((1 << 20) - 8, 2).is_err());
    assert!(a.arena_words(8, 1).is_err());
    assert!(a.arena_words(128, 0).is_err());
    assert!(a.arena_link(1 << 20, 8, 1, None).is_err());
    assert!(matches!(
        a.arena_link(128, 0, 1, None),
        Err(TransportError::InvalidCapacity(0))
    ));
    // A job without an arena has none to carve.
    let plain = ShmJob::create(2, &[], b"").unwrap();
    let p = attach(&plain, 0);
    assert_eq!(p.arena_len(), 0);
    assert!(p.arena_words(0, 1).is_err());
}

#[test]
fn an_arena_larger_than_the_free_space_is_fine_until_carved() {
    // SMELT_SHM_LIMIT-free: ask for far more address space than any tmpfs here has.
    let job = ShmJob::create_world(1, b"", 1 << 40, false).unwrap();
    let a = attach(&job, 0);
    assert!(
        !job.path().exists(),
        "unlinked once its only member attached"
    );
    let w = a.arena_words(0, 16).unwrap();
    w[3].store(1, Ordering::Relaxed);
    // Carving more than the file system holds is an error, not a SIGBUS (tried only
    // where the file system has a size: Linux refuses such an allocation at once).
    let size = fs_size(job.path().parent().unwrap());
    if size > 0 && size < 1 << 39 {
        let e = a.arena_words(4096, 1 << 36).unwrap_err();
        assert!(
            matches!(e, ShmError::NoSpace { .. } | ShmError::Io { .. }),
            "{e}"
        );
    }
}

/// Total bytes of the file system holding `dir` (0 if unknown).
fn fs_size(dir: &std::path::Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return 0;
    };
    // SAFETY: statvfs is plain data; all-zero is a valid value to fill in.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `st` a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    st.f_blocks as u64 * st.f_frsize as u64
}
