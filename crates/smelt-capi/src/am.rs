//! Active messages (`smelt-am`) from C: `smelt_am_*` in `smelt.h`.
//!
//! `smelt_am_threads` makes the endpoints of a job of threads, each a handle locked
//! for the whole of each call (a second thread using one endpoint at once gets
//! `SMELT_ERR_BUSY`, and so does a handler that calls its own endpoint). Handlers are
//! C functions with a user pointer; a request's handler replies through the token it
//! is given, which is valid only until the handler returns: the token is an id of the
//! running handler (kept per thread), never an address, so a stale or made-up token
//! gets `SMELT_ERR_INVALID_HANDLE`. A reply asked for through the token is sent when
//! the handler returns.

use crate::handle::{self, Kind, Object, Wait};
use crate::{
    err, guard, id, out, slice, smelt_status, Error, Res, SMELT_ERR_BUFFER,
    SMELT_ERR_INVALID_ARGUMENT, SMELT_ERR_INVALID_HANDLE, SMELT_ERR_RUNTIME, SMELT_ERR_TIMEOUT,
};
use smelt_am::{AmConfig, AmError, Endpoint};
use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::time::Duration;

/// An active-message endpoint (opaque to C: a handle, never an address).
#[repr(C)]
pub struct smelt_am_endpoint {
    _opaque: [u8; 0],
}

/// The token of a running handler (opaque to C: an id, never an address).
#[repr(C)]
pub struct smelt_am_token {
    _opaque: [u8; 0],
}

/// A request or reply handler (see `smelt.h`).
pub type smelt_am_handler = Option<
    extern "C" fn(
        user: *mut c_void,
        token: *const smelt_am_token,
        from: usize,
        args: *const u64,
        nargs: usize,
        data: *const c_void,
        len: usize,
    ),
>;

/// Handler 0: a message that came back (see `smelt.h`).
pub type smelt_am_returned = Option<
    extern "C" fn(
        user: *mut c_void,
        reason: c_int,
        by: usize,
        handler: u8,
        args: *const u64,
        nargs: usize,
        data_len: usize,
    ),
>;

/// The endpoint's state: nothing of C's (each handler carries its user pointer).
pub(crate) type AmEndpoint = Endpoint<()>;

/// A reply asked for through a token: handler, argument words (the first `nargs` of 8:
/// no allocation for a short reply), data block.
type Reply = (u8, [u64; smelt_am::MAX_ARGS], usize, Option<Vec<u8>>);

/// A reply asked for by a running handler.
struct Pending {
    token: usize,
    request: bool,
    reply: Option<Reply>,
}

thread_local! {
    /// The handlers running on this thread (innermost last).
    static RUNNING: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) };
    static NEXT_TOKEN: std::cell::Cell<usize> = const { std::cell::Cell::new(1) };
}

/// A user pointer, carried into the handler closures (which must be `Send`). smelt
/// never dereferences it; it only hands it back to the C handler.
#[derive(Clone, Copy)]
struct User(usize);

/// A C handler and its user pointer, as registered (a NULL handler is an error).
fn handler_of<F>(h: Option<F>, user: *mut c_void) -> Res<(F, User)> {
    match h {
        Some(f) => Ok((f, User(user.addr()))),
        None => err(SMELT_ERR_INVALID_ARGUMENT, "the handler is NULL"),
    }
}

pub(crate) fn am_error(e: AmError) -> Error {
    let code = match &e {
        // A member that made another service where this one made its endpoint is an
        // argument mistake; shared memory that failed is not.
        AmError::World(w) => crate::world::world_error(w.clone()).0,
        AmError::Timeout { .. } => SMELT_ERR_TIMEOUT,
        AmError::TooLarge { .. } => SMELT_ERR_BUFFER,
        AmError::Invalid(_)
        | AmError::NoSuchDestination { .. }
        | AmError::ReservedHandler
        | AmError::TooManyArgs { .. }
        | AmError::NotARequest
        | AmError::AlreadyReplied => SMELT_ERR_INVALID_ARGUMENT,
        AmError::PeerGone { .. }
        | AmError::Aborted
        | AmError::HandlerPanicked { .. }
        | AmError::Transport { .. } => SMELT_ERR_RUNTIME,
    };
    Error(code, e.to_string())
}

fn endpoint(ep: *const smelt_am_endpoint, what: &str) -> Res<handle::AmGuard> {
    handle::am_endpoint(id(ep), what)
}

/// Makes the `n` endpoints of a job of threads (`capacity` slots per link; 0 = the
/// default 256) and stores their handles in `eps[0..n]`; endpoint `i` is destination
/// `i`.
#[no_mangle]
pub extern "C" fn smelt_am_threads(
    n: usize,
    capacity: usize,
    eps: *mut *mut smelt_am_endpoint,
) -> smelt_status {
    guard(|| {
        if eps.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "eps is NULL");
        }
        if n == 0 || n > 4096 {
            return err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("{n} endpoints (1 to 4096)"),
            );
        }
        let mut cfg = AmConfig::default();
        if capacity != 0 {
            cfg.link.capacity = capacity;
        }
        let all = smelt_am::threads(n, cfg, |_| ()).map_err(am_error)?;
        let mut made: Vec<usize> = Vec::with_capacity(n);
        for ep in all {
            match handle::insert(Object::AmEndpoint(Box::new(ep))) {
                Ok(h) => made.push(h),
                Err(e) => {
                    for h in made {
                        let _ = handle::remove(
                            h,
                            Kind::AmEndpoint,
                            "endpoint",
                            Wait::Block,
                            |_| Ok(()),
                        );
                    }
                    return Err(e);
                }
            }
        }
        for (i, h) in made.into_iter().enumerate() {
            out(
                eps.wrapping_add(i),
                std::ptr::without_provenance_mut(h),
                "eps",
            )?;
        }
        Ok(())
    })
}

/// A collective call: this member's endpoint of a new set of endpoints over every
/// member of `world` (endpoint `i` is member `i`; `capacity` slots per link, 0 = the
/// default 256).
#[no_mangle]
pub extern "C" fn smelt_world_endpoint(
    world: *mut crate::smelt_world,
    capacity: usize,
    ep: *mut *mut smelt_am_endpoint,
) -> smelt_status {
    guard(|| {
        let w = crate::world::world_of(world)?;
        if ep.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "ep is NULL");
        }
        let slot = handle::reserve()?;
        let mut cfg = AmConfig::default();
        if capacity != 0 {
            cfg.link.capacity = capacity;
        }
        let e = Endpoint::from_world(&w, (), cfg).map_err(am_error)?;
        let h = slot.fill(Object::AmEndpoint(Box::new(e)));
        out(ep, std::ptr::without_provenance_mut(h), "ep")
    })
}

/// Releases an endpoint (NULL is ignored): the others see it leave.
#[no_mangle]
pub extern "C" fn smelt_am_endpoint_free(ep: *mut smelt_am_endpoint) -> smelt_status {
    guard(|| {
        if !ep.is_null() {
            drop(handle::remove(
                id(ep),
                Kind::AmEndpoint,
                "endpoint",
                Wait::Busy,
                |_| Ok(()),
            )?);
        }
        Ok(())
    })
}

/// This endpoint's index, and the number of destinations.
#[no_mangle]
pub extern "C" fn smelt_am_rank(
    ep: *const smelt_am_endpoint,
    me: *mut usize,
    n: *mut usize,
) -> smelt_status {
    guard(|| {
        let e = endpoint(ep, "endpoint")?;
        out(me, e.me(), "me")?;
        out(n, e.size(), "n")
    })
}

/// Registers `h` (with `user`) as handler `index` (1 to 255).
#[no_mangle]
pub extern "C" fn smelt_am_register(
    ep: *mut smelt_am_endpoint,
    index: u8,
    h: smelt_am_handler,
    user: *mut c_void,
) -> smelt_status {
    guard(|| {
        let (f, user) = handler_of(h, user)?;
        let mut e = endpoint(ep, "endpoint")?;
        e.register(index, move |_, ctx, m| {
            let token = NEXT_TOKEN.with(|t| {
                let v = t.get();
                t.set(v.wrapping_add(1).max(1));
                v
            });
            RUNNING.with(|r| {
                r.borrow_mut().push(Pending {
                    token,
                    request: ctx.is_request(),
                    reply: None,
                })
            });
            let user = user;
            // The C handler registered through smelt.h, on the thread that polls; the
            // pointers are valid for the call (slices borrowed from the message).
            f(
                std::ptr::without_provenance_mut(user.0),
                std::ptr::without_provenance(token),
                m.from,
                m.args.as_ptr(),
                m.args.len(),
                m.data.as_ptr().cast(),
                m.data.len(),
            );
            let p = RUNNING
                .with(|r| r.borrow_mut().pop())
                .expect("pushed above");
            if let Some((h, args, nargs, data)) = p.reply {
                let args = &args[..nargs];
                // Errors (the requester left) cannot reach the C handler any more: the
                // requester sees the departure itself.
                let _ = match data {
                    None => ctx.reply(h, args),
                    Some(d) => ctx.reply_bulk(h, args, &d),
                };
            }
        })
        .map_err(am_error)
    })
}

/// Registers handler 0: what runs for each message that comes back.
#[no_mangle]
pub extern "C" fn smelt_am_on_returned(
    ep: *mut smelt_am_endpoint,
    h: smelt_am_returned,
    user: *mut c_void,
) -> smelt_status {
    guard(|| {
        let (f, user) = handler_of(h, user)?;
        endpoint(ep, "endpoint")?.on_returned(move |_, r| {
            let user = user;
            // As for request handlers: valid pointers for the duration of the call.
            f(
                std::ptr::without_provenance_mut(user.0),
                r.reason as c_int,
                r.by,
                r.handler,
                r.args.as_ptr(),
                r.args.len(),
                r.data_len,
            )
        });
        Ok(())
    })
}

fn request(
    ep: *mut smelt_am_endpoint,
    dest: usize,
    handler: u8,
    args: *const u64,
    nargs: usize,
    data: Option<&[u8]>,
) -> smelt_status {
    guard(|| {
        let args = slice(args, nargs, "args")?;
        let mut e = endpoint(ep, "endpoint")?;
        match data {
            None => e.request(dest, handler, args),
            Some(d) => e.request_bulk(dest, handler, args, d),
        }
        .map_err(am_error)
    })
}

/// Sends a short request.
#[no_mangle]
pub extern "C" fn smelt_am_request(
    ep: *mut smelt_am_endpoint,
    dest: usize,
    handler: u8,
    args: *const u64,
    nargs: usize,
) -> smelt_status {
    request(ep, dest, handler, args, nargs, None)
}

/// Sends a request with a data block.
#[no_mangle]
pub extern "C" fn smelt_am_request_bulk(
    ep: *mut smelt_am_endpoint,
    dest: usize,
    handler: u8,
    args: *const u64,
    nargs: usize,
    data: *const c_void,
    len: usize,
) -> smelt_status {
    match slice(data.cast::<u8>(), len, "data") {
        Ok(d) => request(ep, dest, handler, args, nargs, Some(d)),
        Err(e) => guard(|| Err(e)),
    }
}

fn reply(
    token: *const smelt_am_token,
    handler: u8,
    args: *const u64,
    nargs: usize,
    data: Option<&[u8]>,
) -> smelt_status {
    guard(|| {
        // NULL is an argument mistake (as the header says of every handle), not a
        // token of another thread.
        if token.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "token is NULL");
        }
        let args = slice(args, nargs, "args")?;
        if handler == 0 {
            return Err(am_error(AmError::ReservedHandler));
        }
        if args.len() > smelt_am::MAX_ARGS {
            return Err(am_error(AmError::TooManyArgs { n: args.len() }));
        }
        RUNNING.with(|r| {
            let mut r = r.borrow_mut();
            let Some(p) = r.iter_mut().rev().find(|p| p.token == id(token)) else {
                return err(
                    SMELT_ERR_INVALID_HANDLE,
                    "the token is not that of a handler running on this thread (tokens are valid until their handler returns)",
                );
            };
            if !p.request {
                return Err(am_error(AmError::NotARequest));
            }
            if p.reply.is_some() {
                return Err(am_error(AmError::AlreadyReplied));
            }
            let mut words = [0u64; smelt_am::MAX_ARGS];
            words[..args.len()].copy_from_slice(args);
            p.reply = Some((handler, words, args.len(), data.map(<[u8]>::to_vec)));
            Ok(())
        })
    })
}

/// Replies to the request being handled (once; sent when the handler returns).
#[no_mangle]
pub extern "C" fn smelt_am_reply(
    token: *const smelt_am_token,
    handler: u8,
    args: *const u64,
    nargs: usize,
) -> smelt_status {
    reply(token, handler, args, nargs, None)
}

/// Replies with a data block.
#[no_mangle]
pub extern "C" fn smelt_am_reply_bulk(
    token: *const smelt_am_token,
    handler: u8,
    args: *const u64,
    nargs: usize,
    data: *const c_void,
    len: usize,
) -> smelt_status {
    match slice(data.cast::<u8>(), len, "data") {
        Ok(d) => reply(token, handler, args, nargs, Some(d)),
        Err(e) => guard(|| Err(e)),
    }
}

/// Runs the handlers of the messages waiting now; how many ran (`handled` may be NULL).
#[no_mangle]
pub extern "C" fn smelt_am_poll(ep: *mut smelt_am_endpoint, handled: *mut usize) -> smelt_status {
    guard(|| {
        let n = endpoint(ep, "endpoint")?.poll().map_err(am_error)?;
        if !handled.is_null() {
            out(handled, n, "handled")?;
        }
        Ok(())
    })
}

/// Waits at most `timeout_ms` for messages and runs their handlers.
#[no_mangle]
pub extern "C" fn smelt_am_wait(
    ep: *mut smelt_am_endpoint,
    timeout_ms: u64,
    handled: *mut usize,
) -> smelt_status {
    guard(|| {
        let n = endpoint(ep, "endpoint")?
            .wait(Duration::from_millis(timeout_ms))
            .map_err(am_error)?;
        if !handled.is_null() {
            out(handled, n, "handled")?;
        }
        Ok(())
    })
}

/// Runs handlers until every request of this endpoint was answered, for at most
/// `timeout_ms`.
#[no_mangle]
pub extern "C" fn smelt_am_quiesce(ep: *mut smelt_am_endpoint, timeout_ms: u64) -> smelt_status {
    guard(|| {
        endpoint(ep, "endpoint")?
            .quiesce(Duration::from_millis(timeout_ms))
            .map_err(am_error)
    })
}

/// This endpoint's tag (`tag`), and the tag it presents to `dest` (`dest_tag`; either
/// may be NULL).
#[no_mangle]
pub extern "C" fn smelt_am_tags(
    ep: *const smelt_am_endpoint,
    dest: usize,
    tag: *mut u64,
    dest_tag: *mut u64,
) -> smelt_status {
    guard(|| {
        let e = endpoint(ep, "endpoint")?;
        if !tag.is_null() {
            out(tag, e.tag(), "tag")?;
        }
        if !dest_tag.is_null() {
            let t = e.dest_tag(dest).ok_or_else(|| {
                am_error(AmError::NoSuchDestination {
                    dest,
                    size: e.size(),
                })
            })?;
            out(dest_tag, t, "dest_tag")?;
        }
        Ok(())
    })
}

/// Sets the tag this endpoint presents to `dest`.
#[no_mangle]
pub extern "C" fn smelt_am_set_dest_tag(
    ep: *mut smelt_am_endpoint,
    dest: usize,
    tag: u64,
) -> smelt_status {
    guard(|| {
        endpoint(ep, "endpoint")?
            .set_dest_tag(dest, tag)
            .map_err(am_error)
    })
}
