//! The C API of smelt: `include/smelt.h`, built as `libsmelt.so` / `libsmelt.a`.
//!
//! Every exported function returns an [`smelt_status`] code (`SMELT_OK` = 0) and
//! leaves a message for [`smelt_last_error`] on failure; none lets a Rust panic cross
//! the FFI boundary (each body runs under `catch_unwind`, a panic becomes
//! `SMELT_ERR_PANIC`). Objects are handles created by `*_load` / `*_build` /
//! `*_create` / `smelt_group_attach` / `smelt_job_join` / `smelt_kvs_open` and released
//! by the matching `*_free` / `smelt_member_detach` / `smelt_job_leave` /
//! `smelt_kvs_close` (the key-value store, `kvs.rs`): C sees opaque pointers, but
//! their values are generation-checked ids in the library's handle table
//! (`handle.rs`), never addresses, so a handle freed twice, used after its free, of
//! the wrong kind, or made up is answered with `SMELT_ERR_INVALID_HANDLE`, and a member
//! or store client handle used by two threads at once with `SMELT_ERR_BUSY`.
//!
//! # `unsafe`
//! A C API cannot avoid `unsafe`: it reads and writes through raw pointers handed over
//! by C (strings, arrays, buffers, output pointers) and calls C function pointers. This
//! crate is therefore the one exception to "unsafe only in smelt-transport". Every
//! such access goes through a small helper ([`cstr`], [`slice`], [`slice_mut`],
//! [`out`]) or one of the two calls of user code in `group.rs`, each a single `unsafe`
//! block whose `// SAFETY:` comment states what the caller promised in `smelt.h`.
//! Handles are never dereferenced.

#![allow(non_camel_case_types)]

mod agg;
mod am;
mod global;
mod group;
mod handle;
mod kvs;
mod offload;
mod tasks;
mod world;

use ::smelt_model::{Model, ModelError};
use ::smelt_tree::{Payload, Topology, Tree};
use handle::{Kind, Object, Wait};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

pub use agg::*;
pub use am::*;
pub use global::*;
pub use group::*;
pub use kvs::*;
pub use offload::*;
pub use tasks::*;
pub use world::*;

/// Status codes of every function (see `smelt.h`).
pub type smelt_status = c_int;
/// Success.
pub const SMELT_OK: smelt_status = 0;
/// A NULL pointer, an unknown name, an out-of-range number.
pub const SMELT_ERR_INVALID_ARGUMENT: smelt_status = 1;
/// A file could not be read.
pub const SMELT_ERR_IO: smelt_status = 2;
/// A model file is malformed or invalid.
pub const SMELT_ERR_MODEL: smelt_status = 3;
/// A tree could not be built (e.g. a CPU not in the model).
pub const SMELT_ERR_TREE: smelt_status = 4;
/// The runtime failed (a member disconnected, a thread could not be pinned).
pub const SMELT_ERR_RUNTIME: smelt_status = 5;
/// An operation did not complete in time.
pub const SMELT_ERR_TIMEOUT: smelt_status = 6;
/// A caller-provided buffer is too small.
pub const SMELT_ERR_BUFFER: smelt_status = 7;
/// An internal error (a bug in smelt); the object involved should not be used again.
pub const SMELT_ERR_PANIC: smelt_status = 8;
/// A handle that is not live: freed or detached already, a member handle whose
/// `smelt_group_run` body returned, a handle of another kind, or not a handle at all.
pub const SMELT_ERR_INVALID_HANDLE: smelt_status = 9;
/// A member handle in use by another thread right now, a member already attached or
/// running, or a group freed while members are attached or running.
pub const SMELT_ERR_BUSY: smelt_status = 10;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// An error: a status code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Error(pub smelt_status, pub String);

pub(crate) type Res<T> = Result<T, Error>;

pub(crate) fn err<T>(code: smelt_status, msg: impl Into<String>) -> Res<T> {
    Err(Error(code, msg.into()))
}

fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

pub(crate) use smelt_runtime::panic_message;

/// Runs `f`, turning errors and panics into a status code and a message.
pub(crate) fn guard(f: impl FnOnce() -> Res<()>) -> smelt_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_last_error("");
            SMELT_OK
        }
        Ok(Err(Error(code, msg))) => {
            set_last_error(&msg);
            code
        }
        Err(p) => {
            set_last_error(&format!("internal error: {}", panic_message(&*p)));
            SMELT_ERR_PANIC
        }
    }
}

/// A C string argument as `&str`.
pub(crate) fn cstr<'a>(p: *const c_char, what: &str) -> Res<&'a str> {
    if p.is_null() {
        return err(SMELT_ERR_INVALID_ARGUMENT, format!("{what} is NULL"));
    }
    // Smelt.h requires string arguments to be NUL-terminated and valid for the
    // duration of the call; p is not NULL.
    // SAFETY: as argued in the lines above.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| Error(SMELT_ERR_INVALID_ARGUMENT, format!("{what} is not UTF-8")))
}

/// An array argument of `len` elements as a slice (empty for len 0, whatever `p`).
pub(crate) fn slice<'a, T>(p: *const T, len: usize, what: &str) -> Res<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return err(SMELT_ERR_INVALID_ARGUMENT, format!("{what} is NULL"));
    }
    // Smelt.h requires array arguments to point to `len` initialised elements
    // that stay valid and unmodified during the call; p is not NULL.
    // SAFETY: as argued in the lines above.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A mutable buffer argument of `len` bytes.
pub(crate) fn slice_mut<'a>(p: *mut u8, len: usize, what: &str) -> Res<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return err(SMELT_ERR_INVALID_ARGUMENT, format!("{what} is NULL"));
    }
    // Smelt.h requires buffer arguments to point to `len` writable bytes that no
    // other thread touches during the call; p is not NULL.
    // SAFETY: as argued in the lines above.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// Stores `v` through an output pointer.
pub(crate) fn out<T>(p: *mut T, v: T, what: &str) -> Res<()> {
    if p.is_null() {
        return err(SMELT_ERR_INVALID_ARGUMENT, format!("{what} is NULL"));
    }
    // P is not NULL. `write` does not read or drop the old (maybe uninitialised) value.
    // SAFETY: smelt.h requires output pointers to point to writable storage of their type.
    unsafe { p.write(v) };
    Ok(())
}

/// The value of a handle (an id in the handle table, not an address).
pub(crate) fn id<T>(p: *const T) -> usize {
    p.addr()
}

/// Stores `obj` in the handle table and its new handle through `p`.
pub(crate) fn new_handle<T>(p: *mut *mut T, obj: Object, what: &str) -> Res<()> {
    if p.is_null() {
        return err(SMELT_ERR_INVALID_ARGUMENT, format!("{what} is NULL"));
    }
    let h = handle::insert(obj)?;
    out(p, std::ptr::without_provenance_mut(h), what)
}

/// Removes a model, tree or group handle (NULL: nothing to do).
fn free_handle(h: usize, kind: Kind, what: &str) -> smelt_status {
    guard(|| {
        if h != 0 {
            // The object is dropped here, outside the table's locks.
            drop(handle::remove(h, kind, what, Wait::Block, |_| Ok(()))?);
        }
        Ok(())
    })
}

/// A loaded machine model. Opaque to C: a `smelt_model *` is a handle (an id), never
/// the address of one.
#[repr(C)]
pub struct smelt_model {
    _opaque: [u8; 0],
}

/// A broadcast tree over some CPUs of a model (opaque to C, as [`smelt_model`]).
#[repr(C)]
pub struct smelt_tree {
    _opaque: [u8; 0],
}

/// What a tree handle refers to.
pub(crate) struct TreeObj {
    pub(crate) tree: Tree,
    pub(crate) model: Arc<Model>,
    /// For a tree built as `auto`: which algorithm runs the allreduce (recursive
    /// doubling where SMELT_TUNE, the tuning file or the prediction picks it); groups
    /// created over the tree use it.
    pub(crate) algorithms: Option<Arc<::smelt_tree::tuning::AlgorithmTable>>,
}

/// The model of a model handle.
fn model_of(p: *const smelt_model) -> Res<Arc<Model>> {
    handle::shared(id(p), Kind::Model, "model", |o| match o {
        Object::Model(m) => m.clone(),
        _ => unreachable!("the handle table checked the kind"),
    })
}

/// The tree of a tree handle.
pub(crate) fn tree_of(p: *const smelt_tree) -> Res<Arc<TreeObj>> {
    handle::shared(id(p), Kind::Tree, "tree", |o| match o {
        Object::Tree(t) => t.clone(),
        _ => unreachable!("the handle table checked the kind"),
    })
}

/// The message of the last failed call on this thread ("" after a success). The
/// string stays valid until the next smelt call on the same thread.
#[no_mangle]
pub extern "C" fn smelt_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

static VERSION: &[u8] = concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes();

/// The library version, e.g. "0.1.0" (static storage).
#[no_mangle]
pub extern "C" fn smelt_version() -> *const c_char {
    VERSION.as_ptr() as *const c_char
}

/// Loads and validates a model file (`smelt probe -o model.json`).
#[no_mangle]
pub extern "C" fn smelt_model_load(
    path: *const c_char,
    model: *mut *mut smelt_model,
) -> smelt_status {
    guard(|| {
        let p = cstr(path, "path")?;
        let m = Model::load(p).map_err(|e| {
            let code = match e {
                ModelError::Io { .. } => SMELT_ERR_IO,
                _ => SMELT_ERR_MODEL,
            };
            Error(code, e.to_string())
        })?;
        new_handle(model, Object::Model(Arc::new(m)), "model")
    })
}

/// A synthetic model: `sockets × cores_per_socket` CPUs numbered from 0, costs
/// `send_ns`/`recv_ns` inside a socket and `remote_factor` times that across.
#[no_mangle]
pub extern "C" fn smelt_model_synthetic(
    sockets: u32,
    cores_per_socket: u32,
    send_ns: f64,
    recv_ns: f64,
    remote_factor: f64,
    model: *mut *mut smelt_model,
) -> smelt_status {
    guard(|| {
        if sockets == 0 || cores_per_socket == 0 || sockets as u64 * cores_per_socket as u64 > 4096
        {
            return err(
                SMELT_ERR_INVALID_ARGUMENT,
                "sockets and cores_per_socket must be >= 1 (at most 4096 CPUs)",
            );
        }
        if [send_ns, recv_ns, remote_factor]
            .iter()
            .any(|x| !x.is_finite() || *x < 0.0)
        {
            return err(SMELT_ERR_INVALID_ARGUMENT, "costs must be finite and >= 0");
        }
        let m = ::smelt_model::synthetic(
            sockets as usize,
            cores_per_socket as usize,
            send_ns,
            recv_ns,
            remote_factor,
        );
        new_handle(model, Object::Model(Arc::new(m)), "model")
    })
}

/// Number of CPUs of a model.
#[no_mangle]
pub extern "C" fn smelt_model_ncpus(model: *const smelt_model, n: *mut usize) -> smelt_status {
    guard(|| out(n, model_of(model)?.len(), "n"))
}

/// Copies the model's OS CPU ids into `cpus` (room for `len`); `SMELT_ERR_BUFFER` if
/// `len` is smaller than `smelt_model_ncpus`.
#[no_mangle]
pub extern "C" fn smelt_model_cpus(
    model: *const smelt_model,
    cpus: *mut u32,
    len: usize,
) -> smelt_status {
    guard(|| {
        let m = model_of(model)?;
        if len < m.len() {
            return err(
                SMELT_ERR_BUFFER,
                format!(
                    "the buffer has room for {len} CPUs, the model has {}",
                    m.len()
                ),
            );
        }
        for (i, &c) in m.cpus.iter().enumerate() {
            // The pointer arithmetic stays inside the `len` elements checked above.
            out(cpus.wrapping_add(i), c, "cpus")?;
        }
        Ok(())
    })
}

/// Releases a model (NULL is ignored): `SMELT_ERR_INVALID_HANDLE` if it was freed
/// already or is not a model handle.
#[no_mangle]
pub extern "C" fn smelt_model_free(model: *mut smelt_model) -> smelt_status {
    free_handle(id(model), Kind::Model, "model")
}

/// Builds a tree with algorithm `algo` (a `smelt tree --algo` name such as
/// "adaptive-shuffled", "binary", "knomial:4"; NULL = "auto": `SMELT_TUNE`, else this
/// host's tuning file from `smelt tune`, else the simulator's best prediction; a group
/// created over an `auto` tree also runs smelt_allreduce by recursive doubling where
/// that picks it — smelt_barrier stays the checked agreement on the tree) over the
/// given OS CPU ids (all CPUs of the model when `cpus` is NULL and `ncpus` is 0),
/// rooted at OS CPU `root` (or the cheapest root when `root` is -1).
#[no_mangle]
pub extern "C" fn smelt_tree_build(
    model: *const smelt_model,
    algo: *const c_char,
    cpus: *const u32,
    ncpus: usize,
    root: i64,
    tree: *mut *mut smelt_tree,
) -> smelt_status {
    guard(|| {
        let model = model_of(model)?;
        let algo = if algo.is_null() {
            "auto"
        } else {
            cstr(algo, "algo")?
        };
        let list = slice(cpus, ncpus, "cpus")?;
        let root = match root {
            -1 => None,
            r if r >= 0 && r <= u32::MAX as i64 => Some(r as u32),
            r => {
                return err(
                    SMELT_ERR_INVALID_ARGUMENT,
                    format!("root {r} is neither a CPU id nor -1"),
                )
            }
        };
        let t = build_tree(model, algo, list, root)?;
        new_handle(tree, Object::Tree(Arc::new(t)), "tree")
    })
}

/// A tree with algorithm `algo` (a `smelt tree --algo` name, or "auto") over the OS
/// CPU ids `list` (all of the model's when empty), in that order, rooted at CPU
/// `root` (None: the cheapest root); for `auto`, with its algorithm table.
pub(crate) fn build_tree(
    model: Arc<Model>,
    algo: &str,
    list: &[u32],
    root: Option<u32>,
) -> Res<TreeObj> {
    let m = &*model;
    let topo: Topology = algo
        .parse()
        .map_err(|e: String| Error(SMELT_ERR_INVALID_ARGUMENT, e))?;
    let list: Vec<u32> = if list.is_empty() {
        m.cpus.clone()
    } else {
        list.to_vec()
    };
    let pos = m
        .positions(&list)
        .map_err(|e| Error(SMELT_ERR_TREE, e.to_string()))?;
    let mut uniq = pos.clone();
    uniq.sort_unstable();
    uniq.dedup();
    if uniq.len() != pos.len() {
        return err(SMELT_ERR_TREE, "a CPU is listed twice");
    }
    let root_pos = match root {
        None => None,
        Some(r) => {
            if !list.contains(&r) {
                return err(
                    SMELT_ERR_TREE,
                    format!("the root CPU {r} is not one of the tree's CPUs"),
                );
            }
            m.position(r)
        }
    };
    let t = topo
        .generate(m, &pos, root_pos)
        .map_err(|e| Error(SMELT_ERR_TREE, e.to_string()))?;
    let algorithms = if topo == Topology::Auto {
        let (table, _refused) = ::smelt_tree::tuning::auto_table(m, &pos)
            .map_err(|e| Error(SMELT_ERR_TREE, e.to_string()))?;
        Some(Arc::new(table))
    } else {
        None
    };
    Ok(TreeObj {
        tree: t,
        model,
        algorithms,
    })
}

/// Number of members of a tree.
#[no_mangle]
pub extern "C" fn smelt_tree_size(tree: *const smelt_tree, n: *mut usize) -> smelt_status {
    guard(|| out(n, tree_of(tree)?.tree.len(), "n"))
}

/// OS CPU id of member `index` (members are numbered 0..size in the tree's order).
#[no_mangle]
pub extern "C" fn smelt_tree_member_cpu(
    tree: *const smelt_tree,
    index: usize,
    cpu: *mut u32,
) -> smelt_status {
    guard(|| {
        let t = &tree_of(tree)?.tree;
        match t.members.get(index) {
            Some(&c) => out(cpu, c.get(), "cpu"),
            None => err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("member {index} out of range (the tree has {})", t.len()),
            ),
        }
    })
}

/// Member index of the root.
#[no_mangle]
pub extern "C" fn smelt_tree_root(tree: *const smelt_tree, index: *mut usize) -> smelt_status {
    guard(|| out(index, tree_of(tree)?.tree.root.index(), "index"))
}

/// The simulator's predicted time in ns of `op` (an operation name of smelt's one
/// vocabulary: "broadcast", "ab", "reduce", "allreduce", "barrier", "gather",
/// "scatter", "2pc") over the tree, under the model it was built from.
#[no_mangle]
pub extern "C" fn smelt_tree_predict(
    tree: *const smelt_tree,
    op: *const c_char,
    ns: *mut f64,
) -> smelt_status {
    guard(|| {
        let t = tree_of(tree)?;
        let op = cstr(op, "op")?;
        let p = ::smelt_tree::predict(&t.model, &t.tree, Payload::default())
            .map_err(|e| Error(SMELT_ERR_TREE, e.to_string()))?;
        let v = match op.parse::<::smelt_tree::Op>() {
            Ok(op) => p.get(op),
            Err(e) => return err(SMELT_ERR_INVALID_ARGUMENT, e),
        };
        out(ns, v, "ns")
    })
}

/// Writes the tree as JSON (a tree file: `{"members": [cpus...], "root": cpu,
/// "children": {"cpu": [cpus...]}}`) into
/// `buf` (room for `len` bytes, NUL included) and its length without NUL into
/// `*needed` (may be NULL). `SMELT_ERR_BUFFER` when it does not fit; call with
/// `len` 0 to learn the size.
#[no_mangle]
pub extern "C" fn smelt_tree_to_json(
    tree: *const smelt_tree,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> smelt_status {
    guard(|| {
        let t = &tree_of(tree)?.tree;
        let j = serde_json::to_string(&t.to_json())
            .map_err(|e| Error(SMELT_ERR_PANIC, e.to_string()))?;
        if !needed.is_null() {
            out(needed, j.len(), "needed")?;
        }
        if len < j.len() + 1 {
            return err(
                SMELT_ERR_BUFFER,
                format!(
                    "the tree's JSON needs {} bytes, the buffer has {len}",
                    j.len() + 1
                ),
            );
        }
        let dst = slice_mut(buf as *mut u8, len, "buf")?;
        dst[..j.len()].copy_from_slice(j.as_bytes());
        dst[j.len()] = 0;
        Ok(())
    })
}

/// Releases a tree (NULL is ignored): `SMELT_ERR_INVALID_HANDLE` if it was freed
/// already or is not a tree handle.
#[no_mangle]
pub extern "C" fn smelt_tree_free(tree: *mut smelt_tree) -> smelt_status {
    free_handle(id(tree), Kind::Tree, "tree")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    /// This thread's last error message (for the tests of every module).
    pub(crate) fn last() -> String {
        // Smelt_last_error returns a NUL-terminated string that stays valid
        // until the next smelt call on this thread.
        // SAFETY: as argued in the lines above.
        unsafe { CStr::from_ptr(smelt_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn model_and_tree_round_trip() {
        let mut m = ptr::null_mut();
        assert_eq!(
            smelt_model_synthetic(2, 4, 50.0, 80.0, 3.0, &mut m),
            SMELT_OK
        );
        let mut n = 0;
        assert_eq!(smelt_model_ncpus(m, &mut n), SMELT_OK);
        assert_eq!(n, 8);
        let mut t = ptr::null_mut();
        let algo = CString::new("binary").unwrap();
        let cpus = [0u32, 1, 4, 5];
        assert_eq!(
            smelt_tree_build(m, algo.as_ptr(), cpus.as_ptr(), 4, 4, &mut t),
            SMELT_OK,
            "{}",
            last()
        );
        let mut size = 0;
        assert_eq!(smelt_tree_size(t, &mut size), SMELT_OK);
        assert_eq!(size, 4);
        let mut root = 9;
        assert_eq!(smelt_tree_root(t, &mut root), SMELT_OK);
        let mut cpu = 0;
        assert_eq!(smelt_tree_member_cpu(t, root, &mut cpu), SMELT_OK);
        assert_eq!(cpu, 4);
        let mut ns = 0.0;
        let op = CString::new("broadcast").unwrap();
        assert_eq!(smelt_tree_predict(t, op.as_ptr(), &mut ns), SMELT_OK);
        assert!(ns > 0.0);
        let mut need = 0;
        assert_eq!(
            smelt_tree_to_json(t, ptr::null_mut(), 0, &mut need),
            SMELT_ERR_BUFFER
        );
        let mut buf = vec![0 as c_char; need + 1];
        assert_eq!(
            smelt_tree_to_json(t, buf.as_mut_ptr(), buf.len(), &mut need),
            SMELT_OK
        );
        // SAFETY: the buffer was NUL-terminated by the call.
        let s = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_str()
            .unwrap()
            .to_string();
        assert!(s.contains("\"root\":4"), "{s}");
        smelt_tree_free(t);
        smelt_model_free(m);
    }

    #[test]
    fn errors_are_codes_with_messages() {
        let mut m = ptr::null_mut();
        let p = CString::new("/nonexistent/m.json").unwrap();
        assert_eq!(smelt_model_load(p.as_ptr(), &mut m), SMELT_ERR_IO);
        assert!(last().contains("/nonexistent/m.json"), "{}", last());
        assert_eq!(
            smelt_model_load(ptr::null(), &mut m),
            SMELT_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("path"));
        assert_eq!(smelt_model_synthetic(1, 2, 1.0, 1.0, 1.0, &mut m), SMELT_OK);
        assert_eq!(last(), "");
        let mut t = ptr::null_mut();
        let bad = CString::new("spiral").unwrap();
        assert_eq!(
            smelt_tree_build(m, bad.as_ptr(), ptr::null(), 0, -1, &mut t),
            SMELT_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("spiral"));
        let cpus = [7u32];
        assert_eq!(
            smelt_tree_build(m, ptr::null(), cpus.as_ptr(), 1, -1, &mut t),
            SMELT_ERR_TREE
        );
        assert!(last().contains("CPU 7"), "{}", last());
        assert_eq!(
            smelt_tree_build(m, ptr::null(), ptr::null(), 0, 5, &mut t),
            SMELT_ERR_TREE
        );
        smelt_model_free(m);
        smelt_model_free(ptr::null_mut());
        smelt_tree_free(ptr::null_mut());
    }
}
