//! Messages between clients, replicas and the store's control member. A message's
//! kind and its number (a request id or a log slot) travel in the link's 64-bit tag;
//! the body holds the rest.

/// Message kinds (the tag's top byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// Client → home: body = key. Number: the client's request id.
    Get = 1,
    /// Client → home: body = [key length] key value. Number: request id.
    Set = 2,
    /// Home → client: body = [found] value. Number: request id.
    GetOk = 3,
    /// Home → client: empty. Number: request id.
    SetOk = 4,
    /// Home → client: body = [code] message. Number: request id.
    Error = 5,
    /// Home → leader → acceptor (or home → root): body = an entry. Number: unused.
    Propose = 6,
    /// Down the tree: body = an entry. Number: the log slot.
    Accept = 7,
    /// Up the tree: body = [] (all yes) or [0] (someone voted no). Number: every slot
    /// up to this one was delivered in the sender's subtree.
    Up = 8,
    /// Down the tree: every slot up to the number is decided (committed).
    Commit = 9,
    /// Down the tree (two-phase commit): the slot of the number is aborted.
    Abort = 10,
    /// Control → root: finish what was accepted, then stop. Down the tree: stop after
    /// deciding up to the number.
    Fin = 11,
    /// Control → a replica: stop at once (fail-stop, for tests and experiments).
    Crash = 12,
    /// New root → every surviving replica: a new view (ballot, root, leader, the
    /// replicas known to have stopped); answered with the replica's undecided slots.
    ViewChange = 13,
    /// Replica → new root: one undecided slot (number: ballot and slot), body an entry.
    StateEntry = 14,
    /// Replica → new root: the end of its state (number: ballot and its last delivered
    /// slot), body: its last decided slot.
    StateEnd = 15,
    /// Replica → a would-be root: its ballot is higher (body: that ballot).
    Nack = 16,
    /// New root → down the tree: the new view is in place; acknowledge again.
    Resume = 17,
}

impl Kind {
    fn from_u8(k: u8) -> Option<Kind> {
        Some(match k {
            1 => Kind::Get,
            2 => Kind::Set,
            3 => Kind::GetOk,
            4 => Kind::SetOk,
            5 => Kind::Error,
            6 => Kind::Propose,
            7 => Kind::Accept,
            8 => Kind::Up,
            9 => Kind::Commit,
            10 => Kind::Abort,
            11 => Kind::Fin,
            12 => Kind::Crash,
            13 => Kind::ViewChange,
            14 => Kind::StateEntry,
            15 => Kind::StateEnd,
            16 => Kind::Nack,
            17 => Kind::Resume,
            _ => return None,
        })
    }
}

/// The number bits of a tag (below the kind's byte).
pub(crate) const NUM_MASK: u64 = (1 << 56) - 1;

/// A tag: kind and number (56 bits).
#[inline]
pub(crate) fn tag(kind: Kind, num: u64) -> u64 {
    ((kind as u64) << 56) | (num & NUM_MASK)
}

/// Kind and number of a tag (None for an unknown kind).
#[inline]
pub(crate) fn untag(t: u64) -> Option<(Kind, u64)> {
    Kind::from_u8((t >> 56) as u8).map(|k| (k, t & NUM_MASK))
}

const SLOT_BITS: u32 = 40;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;

/// The number of a tree message: the low 16 bits of the view's ballot, and a slot.
#[inline]
pub(crate) fn bslot(ballot: u64, slot: u64) -> u64 {
    ((ballot & 0xffff) << SLOT_BITS) | (slot & SLOT_MASK)
}

/// Splits [`bslot`]'s number: (ballot's low 16 bits, slot).
#[inline]
pub(crate) fn split_bslot(num: u64) -> (u64, u64) {
    (num >> SLOT_BITS, num & SLOT_MASK)
}

/// Error codes of [`Kind::Error`].
pub(crate) const ERR_UNAVAILABLE: u8 = 1;
pub(crate) const ERR_REJECTED: u8 = 2;
pub(crate) const ERR_CLOSED: u8 = 3;

/// One set as ordered by agreement: who asked (client id and request id), key, value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// Client id.
    pub client: u32,
    /// The client's request id.
    pub seq: u64,
    /// Key.
    pub key: Vec<u8>,
    /// Value.
    pub value: Vec<u8>,
}

impl Entry {
    /// Appends the encoding: client (4), request id (8), key length (1), key, value.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.client.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.push(self.key.len() as u8);
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.value);
    }

    /// Decodes [`encode`](Entry::encode)'s bytes.
    pub fn decode(b: &[u8]) -> Option<Entry> {
        if b.len() < 13 {
            return None;
        }
        let client = u32::from_le_bytes(b[0..4].try_into().ok()?);
        let seq = u64::from_le_bytes(b[4..12].try_into().ok()?);
        let klen = b[12] as usize;
        let rest = &b[13..];
        if rest.len() < klen {
            return None;
        }
        Some(Entry {
            client,
            seq,
            key: rest[..klen].to_vec(),
            value: rest[klen..].to_vec(),
        })
    }

    /// Length of the encoding of an entry with the longest key and value.
    pub(crate) fn max_encoded(key_len: usize, value_len: usize) -> usize {
        13 + key_len + value_len
    }
}

/// A client's set body: key length, key, value.
pub(crate) fn encode_set(key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.push(key.len() as u8);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Splits a client's set body into key and value.
pub(crate) fn decode_set(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&klen, rest) = b.split_first()?;
    let klen = klen as usize;
    (rest.len() >= klen).then(|| rest.split_at(klen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let e = Entry {
            client: 7,
            seq: 1 << 40,
            key: b"k".to_vec(),
            value: vec![9; 16],
        };
        let mut b = Vec::new();
        e.encode(&mut b);
        assert_eq!(b.len(), Entry::max_encoded(1, 16));
        assert_eq!(Entry::decode(&b), Some(e));
        assert_eq!(Entry::decode(&b[..5]), None);
        for k in [Kind::Get, Kind::Crash, Kind::Up] {
            assert_eq!(untag(tag(k, 12345)), Some((k, 12345)));
        }
        assert_eq!(untag(0), None);
        assert_eq!(split_bslot(bslot(0x1_0007, 99)), (7, 99));
        let mut s = Vec::new();
        encode_set(b"key", b"", &mut s);
        assert_eq!(decode_set(&s), Some((&b"key"[..], &b""[..])));
        assert_eq!(decode_set(&[5, 1]), None);
    }
}
