//! Operation histories and a linearizability checker for them.
//!
//! A history is a list of operations, each with the client that called it, the key,
//! the value written or read, its call and return times on one monotonic clock, and
//! whether it completed. The store's benchmark writes one JSON object per line:
//!
//! ```text
//! {"client":3,"op":"set","key":1,"value":12884901889,"call_ns":1200,"return_ns":5400,"ok":true}
//! {"client":0,"op":"get","key":1,"value":null,"call_ns":900,"return_ns":1100,"ok":true}
//! ```
//!
//! # The checker
//!
//! Each key is an independent register (linearizability is local), checked in
//! O(n log n) by the Gibbons–Korach conditions for histories where every set writes a
//! value never written to that key before (so each get's value names the set it read,
//! or the initial `null`). Group each set with the gets that read it (a *cluster*; the
//! gets of `null` form the cluster of a virtual set at time −∞). Let `f` be the
//! earliest return and `s` the latest call in a cluster. The history is linearizable
//! iff
//!
//! 1. every get's value was written by a set of that key (or is `null`), and no get
//!    returns before the call of the set it read;
//! 2. no two *forward* clusters (`f < s`: the value must stay current from `f` to `s`)
//!    overlap;
//! 3. no *backward* cluster (`s ≤ f`: all its operations overlap in `[s, f]`) lies
//!    strictly inside a forward cluster's `(f, s)`.
//!
//! Operation `a` precedes `b` when `a` returned strictly before `b` was called.
//! A set that did not complete (`ok: false`: it timed out, or the store failed) may or
//! may not have taken effect: it is treated as returning at +∞ if some get read its
//! value, and left out otherwise. Gets that did not complete are left out.
//!
//! [`check_register_exhaustive`] searches every order (exponential; for small
//! histories) and is how the fast checker is tested.

use crate::KvsError;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The kind of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// A read.
    Get,
    /// A write.
    Set,
}

/// One operation of a history (one JSON line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryOp {
    /// The client that called it.
    pub client: usize,
    /// get or set.
    pub op: OpKind,
    /// The key (the store's benchmark uses 8-byte keys, read as a little-endian u64).
    pub key: u64,
    /// The value written, or read (`None`: the get found no value).
    pub value: Option<u64>,
    /// Call time, ns on the run's monotonic clock.
    pub call_ns: u64,
    /// Return time, ns on the same clock.
    pub return_ns: u64,
    /// Whether the operation completed.
    pub ok: bool,
}

impl HistoryOp {
    /// The JSON line (without the newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("plain struct")
    }
}

/// Reads a history written one JSON object per line (blank lines skipped). Values
/// and keys may be integers or strings of hex digits (with or without `0x`). Errors:
/// [`KvsError::History`], naming the line.
pub fn read_history(text: &str) -> Result<Vec<HistoryOp>, KvsError> {
    read_history_why(text).map_err(KvsError::History)
}

fn read_history_why(text: &str) -> Result<Vec<HistoryOp>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        let num = |x: &serde_json::Value, what: &str| -> Result<Option<u64>, String> {
            match x {
                serde_json::Value::Null => Ok(None),
                serde_json::Value::Number(n) => n
                    .as_u64()
                    .map(Some)
                    .ok_or_else(|| format!("line {}: {what} {n} is not a u64", i + 1)),
                serde_json::Value::String(s) => {
                    let h = s.trim_start_matches("0x");
                    u64::from_str_radix(h, 16)
                        .map(Some)
                        .map_err(|_| format!("line {}: {what} '{s}' is not hex", i + 1))
                }
                other => Err(format!("line {}: {what} {other} is not a number", i + 1)),
            }
        };
        let field = |name: &str| {
            v.get(name)
                .ok_or_else(|| format!("line {}: no field '{name}'", i + 1))
        };
        let op = match field("op")?.as_str() {
            Some("get") => OpKind::Get,
            Some("set") => OpKind::Set,
            _ => return Err(format!("line {}: op is neither \"get\" nor \"set\"", i + 1)),
        };
        let u = |name: &str| -> Result<u64, String> {
            num(field(name)?, name)?.ok_or_else(|| format!("line {}: {name} is null", i + 1))
        };
        out.push(HistoryOp {
            client: u("client")? as usize,
            op,
            key: u("key")?,
            value: num(field("value")?, "value")?,
            call_ns: u("call_ns")?,
            return_ns: u("return_ns")?,
            ok: field("ok")?
                .as_bool()
                .ok_or_else(|| format!("line {}: ok is not a boolean", i + 1))?,
        });
    }
    Ok(out)
}

/// One operation on one register, for the checkers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegOp {
    /// A write (else a read).
    pub write: bool,
    /// Value written or read (`None`: the initial value).
    pub value: Option<u64>,
    /// Call time.
    pub call: u64,
    /// Return time (`None`: never returned, a write whose outcome is unknown).
    pub ret: Option<u64>,
}

/// What the checker found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistorySummary {
    /// Keys checked.
    pub keys: usize,
    /// Operations checked (completed ones, and incomplete sets that were read).
    pub ops: usize,
    /// Incomplete operations left out.
    pub left_out: usize,
}

const NEG_INF: i128 = i128::MIN / 4;
const POS_INF: i128 = i128::MAX / 4;

/// Checks one register's history (values unique per write). `Err` says why it is not
/// linearizable.
pub fn check_register(ops: &[RegOp]) -> Result<(), KvsError> {
    register_why(ops).map_err(KvsError::NotLinearizable)
}

fn register_why(ops: &[RegOp]) -> Result<(), String> {
    // Writes by value.
    let mut writes: HashMap<u64, usize> = HashMap::new();
    for (i, o) in ops.iter().enumerate() {
        if o.write {
            let Some(v) = o.value else {
                return Err(format!("operation {i} writes no value"));
            };
            if writes.insert(v, i).is_some() {
                return Err(format!(
                    "value {v} is written twice: this checker needs unique values"
                ));
            }
        }
    }
    // Clusters: (earliest return, latest call), keyed by value (None: initial).
    let mut clusters: HashMap<Option<u64>, (i128, i128)> = HashMap::new();
    let ret = |o: &RegOp| o.ret.map_or(POS_INF, |r| r as i128);
    for o in ops.iter().filter(|o| o.write) {
        clusters.insert(o.value, (ret(o), o.call as i128));
    }
    for (i, o) in ops.iter().enumerate().filter(|(_, o)| !o.write) {
        let r = ret(o);
        match o.value {
            None => {
                let c = clusters.entry(None).or_insert((NEG_INF, NEG_INF));
                c.1 = c.1.max(o.call as i128);
            }
            Some(v) => {
                let Some(&w) = writes.get(&v) else {
                    return Err(format!("get {i} read {v}, which no set wrote"));
                };
                if r < ops[w].call as i128 {
                    return Err(format!(
                        "get {i} (returned at {r}) read {v}, written by a set called later (at {})",
                        ops[w].call
                    ));
                }
                let c = clusters
                    .get_mut(&Some(v))
                    .expect("every write has a cluster");
                c.0 = c.0.min(r);
                c.1 = c.1.max(o.call as i128);
            }
        }
    }
    let mut forward: Vec<(i128, i128, Option<u64>)> = Vec::new();
    let mut backward: Vec<(i128, i128, Option<u64>)> = Vec::new();
    for (&v, &(f, s)) in &clusters {
        if f < s {
            forward.push((f, s, v));
        } else {
            backward.push((s, f, v));
        }
    }
    forward.sort();
    let show = |v: Option<u64>| v.map_or("the initial value".to_string(), |v| format!("value {v}"));
    for w in forward.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(format!(
                "{} must stay current from {} to {} and {} from {} to {}: they overlap",
                show(w[0].2),
                fmt_t(w[0].0),
                fmt_t(w[0].1),
                show(w[1].2),
                fmt_t(w[1].0),
                fmt_t(w[1].1)
            ));
        }
    }
    for &(s, f, v) in &backward {
        // The forward zone that starts last before s.
        let k = forward.partition_point(|z| z.0 < s);
        if k > 0 {
            let z = forward[k - 1];
            if f < z.1 {
                return Err(format!(
                    "{} must take effect between {} and {}, while {} must stay current from {} to {}",
                    show(v),
                    fmt_t(s),
                    fmt_t(f),
                    show(z.2),
                    fmt_t(z.0),
                    fmt_t(z.1)
                ));
            }
        }
    }
    Ok(())
}

fn fmt_t(t: i128) -> String {
    if t <= NEG_INF {
        "the start".into()
    } else if t >= POS_INF {
        "never".into()
    } else {
        format!("{t} ns")
    }
}

/// Checks one register by trying every order (exponential: for histories of up to
/// about 20 operations). Writes that never returned may also never take effect.
pub fn check_register_exhaustive(ops: &[RegOp]) -> Result<(), KvsError> {
    register_exhaustive_why(ops).map_err(KvsError::NotLinearizable)
}

fn register_exhaustive_why(ops: &[RegOp]) -> Result<(), String> {
    let n = ops.len();
    if n > 24 {
        return Err(format!(
            "{n} operations: too many for the exhaustive checker"
        ));
    }
    let ret = |o: &RegOp| o.ret.map_or(u128::MAX, |r| r as u128);
    let mut seen = std::collections::HashSet::new();
    // State: done mask, current value.
    fn go(
        ops: &[RegOp],
        done: u32,
        cur: Option<u64>,
        seen: &mut std::collections::HashSet<(u32, Option<u64>)>,
        ret: &dyn Fn(&RegOp) -> u128,
    ) -> bool {
        let n = ops.len();
        // Done when every completed op is linearized (unfinished writes may be left).
        if (0..n).all(|i| done & (1 << i) != 0 || ops[i].ret.is_none()) {
            return true;
        }
        if !seen.insert((done, cur)) {
            return false;
        }
        // The earliest return among the remaining ops: nothing called after it may go
        // first.
        let min_ret = (0..n)
            .filter(|&i| done & (1 << i) == 0)
            .map(|i| ret(&ops[i]))
            .min()
            .unwrap_or(u128::MAX);
        for i in 0..n {
            if done & (1 << i) != 0 || ops[i].call as u128 > min_ret {
                continue;
            }
            let o = &ops[i];
            if o.write {
                if go(ops, done | (1 << i), o.value, seen, ret) {
                    return true;
                }
            } else if o.value == cur && go(ops, done | (1 << i), cur, seen, ret) {
                return true;
            }
        }
        false
    }
    if go(ops, 0, None, &mut seen, &ret) {
        Ok(())
    } else {
        Err("no order of the operations explains what the gets read".into())
    }
}

/// Checks a whole history, key by key (see the [module documentation](self)).
pub fn check_history(ops: &[HistoryOp]) -> Result<HistorySummary, KvsError> {
    history_why(ops).map_err(KvsError::NotLinearizable)
}

fn history_why(ops: &[HistoryOp]) -> Result<HistorySummary, String> {
    let mut by_key: HashMap<u64, Vec<(usize, RegOp)>> = HashMap::new();
    let mut left_out = 0;
    let read_values: std::collections::HashSet<(u64, u64)> = ops
        .iter()
        .filter(|o| o.op == OpKind::Get && o.ok)
        .filter_map(|o| o.value.map(|v| (o.key, v)))
        .collect();
    for (i, o) in ops.iter().enumerate() {
        if o.ok && o.return_ns < o.call_ns {
            return Err(format!("operation {i} returns before it is called"));
        }
        let r = match (o.op, o.ok) {
            (_, true) => RegOp {
                write: o.op == OpKind::Set,
                value: o.value,
                call: o.call_ns,
                ret: Some(o.return_ns),
            },
            (OpKind::Set, false) => {
                let Some(v) = o.value else {
                    return Err(format!("set {i} has no value"));
                };
                if !read_values.contains(&(o.key, v)) {
                    left_out += 1;
                    continue;
                }
                RegOp {
                    write: true,
                    value: Some(v),
                    call: o.call_ns,
                    ret: None,
                }
            }
            (OpKind::Get, false) => {
                left_out += 1;
                continue;
            }
        };
        by_key.entry(o.key).or_default().push((i, r));
    }
    let mut n = 0;
    let mut keys: Vec<&u64> = by_key.keys().collect();
    keys.sort();
    for k in keys {
        let v = &by_key[k];
        n += v.len();
        let regs: Vec<RegOp> = v.iter().map(|x| x.1).collect();
        register_why(&regs).map_err(|e| format!("key {k}: {e}"))?;
    }
    Ok(HistorySummary {
        keys: by_key.len(),
        ops: n,
        left_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(v: u64, call: u64, ret: u64) -> RegOp {
        RegOp {
            write: true,
            value: Some(v),
            call,
            ret: Some(ret),
        }
    }
    fn r(v: Option<u64>, call: u64, ret: u64) -> RegOp {
        RegOp {
            write: false,
            value: v,
            call,
            ret: Some(ret),
        }
    }

    fn both(ops: &[RegOp]) -> (bool, bool) {
        (
            check_register(ops).is_ok(),
            check_register_exhaustive(ops).is_ok(),
        )
    }

    #[test]
    fn known_linearizable() {
        for h in [
            vec![],
            vec![r(None, 0, 1)],
            vec![w(1, 0, 1), r(Some(1), 2, 3)],
            // Concurrent read may see either.
            vec![w(1, 0, 10), r(None, 1, 2), r(Some(1), 3, 4)],
            vec![w(1, 0, 10), r(Some(1), 1, 2), w(2, 3, 4), r(Some(2), 5, 6)],
            // Touching intervals are concurrent.
            vec![w(1, 0, 5), r(None, 5, 6)],
            // A write overwritten while a slow read saw the old one.
            vec![w(1, 0, 1), w(2, 2, 3), r(Some(1), 0, 4)],
        ] {
            assert_eq!(both(&h), (true, true), "{h:?}");
        }
    }

    #[test]
    fn known_not_linearizable() {
        for h in [
            // Stale read after the write returned.
            vec![w(1, 0, 1), r(None, 2, 3)],
            // New then old (read inversion).
            vec![w(1, 0, 10), r(Some(1), 1, 2), r(None, 3, 4)],
            // Read of a value before its write was called.
            vec![r(Some(1), 0, 1), w(1, 2, 3)],
            // Two values current at once.
            vec![
                w(1, 0, 1),
                w(2, 2, 3),
                r(Some(1), 4, 5),
                r(Some(2), 6, 7),
                r(Some(1), 8, 9),
            ],
            // A write (with its read) inside another value's must-be-current span.
            vec![w(1, 0, 1), w(2, 3, 4), r(Some(2), 3, 4), r(Some(1), 5, 6)],
            // Read of a value nobody wrote.
            vec![w(1, 0, 1), r(Some(7), 2, 3)],
            // Lost update seen by two readers in different orders.
            vec![
                w(1, 0, 10),
                w(2, 0, 10),
                r(Some(1), 1, 2),
                r(Some(2), 3, 4),
                r(Some(1), 5, 6),
            ],
        ] {
            assert_eq!(both(&h), (false, false), "{h:?}");
        }
    }

    #[test]
    fn unfinished_writes() {
        let lost = RegOp {
            write: true,
            value: Some(1),
            call: 0,
            ret: None,
        };
        // Read later: it took effect; never read: it may not have.
        assert!(check_register(&[lost, r(Some(1), 5, 6)]).is_ok());
        assert!(check_register_exhaustive(&[lost, r(Some(1), 5, 6)]).is_ok());
        assert!(check_register_exhaustive(&[lost, r(None, 5, 6)]).is_ok());
        // Took effect, then a read of the initial value.
        assert!(check_register(&[lost, r(Some(1), 5, 6), r(None, 7, 8)]).is_err());
        assert!(check_register_exhaustive(&[lost, r(Some(1), 5, 6), r(None, 7, 8)]).is_err());
        // Through the history interface: an unread failed set is left out.
        let h = vec![
            HistoryOp {
                client: 0,
                op: OpKind::Set,
                key: 1,
                value: Some(9),
                call_ns: 0,
                return_ns: 100,
                ok: false,
            },
            HistoryOp {
                client: 1,
                op: OpKind::Get,
                key: 1,
                value: None,
                call_ns: 200,
                return_ns: 300,
                ok: true,
            },
        ];
        let s = check_history(&h).unwrap();
        assert_eq!((s.keys, s.ops, s.left_out), (1, 1, 1));
    }

    #[test]
    fn duplicate_values_are_refused() {
        assert!(check_register(&[w(1, 0, 1), w(1, 2, 3)])
            .unwrap_err()
            .to_string()
            .contains("twice"));
    }

    /// The fast checker agrees with the exhaustive search on random small histories
    /// (coarse times, so that ties and overlaps are common).
    #[test]
    fn agrees_with_exhaustive_search() {
        let mut x = 0x9e3779b97f4a7c15u64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let (mut ok, mut bad) = (0, 0);
        for _ in 0..20000 {
            let n = 1 + next(8) as usize;
            let mut ops = Vec::new();
            let mut nw = 0;
            for _ in 0..n {
                let call = next(12);
                let ret = call + next(6);
                if next(2) == 0 {
                    nw += 1;
                    let mut op = w(nw, call, ret);
                    if next(8) == 0 {
                        // A set whose outcome is unknown.
                        op.ret = None;
                    }
                    ops.push(op);
                } else {
                    let v = next(nw + 2);
                    ops.push(r(
                        if v == 0 { None } else { Some(v.min(nw.max(1))) },
                        call,
                        ret,
                    ));
                }
            }
            // Reads of values no write wrote make both fail; keep them rare.
            if ops
                .iter()
                .any(|o| !o.write && o.value.is_some_and(|v| v > nw))
            {
                continue;
            }
            let (a, b) = both(&ops);
            assert_eq!(a, b, "fast {a}, exhaustive {b}: {ops:?}");
            if a {
                ok += 1;
            } else {
                bad += 1;
            }
        }
        // Both kinds were exercised.
        assert!(ok > 1000 && bad > 1000, "{ok} linearizable, {bad} not");
    }

    #[test]
    fn history_lines_round_trip() {
        let op = HistoryOp {
            client: 3,
            op: OpKind::Set,
            key: 1,
            value: Some(12884901889),
            call_ns: 1200,
            return_ns: 5400,
            ok: true,
        };
        let line = op.to_json();
        assert_eq!(
            line,
            r#"{"client":3,"op":"set","key":1,"value":12884901889,"call_ns":1200,"return_ns":5400,"ok":true}"#
        );
        let get = r#"{"client":0,"op":"get","key":"0x1","value":null,"call_ns":9,"return_ns":11,"ok":true}"#;
        let h = read_history(&format!("{line}\n\n{get}\n")).unwrap();
        assert_eq!(h[0], op);
        assert_eq!((h[1].key, h[1].value, h[1].op), (1, None, OpKind::Get));
        assert!(read_history("{\"op\":\"put\"}").is_err());
        assert!(read_history("not json").is_err());
    }
}
