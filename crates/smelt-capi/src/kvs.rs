//! The replicated key-value store (`smelt-kvs`) from C: `smelt_kvs_*` in `smelt.h`.
//!
//! `smelt_kvs_open` starts a store (one thread per replica) and puts each of its
//! clients in the handle table at once; `smelt_kvs_client_at` hands out client `i`'s
//! handle (the same one every time). A client handle is locked for the whole of each
//! call, like a member handle: two threads using one client at once get
//! `SMELT_ERR_BUSY`. `smelt_kvs_close` removes the store's handle, then every client
//! handle (waiting for a call in flight on another thread to end, which the clients'
//! attempt timeouts bound), then closes the store; any later use of either kind of
//! handle is `SMELT_ERR_INVALID_HANDLE`.

use crate::handle::{self, Kind, Object, Wait};
use crate::{
    cstr, err, guard, id, new_handle, out, slice, slice_mut, smelt_status, Error, Res,
    SMELT_ERR_BUFFER, SMELT_ERR_INVALID_ARGUMENT, SMELT_ERR_INVALID_HANDLE, SMELT_ERR_RUNTIME,
    SMELT_ERR_TIMEOUT,
};
use ::smelt_kvs::{KvsError, Protocol, Store, StoreConfig, TreeSpec};
use smelt_tree::Topology;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A replicated key-value store (opaque to C: a handle, never an address).
#[repr(C)]
pub struct smelt_kvs {
    _opaque: [u8; 0],
}

/// One client of a store (opaque to C, as [`smelt_kvs`]).
#[repr(C)]
pub struct smelt_kvs_client {
    _opaque: [u8; 0],
}

/// How a store is built (`smelt.h`); fill it with [`smelt_kvs_config_init`] first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct smelt_kvs_config {
    /// Replicas (threads), at least 1. Default 3.
    pub replicas: usize,
    /// Clients; client `c`'s home is replica `c % replicas`. Default 3.
    pub clients: usize,
    /// "1paxos" (default, also when NULL), "2pc" or "broadcast".
    pub protocol: *const c_char,
    /// The broadcast tree's algorithm (a `smelt tree --algo` name); NULL =
    /// "adaptive-shuffled".
    pub tree: *const c_char,
    /// Longest key in bytes (at most 255). Default 8.
    pub key_len: usize,
    /// Longest value in bytes. Default 16.
    pub value_len: usize,
    /// Slots per channel (48 bytes each; a message needs 14 + key_len + value_len
    /// bytes). Default 64.
    pub capacity: usize,
    /// How long a client waits for one attempt, in ms (1 to 86 400 000). Default 2000.
    pub attempt_timeout_ms: u64,
    /// Longest `smelt_kvs_close` waits for the replicas to finish, in ms (1 to
    /// 86 400 000). Default 10 000.
    pub close_timeout_ms: u64,
    /// Attempts per operation (>= 1; a retry reuses the request id). Default 3.
    pub attempts: u32,
    /// 1Paxos view change when a replica stops: 1 (default) or 0.
    pub failover: c_int,
}

impl Default for smelt_kvs_config {
    fn default() -> Self {
        let d = StoreConfig::new(3, 3);
        smelt_kvs_config {
            replicas: d.replicas,
            clients: d.clients,
            protocol: std::ptr::null(),
            tree: std::ptr::null(),
            key_len: d.key_len,
            value_len: d.value_len,
            capacity: d.link.capacity,
            attempt_timeout_ms: d.attempt_timeout.as_millis() as u64,
            close_timeout_ms: d.close_timeout.as_millis() as u64,
            attempts: d.attempts,
            failover: c_int::from(d.failover),
        }
    }
}

/// Longest timeout accepted (a day), so that no deadline overflows.
const MAX_TIMEOUT_MS: u64 = 86_400_000;

/// What a store handle refers to.
pub(crate) struct KvsObj {
    /// None once closed.
    store: Mutex<Option<Store>>,
    /// The clients' handles, by client index (emptied when they are removed).
    clients: Mutex<Vec<usize>>,
    /// Number of clients.
    nclients: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl KvsObj {
    /// Removes every client handle (waiting for calls in flight with them to end).
    fn release_clients(&self) {
        let ids = std::mem::take(&mut *lock(&self.clients));
        for h in ids {
            // Dropped here, outside the table's locks. A handle can only be gone
            // already if this ran before (then `ids` was empty).
            drop(handle::remove(
                h,
                Kind::KvsClient,
                "client",
                Wait::Block,
                |_| Ok(()),
            ));
        }
    }

    /// Removes the clients, closes the store and checks that every replica applied
    /// the same log.
    fn close(&self) -> Res<()> {
        self.release_clients();
        let Some(store) = lock(&self.store).take() else {
            return Ok(());
        };
        let report = store.close().map_err(kvs_error)?;
        report
            .check_logs()
            .map_err(|e| Error(SMELT_ERR_RUNTIME, format!("the replicas disagree: {e}")))
    }
}

impl Drop for KvsObj {
    fn drop(&mut self) {
        // A store whose handle could not be made: its clients go with it (the store
        // itself shuts down when dropped).
        self.release_clients();
    }
}

/// A store error as a status and message.
fn kvs_error(e: KvsError) -> Error {
    let code = match &e {
        KvsError::Config(_)
        | KvsError::KeyTooLong { .. }
        | KvsError::ValueTooLong { .. }
        | KvsError::History(_) => SMELT_ERR_INVALID_ARGUMENT,
        KvsError::Closed => SMELT_ERR_INVALID_HANDLE,
        KvsError::Timeout { .. } => SMELT_ERR_TIMEOUT,
        KvsError::Unavailable(_)
        | KvsError::HomeFailed { .. }
        | KvsError::Rejected(_)
        | KvsError::Replica { .. }
        | KvsError::NotLinearizable(_)
        | KvsError::Logs(_) => SMELT_ERR_RUNTIME,
    };
    Error(code, e.to_string())
}

/// A timeout field in ms as a duration.
fn millis(ms: u64, what: &str) -> Res<Duration> {
    if ms == 0 || ms > MAX_TIMEOUT_MS {
        return err(
            SMELT_ERR_INVALID_ARGUMENT,
            format!("{what} is {ms} ms: it must be 1 to {MAX_TIMEOUT_MS}"),
        );
    }
    Ok(Duration::from_millis(ms))
}

/// The store configuration a C configuration asks for.
fn store_config(c: &smelt_kvs_config) -> Res<StoreConfig> {
    let protocol: Protocol = if c.protocol.is_null() {
        Protocol::OnePaxos
    } else {
        cstr(c.protocol, "cfg->protocol")?
            .parse()
            .map_err(|e: String| Error(SMELT_ERR_INVALID_ARGUMENT, format!("cfg->protocol: {e}")))?
    };
    let topology: Topology = if c.tree.is_null() {
        Topology::AdaptiveShuffled
    } else {
        cstr(c.tree, "cfg->tree")?
            .parse()
            .map_err(|e: String| Error(SMELT_ERR_INVALID_ARGUMENT, format!("cfg->tree: {e}")))?
    };
    let failover = match c.failover {
        0 => false,
        1 => true,
        f => {
            return err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("cfg->failover is {f}: it must be 0 or 1"),
            )
        }
    };
    let mut s = StoreConfig::new(c.replicas, c.clients)
        .protocol(protocol)
        .tree(TreeSpec::shaped(topology));
    s.key_len = c.key_len;
    s.value_len = c.value_len;
    s.link.capacity = c.capacity;
    s.attempt_timeout = millis(c.attempt_timeout_ms, "cfg->attempt_timeout_ms")?;
    s.close_timeout = millis(c.close_timeout_ms, "cfg->close_timeout_ms")?;
    s.attempts = c.attempts;
    s.failover = failover;
    Ok(s)
}

/// The store of a store handle.
fn kvs_of(p: *const smelt_kvs) -> Res<Arc<KvsObj>> {
    handle::shared(id(p), Kind::Kvs, "kvs", |o| match o {
        Object::Kvs(k) => k.clone(),
        _ => unreachable!("the handle table checked the kind"),
    })
}

/// Fills `cfg` with the defaults (3 replicas, 3 clients, 1Paxos over
/// adaptive-shuffled, 8-byte keys, 16-byte values, ...).
#[no_mangle]
pub extern "C" fn smelt_kvs_config_init(cfg: *mut smelt_kvs_config) -> smelt_status {
    guard(|| out(cfg, smelt_kvs_config::default(), "cfg"))
}

/// Starts a store as `cfg` asks (one thread per replica) and stores its handle in
/// `*kvs`. `SMELT_ERR_INVALID_ARGUMENT` for a configuration it cannot build.
#[no_mangle]
pub extern "C" fn smelt_kvs_open(
    cfg: *const smelt_kvs_config,
    kvs: *mut *mut smelt_kvs,
) -> smelt_status {
    guard(|| {
        if kvs.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "kvs is NULL");
        }
        let c = slice(cfg, 1, "cfg")?[0];
        let mut store = Store::start(store_config(&c)?).map_err(kvs_error)?;
        let clients = store.take_clients();
        let obj = KvsObj {
            store: Mutex::new(Some(store)),
            clients: Mutex::new(Vec::with_capacity(clients.len())),
            nclients: clients.len(),
        };
        for c in clients {
            // On failure `obj` is dropped: the handles made so far are removed and the
            // store shuts down.
            let h = handle::insert(Object::KvsClient(Box::new(c)))?;
            lock(&obj.clients).push(h);
        }
        new_handle(kvs, Object::Kvs(Arc::new(obj)), "kvs")
    })
}

/// Stores the handle of client `index` (0..clients) in `*client`; the same handle every
/// time, valid until the store is closed.
#[no_mangle]
pub extern "C" fn smelt_kvs_client_at(
    kvs: *const smelt_kvs,
    index: usize,
    client: *mut *mut smelt_kvs_client,
) -> smelt_status {
    guard(|| {
        let k = kvs_of(kvs)?;
        let ids = lock(&k.clients);
        match ids.get(index) {
            Some(&h) => out(client, std::ptr::without_provenance_mut(h), "client"),
            None if ids.is_empty() && k.nclients > 0 => err(
                SMELT_ERR_INVALID_HANDLE,
                "kvs is not a live kvs handle (already closed)",
            ),
            None => err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!(
                    "client {index} out of range (the store has {} clients)",
                    k.nclients
                ),
            ),
        }
    })
}

/// Number of clients of a store.
#[no_mangle]
pub extern "C" fn smelt_kvs_nclients(kvs: *const smelt_kvs, n: *mut usize) -> smelt_status {
    guard(|| out(n, kvs_of(kvs)?.nclients, "n"))
}

/// Sets `key` (`key_len` bytes) to `value` (`value_len` bytes); returns once the set
/// is committed at every replica (1Paxos, 2PC).
#[no_mangle]
pub extern "C" fn smelt_kvs_set(
    client: *mut smelt_kvs_client,
    key: *const c_void,
    key_len: usize,
    value: *const c_void,
    value_len: usize,
) -> smelt_status {
    guard(|| {
        let mut c = handle::kvs_client(id(client), "client")?;
        let k = slice(key.cast::<u8>(), key_len, "key")?;
        let v = slice(value.cast::<u8>(), value_len, "value")?;
        c.set(k, v).map_err(kvs_error)
    })
}

/// Reads `key` at the client's home replica: `*found` = 1 and the value's length in
/// `*len` (its bytes in `value`, room for `cap`), or `*found` = 0 and `*len` = 0 for a
/// key never set. `SMELT_ERR_BUFFER` (with `*found` and `*len` set) when the value is
/// longer than `cap`.
#[no_mangle]
pub extern "C" fn smelt_kvs_get(
    client: *mut smelt_kvs_client,
    key: *const c_void,
    key_len: usize,
    value: *mut c_void,
    cap: usize,
    len: *mut usize,
    found: *mut c_int,
) -> smelt_status {
    guard(|| {
        let mut c = handle::kvs_client(id(client), "client")?;
        let k = slice(key.cast::<u8>(), key_len, "key")?;
        let buf = slice_mut(value.cast::<u8>(), cap, "value")?;
        for (p, what) in [(len.is_null(), "len"), (found.is_null(), "found")] {
            if p {
                return err(SMELT_ERR_INVALID_ARGUMENT, format!("{what} is NULL"));
            }
        }
        match c.get(k).map_err(kvs_error)? {
            None => {
                out(found, 0, "found")?;
                out(len, 0, "len")
            }
            Some(v) => {
                out(found, 1, "found")?;
                out(len, v.len(), "len")?;
                let Some(dst) = buf.get_mut(..v.len()) else {
                    return err(
                        SMELT_ERR_BUFFER,
                        format!("the value has {} bytes, the buffer {cap}", v.len()),
                    );
                };
                dst.copy_from_slice(&v);
                Ok(())
            }
        }
    })
}

/// Closes a store (NULL is ignored): removes every client handle (waiting for calls in
/// flight on other threads to end), lets the replicas finish what was ordered and
/// stops them. The handles are invalid afterwards, also when this returns an error
/// (`SMELT_ERR_RUNTIME`: the replicas' logs differ).
#[no_mangle]
pub extern "C" fn smelt_kvs_close(kvs: *mut smelt_kvs) -> smelt_status {
    guard(|| {
        if id(kvs) == 0 {
            return Ok(());
        }
        match handle::remove(id(kvs), Kind::Kvs, "kvs", Wait::Block, |_| Ok(()))? {
            Object::Kvs(k) => k.close(),
            _ => unreachable!("the handle table checked the kind"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::last;
    use crate::{SMELT_ERR_BUSY, SMELT_OK};
    use std::ffi::CString;
    use std::ptr;

    fn cfg(replicas: usize, clients: usize) -> smelt_kvs_config {
        let mut c = smelt_kvs_config::default();
        assert_eq!(smelt_kvs_config_init(&mut c), SMELT_OK);
        c.replicas = replicas;
        c.clients = clients;
        c
    }

    fn open(c: &smelt_kvs_config) -> *mut smelt_kvs {
        let mut k = ptr::null_mut();
        assert_eq!(smelt_kvs_open(c, &mut k), SMELT_OK, "{}", last());
        k
    }

    fn client(k: *const smelt_kvs, i: usize) -> *mut smelt_kvs_client {
        let mut c = ptr::null_mut();
        assert_eq!(smelt_kvs_client_at(k, i, &mut c), SMELT_OK, "{}", last());
        c
    }

    fn set(c: *mut smelt_kvs_client, k: &[u8], v: &[u8]) -> smelt_status {
        smelt_kvs_set(c, k.as_ptr().cast(), k.len(), v.as_ptr().cast(), v.len())
    }

    /// (status, found, value).
    fn get(c: *mut smelt_kvs_client, k: &[u8], cap: usize) -> (smelt_status, c_int, Vec<u8>) {
        let mut buf = vec![0u8; cap];
        let (mut len, mut found) = (usize::MAX, -1);
        let st = smelt_kvs_get(
            c,
            k.as_ptr().cast(),
            k.len(),
            buf.as_mut_ptr().cast(),
            cap,
            &mut len,
            &mut found,
        );
        buf.truncate(len.min(cap));
        (st, found, buf)
    }

    #[test]
    fn set_and_get_on_every_protocol() {
        for proto in ["1paxos", "2pc", "broadcast"] {
            let p = CString::new(proto).unwrap();
            let t = CString::new("binary").unwrap();
            let mut c = cfg(3, 2);
            c.protocol = p.as_ptr();
            c.tree = t.as_ptr();
            let k = open(&c);
            let mut n = 0;
            assert_eq!(smelt_kvs_nclients(k, &mut n), SMELT_OK);
            assert_eq!(n, 2);
            let (a, b) = (client(k, 0), client(k, 1));
            assert_eq!(client(k, 0), a, "the same handle every time");
            assert_eq!(set(a, b"answer", b"42"), SMELT_OK, "{proto}: {}", last());
            assert_eq!(get(a, b"answer", 16), (SMELT_OK, 1, b"42".to_vec()));
            if proto != "broadcast" {
                assert_eq!(get(b, b"answer", 16), (SMELT_OK, 1, b"42".to_vec()));
            }
            assert_eq!(get(b, b"other", 16), (SMELT_OK, 0, vec![]));
            // An empty value is found, with length 0.
            assert_eq!(set(b, b"e", b""), SMELT_OK);
            assert_eq!(get(b, b"e", 0), (SMELT_OK, 1, vec![]));
            assert_eq!(smelt_kvs_close(k), SMELT_OK, "{proto}: {}", last());
        }
    }

    #[test]
    fn bad_configurations_are_errors() {
        let mut k = ptr::null_mut();
        assert_eq!(
            smelt_kvs_open(ptr::null(), &mut k),
            SMELT_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("cfg is NULL"), "{}", last());
        let c = cfg(1, 1);
        assert_eq!(
            smelt_kvs_open(&c, ptr::null_mut()),
            SMELT_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("kvs is NULL"), "{}", last());
        assert_eq!(
            smelt_kvs_config_init(ptr::null_mut()),
            SMELT_ERR_INVALID_ARGUMENT
        );
        let raft = CString::new("raft").unwrap();
        let spiral = CString::new("spiral").unwrap();
        type Change<'a> = &'a dyn Fn(&mut smelt_kvs_config);
        let bad: [(Change, &str); 8] = [
            (&|c| c.protocol = raft.as_ptr(), "unknown protocol 'raft'"),
            (&|c| c.tree = spiral.as_ptr(), "cfg->tree"),
            (&|c| c.replicas = 0, "at least one replica"),
            (&|c| c.key_len = 256, "at most 255"),
            (&|c| c.value_len = 10_000, "raise the capacity"),
            (&|c| c.attempts = 0, "attempts"),
            (&|c| c.attempt_timeout_ms = 0, "cfg->attempt_timeout_ms"),
            (&|c| c.failover = 2, "cfg->failover"),
        ];
        for (f, msg) in bad {
            let mut c = cfg(2, 1);
            f(&mut c);
            assert_eq!(smelt_kvs_open(&c, &mut k), SMELT_ERR_INVALID_ARGUMENT);
            assert!(last().contains(msg), "{msg}: {}", last());
        }
        // A large value with a large enough capacity is fine.
        let mut c = cfg(2, 1);
        c.value_len = 10_000;
        c.capacity = 256;
        let k = open(&c);
        let cl = client(k, 0);
        let v = vec![7u8; 10_000];
        assert_eq!(set(cl, b"big", &v), SMELT_OK, "{}", last());
        assert_eq!(get(cl, b"big", 10_000), (SMELT_OK, 1, v));
        assert_eq!(smelt_kvs_close(k), SMELT_OK);
    }

    #[test]
    fn misuse_is_an_error_never_a_crash() {
        let k = open(&cfg(3, 2));
        let a = client(k, 0);
        let mut c = ptr::null_mut();
        assert_eq!(
            smelt_kvs_client_at(k, 2, &mut c),
            SMELT_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("client 2 out of range"), "{}", last());
        assert_eq!(
            smelt_kvs_client_at(k, 0, ptr::null_mut()),
            SMELT_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            smelt_kvs_client_at(ptr::null(), 0, &mut c),
            SMELT_ERR_INVALID_ARGUMENT
        );
        // Oversized key and value: nothing sent.
        assert_eq!(set(a, b"123456789", b"v"), SMELT_ERR_INVALID_ARGUMENT);
        assert!(last().contains("key of 9 bytes"), "{}", last());
        assert_eq!(set(a, b"k", &[0; 17]), SMELT_ERR_INVALID_ARGUMENT);
        assert!(last().contains("value of 17 bytes"), "{}", last());
        assert_eq!(get(a, b"123456789", 16).0, SMELT_ERR_INVALID_ARGUMENT);
        // NULL arguments.
        assert_eq!(
            smelt_kvs_set(a, ptr::null(), 1, b"v".as_ptr().cast(), 1),
            SMELT_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("key is NULL"), "{}", last());
        assert_eq!(
            smelt_kvs_set(a, b"k".as_ptr().cast(), 1, ptr::null(), 1),
            SMELT_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("value is NULL"), "{}", last());
        assert_eq!(
            smelt_kvs_set(ptr::null_mut(), b"k".as_ptr().cast(), 1, ptr::null(), 0),
            SMELT_ERR_INVALID_ARGUMENT
        );
        assert!(last().contains("client is NULL"), "{}", last());
        let (mut len, mut found) = (0usize, 0);
        let mut buf = [0u8; 16];
        for (l, f, v, what) in [
            (
                ptr::null_mut(),
                &mut found as *mut c_int,
                buf.as_mut_ptr(),
                "len",
            ),
            (
                &mut len as *mut usize,
                ptr::null_mut(),
                buf.as_mut_ptr(),
                "found",
            ),
            (
                &mut len as *mut usize,
                &mut found as *mut c_int,
                ptr::null_mut(),
                "value",
            ),
        ] {
            let st = smelt_kvs_get(a, b"k".as_ptr().cast(), 1, v.cast(), 16, l, f);
            assert_eq!(st, SMELT_ERR_INVALID_ARGUMENT);
            assert!(last().contains(&format!("{what} is NULL")), "{}", last());
        }
        // A buffer too small: BUFFER, with the length needed.
        assert_eq!(set(a, b"k", b"0123456789"), SMELT_OK);
        assert_eq!(
            smelt_kvs_get(
                a,
                b"k".as_ptr().cast(),
                1,
                buf.as_mut_ptr().cast(),
                4,
                &mut len,
                &mut found
            ),
            SMELT_ERR_BUFFER
        );
        assert_eq!((len, found), (10, 1));
        // Handles of the wrong kind.
        assert_eq!(set(k.cast(), b"k", b"v"), SMELT_ERR_INVALID_HANDLE);
        assert!(
            last().contains("is a kvs handle, not a kvs client handle"),
            "{}",
            last()
        );
        assert_eq!(smelt_kvs_close(a.cast()), SMELT_ERR_INVALID_HANDLE);
        // Close; then every use of the store or its clients, and a second close.
        assert_eq!(smelt_kvs_close(k), SMELT_OK, "{}", last());
        assert_eq!(set(a, b"k", b"v"), SMELT_ERR_INVALID_HANDLE);
        assert!(last().contains("its store was closed"), "{}", last());
        assert_eq!(get(a, b"k", 16).0, SMELT_ERR_INVALID_HANDLE);
        assert_eq!(smelt_kvs_client_at(k, 0, &mut c), SMELT_ERR_INVALID_HANDLE);
        assert_eq!(smelt_kvs_close(k), SMELT_ERR_INVALID_HANDLE);
        assert!(last().contains("already closed"), "{}", last());
        assert_eq!(smelt_kvs_close(ptr::null_mut()), SMELT_OK);
    }

    /// One client handle on two threads at once: while one thread is inside a set, a
    /// get from another thread returns SMELT_ERR_BUSY at once (and the set is not
    /// disturbed). The threads race, so the get is tried until it meets a set.
    #[test]
    fn a_client_used_by_two_threads_at_once_is_busy() {
        let k = open(&cfg(2, 1));
        let a = client(k, 0) as usize;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let busy = std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let st = set(a as *mut smelt_kvs_client, b"k", b"v");
                    assert!(st == SMELT_OK || st == SMELT_ERR_BUSY, "{}", last());
                }
            });
            let mut busy = false;
            for _ in 0..200_000 {
                let st = get(a as *mut smelt_kvs_client, b"k", 16).0;
                assert!(st == SMELT_OK || st == SMELT_ERR_BUSY, "{}", last());
                if st == SMELT_ERR_BUSY {
                    assert!(last().contains("in use by another thread"), "{}", last());
                    busy = true;
                    break;
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            busy
        });
        assert!(busy, "never saw SMELT_ERR_BUSY");
        assert_eq!(smelt_kvs_close(k), SMELT_OK);
    }
}
