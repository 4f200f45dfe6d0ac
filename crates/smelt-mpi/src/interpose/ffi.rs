//! The MPI handles of `shim.c`, and the few PMPI calls the interposer makes, wrapped so
//! the rest of the interposer has no `unsafe` beyond user buffers. The calls every MPI
//! user in smelt shares (rank and size, splitting and freeing communicators, a
//! broadcast of bytes, an allgather of words, an agreement) are smelt-mesh's
//! ([`smelt_mesh::mpi`]) through the profiling interface's symbols ([`P`]), so that
//! the interposer's own traffic never comes back to its `MPI_*`.

pub use mpi_sys::{MPI_Comm, MPI_Datatype, MPI_Op};
use smelt_mesh::mpi::MpiError;
pub use smelt_mesh::mpi::PmpiCalls as P;
use std::os::raw::{c_int, c_void};

// Classes of `smelt_mpi_type_class` (shim.c).
pub const T_DERIVED: c_int = 0;
pub const T_SIGNED: c_int = 1;
pub const T_UNSIGNED: c_int = 2;
pub const T_FLOAT: c_int = 3;
pub const T_BOOL: c_int = 4;
pub const T_BYTE: c_int = 5;
pub const T_CHAR: c_int = 6;
pub const T_OTHER: c_int = 7;
pub const T_NULL: c_int = 8;
pub const T_FINT: c_int = 9;

extern "C" {
    fn smelt_mpi_type_class(t: MPI_Datatype, size: *mut c_int) -> c_int;
    fn smelt_mpi_op_class(op: MPI_Op) -> c_int;
    static smelt_mpi_in_place: *mut c_void;
    static smelt_mpi_byte: MPI_Datatype;
    static smelt_mpi_uint64: MPI_Datatype;
    static smelt_mpi_op_bor: MPI_Op;
    static smelt_mpi_comm_world: MPI_Comm;
    static smelt_mpi_comm_null: MPI_Comm;
    static smelt_mpi_undefined: c_int;
    static smelt_mpi_thread_multiple: c_int;
    static smelt_mpi_keyval_invalid: c_int;
    static smelt_mpi_success: c_int;
    static smelt_mpi_status_ignore: *mut mpi_sys::MPI_Status;
}

macro_rules! handle {
    ($($name:ident: $t:ty = $sym:ident;)*) => {$(
        #[inline(always)]
        pub fn $name() -> $t {
            // SAFETY: a constant defined in shim.c, initialized before any code runs and never written.
            unsafe { $sym }
        }
    )*};
}

handle! {
    in_place: *mut c_void = smelt_mpi_in_place;
    byte: MPI_Datatype = smelt_mpi_byte;
    uint64: MPI_Datatype = smelt_mpi_uint64;
    op_bor: MPI_Op = smelt_mpi_op_bor;
    comm_world: MPI_Comm = smelt_mpi_comm_world;
    comm_null: MPI_Comm = smelt_mpi_comm_null;
    undefined: c_int = smelt_mpi_undefined;
    thread_multiple: c_int = smelt_mpi_thread_multiple;
    keyval_invalid: c_int = smelt_mpi_keyval_invalid;
    success: c_int = smelt_mpi_success;
    status_ignore: *mut mpi_sys::MPI_Status = smelt_mpi_status_ignore;
}

/// What a datatype is: its class (`T_*`) and, for numbers, its size in bytes.
#[inline]
pub fn type_class(t: MPI_Datatype) -> (c_int, usize) {
    let mut size: c_int = 0;
    // `size` is a valid out-pointer; the shim only compares the handle and,
    // for Fortran and unknown types, asks MPI about it.
    // SAFETY: as argued in the lines above.
    let class = unsafe { smelt_mpi_type_class(t, &mut size) };
    (class, size.max(0) as usize)
}

/// An operation's class: 1..=10 the kernels' operations in MPI's order, 11 MAXLOC or
/// MINLOC, 12 REPLACE or NO_OP, 13 MPI_OP_NULL, 0 user-defined.
#[inline]
pub fn op_class(op: MPI_Op) -> c_int {
    // SAFETY: the shim only compares the handle with MPI's predefined ones.
    unsafe { smelt_mpi_op_class(op) }
}

/// An MPI error code (not MPI_SUCCESS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MpiErr(pub c_int);

/// Turns an MPI return code into a `Result`.
#[inline(always)]
pub fn check(rc: c_int) -> Result<(), MpiErr> {
    if rc == success() {
        Ok(())
    } else {
        Err(MpiErr(rc))
    }
}

impl From<MpiError> for MpiErr {
    /// The failed call's code (smelt-mesh's blocking calls, which the interposer makes,
    /// do not time out; anything else is `MPI_ERR_OTHER`).
    fn from(e: MpiError) -> MpiErr {
        MpiErr(e.code().unwrap_or(mpi_sys::MPI_ERR_OTHER as c_int))
    }
}

/// Element types the interposer's own PMPI calls move, each with its MPI datatype.
trait Elem {
    fn datatype() -> MPI_Datatype;
}

impl Elem for u8 {
    fn datatype() -> MPI_Datatype {
        byte()
    }
}

impl Elem for u64 {
    fn datatype() -> MPI_Datatype {
        uint64()
    }
}

/// `v` as an MPI send buffer: its address, element count and datatype.
fn send_buf<T: Elem>(v: &[T]) -> (*const c_void, c_int, MPI_Datatype) {
    (v.as_ptr().cast(), v.len() as c_int, T::datatype())
}

/// `v` as an MPI receive (or in-place) buffer: its address, element count and datatype.
fn recv_buf<T: Elem>(v: &mut [T]) -> (*mut c_void, c_int, MPI_Datatype) {
    (v.as_mut_ptr().cast(), v.len() as c_int, T::datatype())
}

/// Sends `buf` as bytes to `dest` on `comm`.
pub fn send_bytes(buf: &[u8], dest: usize, tag: c_int, comm: MPI_Comm) -> Result<(), MpiErr> {
    let (p, n, dt) = send_buf(buf);
    // SAFETY: `p` is `buf`, valid for reads of its `n` bytes; `dt` is MPI_BYTE.
    check(unsafe { mpi_sys::PMPI_Send(p, n, dt, dest as c_int, tag, comm) })
}

/// Receives exactly `buf.len()` bytes from `src` on `comm`.
pub fn recv_bytes(buf: &mut [u8], src: usize, tag: c_int, comm: MPI_Comm) -> Result<(), MpiErr> {
    let (p, n, dt) = recv_buf(buf);
    // SAFETY: `p` is `buf`, valid for writes of its `n` bytes; `dt` is MPI_BYTE.
    check(unsafe { mpi_sys::PMPI_Recv(p, n, dt, src as c_int, tag, comm, status_ignore()) })
}

/// `MPI_Gatherv` of bytes among `comm` to `root`: `mine` from every member but the
/// root, whose own part is already in place in `all` (`None`); on the root, member
/// `i`'s `counts[i]` bytes land at `displs[i]` in `all` (not used elsewhere: `&mut []`).
pub fn gatherv_bytes(
    mine: Option<&[u8]>,
    all: &mut [u8],
    counts: &[c_int],
    displs: &[c_int],
    root: usize,
    comm: MPI_Comm,
) -> Result<(), MpiErr> {
    let (sp, sn) = match mine {
        Some(m) => (m.as_ptr().cast::<c_void>(), m.len() as c_int),
        None => (in_place().cast_const(), 0),
    };
    // On the root `all` holds every member's `counts[i]` bytes at `displs[i]` (the caller
    // sized it so), `counts` and `displs` having one entry per member.
    // SAFETY: `mine` is valid for its `sn` bytes (or MPI_IN_PLACE on the root).
    check(unsafe {
        mpi_sys::PMPI_Gatherv(
            sp,
            sn,
            byte(),
            all.as_mut_ptr().cast(),
            counts.as_ptr(),
            displs.as_ptr(),
            byte(),
            root as c_int,
            comm,
        )
    })
}

/// `MPI_Scatterv` of bytes among `comm` from `root`: on the root, `all` holds member
/// `i`'s `counts[i]` bytes at `displs[i]` (not used elsewhere: `&[]`); each member but
/// the root receives its part into `mine`; the root's stays in `all` (`None`).
pub fn scatterv_bytes(
    all: &[u8],
    counts: &[c_int],
    displs: &[c_int],
    mine: Option<&mut [u8]>,
    root: usize,
    comm: MPI_Comm,
) -> Result<(), MpiErr> {
    let (rp, rn) = match mine {
        Some(m) => (m.as_mut_ptr().cast::<c_void>(), m.len() as c_int),
        None => (in_place(), 0),
    };
    // On the root `all` holds every member's `counts[i]` bytes at `displs[i]` (one entry
    // per member); `mine` is valid for writes of its `rn` bytes (or MPI_IN_PLACE on the
    // root).
    // SAFETY: as argued in the lines above.
    check(unsafe {
        mpi_sys::PMPI_Scatterv(
            all.as_ptr().cast(),
            counts.as_ptr(),
            displs.as_ptr(),
            byte(),
            rp,
            rn,
            byte(),
            root as c_int,
            comm,
        )
    })
}

/// The thread level MPI provides.
pub fn thread_level() -> Result<c_int, MpiErr> {
    let mut p = 0;
    // SAFETY: valid out-pointer.
    check(unsafe { mpi_sys::PMPI_Query_thread(&mut p) })?;
    Ok(p)
}

/// Size of one element of `t` in bytes.
pub fn type_size(t: MPI_Datatype) -> Result<usize, MpiErr> {
    let mut s = 0;
    // SAFETY: valid out-pointer; MPI validates the handle.
    check(unsafe { mpi_sys::PMPI_Type_size(t, &mut s) })?;
    Ok(s.max(0) as usize)
}

/// Where a datatype's data lies (MPI_Type_get_extent and MPI_Type_get_true_extent).
pub struct Extents {
    /// Distance between consecutive elements.
    pub extent: mpi_sys::MPI_Aint,
    /// Offset of the first byte of data.
    pub true_lb: mpi_sys::MPI_Aint,
    /// Span from the first to the last byte of data.
    pub true_extent: mpi_sys::MPI_Aint,
}

/// The extents of `t`.
pub fn extents(t: MPI_Datatype) -> Result<Extents, MpiErr> {
    let (mut lb, mut extent, mut true_lb, mut true_extent) = (0, 0, 0, 0);
    // SAFETY: valid out-pointers; MPI validates the handle.
    check(unsafe { mpi_sys::PMPI_Type_get_extent(t, &mut lb, &mut extent) })?;
    // SAFETY: as above.
    check(unsafe { mpi_sys::PMPI_Type_get_true_extent(t, &mut true_lb, &mut true_extent) })?;
    Ok(Extents {
        extent,
        true_lb,
        true_extent,
    })
}

/// Calls `PMPI_Abort(comm, 1)` after printing `msg`; never returns.
pub fn abort(comm: MPI_Comm, msg: &str) -> ! {
    super::stats::say(&format!(
        "{msg}; aborting the job (SMELT_MPI=off runs without smelt)"
    ));
    // SAFETY: aborting is valid at any point after MPI_Init.
    unsafe { mpi_sys::PMPI_Abort(comm, 1) };
    std::process::abort()
}
