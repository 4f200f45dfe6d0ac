//! Global arrays (`smelt-global`) from C: `smelt_global_*` in `smelt.h`.
//!
//! An array is made for the threads of the C program (`smelt_global_create`: element
//! type, length, number of member threads); any thread may use its handle at once. The
//! entry points are typed (`smelt_global_get_u64`, `..._f64`, ...): calling one of
//! another type than the array's is `SMELT_ERR_INVALID_ARGUMENT` with a message naming
//! both types, as is an index range outside the array.

use crate::handle::{self, Kind, Object};
use crate::{
    err, guard, id, out, slice, smelt_status, Error, Res, SMELT_ERR_INVALID_ARGUMENT,
    SMELT_ERR_RUNTIME, SMELT_ERR_TIMEOUT,
};
use ::smelt_global::{
    threads, AccumulateOp, ElemType, Element, GlobalArray, GlobalConfig, GlobalError,
};
use smelt_runtime::World;
use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

/// A global array (opaque to C: a handle, never an address).
#[repr(C)]
pub struct smelt_global {
    _opaque: [u8; 0],
}

/// Element type `uint64_t`.
pub const SMELT_GLOBAL_U64: c_int = 1;
/// Element type `int64_t`.
pub const SMELT_GLOBAL_I64: c_int = 2;
/// Element type `double`.
pub const SMELT_GLOBAL_F64: c_int = 3;
/// Element type `uint32_t`.
pub const SMELT_GLOBAL_U32: c_int = 4;
/// Element type `int32_t`.
pub const SMELT_GLOBAL_I32: c_int = 5;

/// Accumulate: sum.
pub const SMELT_GLOBAL_SUM: c_int = 0;
/// Accumulate: minimum.
pub const SMELT_GLOBAL_MIN: c_int = 1;
/// Accumulate: maximum.
pub const SMELT_GLOBAL_MAX: c_int = 2;
/// Accumulate: replace (an atomic swap).
pub const SMELT_GLOBAL_REPLACE: c_int = 3;

/// The array behind a handle, of one of the element types.
pub(crate) enum GlobalObj {
    U64(GlobalArray<u64>),
    I64(GlobalArray<i64>),
    F64(GlobalArray<f64>),
    U32(GlobalArray<u32>),
    I32(GlobalArray<i32>),
}

fn global_error(e: GlobalError) -> Error {
    let code = match &e {
        GlobalError::OutOfRange { .. }
        | GlobalError::WrongType { .. }
        | GlobalError::Invalid(_) => SMELT_ERR_INVALID_ARGUMENT,
        GlobalError::Timeout { .. } => SMELT_ERR_TIMEOUT,
        GlobalError::World(w) => crate::world::world_error(w.clone()).0,
        _ => SMELT_ERR_RUNTIME,
    };
    Error(code, e.to_string())
}

fn array_of(g: *const smelt_global) -> Res<Arc<GlobalObj>> {
    handle::shared(id(g), Kind::Global, "array", |o| match o {
        Object::Global(a) => a.clone(),
        _ => unreachable!("checked to be a global array"),
    })
}

/// Runs `f` on the array of `g` whatever its type (for the untyped calls).
macro_rules! any {
    ($obj:expr, $a:ident => $body:expr) => {
        match &*$obj {
            GlobalObj::U64($a) => $body,
            GlobalObj::I64($a) => $body,
            GlobalObj::F64($a) => $body,
            GlobalObj::U32($a) => $body,
            GlobalObj::I32($a) => $body,
        }
    };
}

/// The array that `$make` (an expression generic in the element type, whose error is
/// returned) makes for the C element type `$ty`, as a [`GlobalObj`]; an unknown type
/// is an error.
macro_rules! new_obj {
    ($ty:expr, $make:expr) => {
        match ElemType::from_id($ty.max(0) as u32) {
            Some(ElemType::U64) => GlobalObj::U64($make?),
            Some(ElemType::I64) => GlobalObj::I64($make?),
            Some(ElemType::F64) => GlobalObj::F64($make?),
            Some(ElemType::U32) => GlobalObj::U32($make?),
            Some(ElemType::I32) => GlobalObj::I32($make?),
            None => {
                return err(
                    SMELT_ERR_INVALID_ARGUMENT,
                    format!(
                        "element type {} (SMELT_GLOBAL_U64 .. SMELT_GLOBAL_I32: 1 to 5)",
                        $ty
                    ),
                )
            }
        }
    };
}

impl GlobalObj {
    fn elem_type(&self) -> ElemType {
        any!(self, a => a.elem_type())
    }
}

/// The element type's C name (for messages).
fn c_name(t: ElemType) -> &'static str {
    match t {
        ElemType::U64 => "uint64_t (SMELT_GLOBAL_U64)",
        ElemType::I64 => "int64_t (SMELT_GLOBAL_I64)",
        ElemType::F64 => "double (SMELT_GLOBAL_F64)",
        ElemType::U32 => "uint32_t (SMELT_GLOBAL_U32)",
        ElemType::I32 => "int32_t (SMELT_GLOBAL_I32)",
    }
}

fn op_of(op: c_int) -> Res<AccumulateOp> {
    Ok(match op {
        SMELT_GLOBAL_SUM => AccumulateOp::Sum,
        SMELT_GLOBAL_MIN => AccumulateOp::Min,
        SMELT_GLOBAL_MAX => AccumulateOp::Max,
        SMELT_GLOBAL_REPLACE => AccumulateOp::Replace,
        o => {
            return err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("accumulate operation {o} (0 sum, 1 min, 2 max, 3 replace)"),
            )
        }
    })
}

/// Makes an array of `len` elements of `type` (`SMELT_GLOBAL_U64` ...), spread in
/// blocks over `members` threads (the threads that meet at `smelt_global_barrier`);
/// barriers wait at most `timeout_ms` (0: 30 s).
#[no_mangle]
pub extern "C" fn smelt_global_create(
    r#type: c_int,
    len: u64,
    members: usize,
    timeout_ms: u64,
    array: *mut *mut smelt_global,
) -> smelt_status {
    guard(|| {
        if array.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "array is NULL");
        }
        let mut cfg = GlobalConfig::default();
        if timeout_ms > 0 {
            cfg.link.timeout = Duration::from_millis(timeout_ms);
        }
        fn first<T: Element>(v: Result<Vec<GlobalArray<T>>, GlobalError>) -> Res<GlobalArray<T>> {
            v.map_err(global_error)?
                .into_iter()
                .next()
                .ok_or_else(|| Error(SMELT_ERR_INVALID_ARGUMENT, "no members".into()))
        }
        let obj = new_obj!(r#type, first(threads(len, members, cfg)));
        crate::new_handle(array, Object::Global(Arc::new(obj)), "array")
    })
}

/// A collective call: this member's handle on a new array of `len` elements of
/// `type`, spread in blocks over every member of `world` (member `m` owns block `m`);
/// barriers wait at most `timeout_ms` (0: 30 s).
#[no_mangle]
pub extern "C" fn smelt_world_global(
    world: *mut crate::smelt_world,
    r#type: c_int,
    len: u64,
    timeout_ms: u64,
    array: *mut *mut smelt_global,
) -> smelt_status {
    guard(|| {
        let w = crate::world::world_of(world)?;
        if array.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "array is NULL");
        }
        let mut cfg = GlobalConfig::default();
        if timeout_ms > 0 {
            cfg.link.timeout = Duration::from_millis(timeout_ms);
        }
        fn make<T: Element>(w: &World, len: u64, cfg: GlobalConfig) -> Res<GlobalArray<T>> {
            GlobalArray::from_world(w, len, cfg).map_err(global_error)
        }
        let slot = handle::reserve()?;
        let obj = new_obj!(r#type, make(&w, len, cfg));
        let h = slot.fill(Object::Global(Arc::new(obj)));
        out(array, std::ptr::without_provenance_mut(h), "array")
    })
}

/// The array's element type (`SMELT_GLOBAL_*`), length and number of members.
#[no_mangle]
pub extern "C" fn smelt_global_info(
    array: *const smelt_global,
    r#type: *mut c_int,
    len: *mut u64,
    members: *mut usize,
) -> smelt_status {
    guard(|| {
        let a = array_of(array)?;
        out(r#type, a.elem_type() as c_int, "type")?;
        out(len, any!(a, x => x.len()), "len")?;
        out(members, any!(a, x => x.members()), "members")
    })
}

/// The indices member `member` owns: `[*start, *end)`.
#[no_mangle]
pub extern "C" fn smelt_global_block(
    array: *const smelt_global,
    member: usize,
    start: *mut u64,
    end: *mut u64,
) -> smelt_status {
    guard(|| {
        let a = array_of(array)?;
        let layout = any!(a, x => x.layout());
        if member >= layout.members() {
            return err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("member {member} of an array over {}", layout.members()),
            );
        }
        let b = layout.block(member);
        out(start, b.start, "start")?;
        out(end, b.end, "end")
    })
}

/// The write-back fence (SD_fence): this thread's writes are complete and ordered
/// before its later operations.
#[no_mangle]
pub extern "C" fn smelt_global_fence_writeback(array: *mut smelt_global) -> smelt_status {
    guard(|| {
        let a = array_of(array)?;
        any!(a, x => x.fence_writeback()).map_err(global_error)
    })
}

/// The invalidate fence (SI_fence): later reads see every write made visible before
/// the synchronisation this thread observed.
#[no_mangle]
pub extern "C" fn smelt_global_fence_invalidate(array: *mut smelt_global) -> smelt_status {
    guard(|| {
        let a = array_of(array)?;
        any!(a, x => x.fence_invalidate()).map_err(global_error)
    })
}

/// Waits until `members` threads reached the barrier (at most the array's timeout:
/// `SMELT_ERR_TIMEOUT`, after which the array's barrier cannot be used any more).
#[no_mangle]
pub extern "C" fn smelt_global_barrier(array: *mut smelt_global) -> smelt_status {
    guard(|| {
        let a = array_of(array)?;
        any!(a, x => x.barrier()).map_err(global_error)
    })
}

/// Frees the array's handle (threads still inside a call finish it first).
#[no_mangle]
pub extern "C" fn smelt_global_free(array: *mut smelt_global) -> smelt_status {
    guard(|| {
        if array.is_null() {
            return Ok(());
        }
        let obj = handle::remove(
            id(array),
            Kind::Global,
            "array",
            handle::Wait::Block,
            |_| Ok(()),
        )?;
        drop(obj);
        Ok(())
    })
}

/// The typed entry points of one element type.
macro_rules! typed {
    ($t:ty, $variant:ident, $as:ident, $get:ident, $put:ident, $acc:ident, $fetch:ident) => {
        fn $as(a: &GlobalObj) -> Res<&GlobalArray<$t>> {
            match a {
                GlobalObj::$variant(x) => Ok(x),
                other => err(
                    SMELT_ERR_INVALID_ARGUMENT,
                    format!(
                        "the array holds {} elements, not {}",
                        c_name(other.elem_type()),
                        c_name(<$t as Element>::TYPE)
                    ),
                ),
            }
        }

        /// Reads `count` elements from `index` on into `out`.
        #[no_mangle]
        pub extern "C" fn $get(
            array: *mut smelt_global,
            index: u64,
            out_: *mut $t,
            count: usize,
        ) -> smelt_status {
            guard(|| {
                let obj = array_of(array)?;
                let a = $as(&obj)?;
                if count > 0 && out_.is_null() {
                    return err(SMELT_ERR_INVALID_ARGUMENT, "out is NULL");
                }
                let mut buf = vec![<$t as Element>::from_word(0); count];
                a.get(index, &mut buf).map_err(global_error)?;
                for (i, v) in buf.into_iter().enumerate() {
                    out(out_.wrapping_add(i), v, "out")?;
                }
                Ok(())
            })
        }

        /// Writes the `count` elements of `data` from `index` on.
        #[no_mangle]
        pub extern "C" fn $put(
            array: *mut smelt_global,
            index: u64,
            data: *const $t,
            count: usize,
        ) -> smelt_status {
            guard(|| {
                let obj = array_of(array)?;
                let a = $as(&obj)?;
                let d = slice(data, count, "data")?;
                a.put(index, d).map_err(global_error)
            })
        }

        /// Combines the `count` elements of `data` into the elements from `index` on
        /// with `op` (`SMELT_GLOBAL_SUM` ...), each element atomically.
        #[no_mangle]
        pub extern "C" fn $acc(
            array: *mut smelt_global,
            index: u64,
            data: *const $t,
            count: usize,
            op: c_int,
        ) -> smelt_status {
            guard(|| {
                let obj = array_of(array)?;
                let a = $as(&obj)?;
                let op = op_of(op)?;
                let d = slice(data, count, "data")?;
                a.accumulate(index, d, op).map_err(global_error)
            })
        }

        /// Combines `value` into element `index` with `op`, atomically; its value
        /// before goes to `*old` (if `old` is not NULL).
        #[no_mangle]
        pub extern "C" fn $fetch(
            array: *mut smelt_global,
            index: u64,
            value: $t,
            op: c_int,
            old: *mut $t,
        ) -> smelt_status {
            guard(|| {
                let obj = array_of(array)?;
                let a = $as(&obj)?;
                let op = op_of(op)?;
                let v = a.fetch_accumulate(index, value, op).map_err(global_error)?;
                if !old.is_null() {
                    out(old, v, "old")?;
                }
                Ok(())
            })
        }
    };
}

typed!(
    u64,
    U64,
    as_u64,
    smelt_global_get_u64,
    smelt_global_put_u64,
    smelt_global_accumulate_u64,
    smelt_global_fetch_accumulate_u64
);
typed!(
    i64,
    I64,
    as_i64,
    smelt_global_get_i64,
    smelt_global_put_i64,
    smelt_global_accumulate_i64,
    smelt_global_fetch_accumulate_i64
);
typed!(
    f64,
    F64,
    as_f64,
    smelt_global_get_f64,
    smelt_global_put_f64,
    smelt_global_accumulate_f64,
    smelt_global_fetch_accumulate_f64
);
typed!(
    u32,
    U32,
    as_u32,
    smelt_global_get_u32,
    smelt_global_put_u32,
    smelt_global_accumulate_u32,
    smelt_global_fetch_accumulate_u32
);
typed!(
    i32,
    I32,
    as_i32,
    smelt_global_get_i32,
    smelt_global_put_i32,
    smelt_global_accumulate_i32,
    smelt_global_fetch_accumulate_i32
);
