//! How an active message travels: the link tag says what the message is, the payload
//! carries the words and the data.
//!
//! Link tag (64 bits):
//!
//! | bits  | field |
//! |-------|-------|
//! | 0–7   | handler index |
//! | 8–11  | number of argument words (0–8) |
//! | 12–13 | kind: request, reply, returned, batch |
//! | 14    | bulk (the message has a data block) |
//! | 15    | for a returned message: the returned message was a request |
//! | 16    | first chunk of the message |
//! | 17    | last chunk of the message |
//! | 24–31 | for a returned message: why ([`Reason`]) |
//! | 48–63 | [`MAGIC`]: a message that is not an active message is refused |
//!
//! Payload of a message's first chunk: `[key]` (requests only: the destination
//! endpoint's tag the sender presents), the argument words, then, for a bulk message
//! in several chunks, its total data length; then the first part of the data. Later
//! chunks carry data only. A returned message carries the returned message's argument
//! words and its data length (the data itself is not sent back).
//!
//! A **batch** (kind 3, handler 0, no argument words, one chunk) carries several short
//! replies to one endpoint in one link message: the replies a poll's handlers made
//! while more requests from that endpoint were waiting. Its payload is the replies one
//! after the other, each its own tag word (a short reply's, as above) then its
//! argument words; the receiver handles them in order, as if they had come one by
//! one. One link message instead of one per reply: one slot's cache line carries up
//! to six replies.

/// Most argument words a message carries.
pub const MAX_ARGS: usize = 8;
/// Marks a link message as an active message of this version.
pub const MAGIC: u64 = 0xA3E1;

const HANDLER: u64 = 0xff;
const NARGS_SHIFT: u32 = 8;
const KIND_SHIFT: u32 = 12;
const BULK: u64 = 1 << 14;
const WAS_REQUEST: u64 = 1 << 15;
/// First chunk.
pub const FIRST: u64 = 1 << 16;
/// Last chunk.
pub const LAST: u64 = 1 << 17;
const REASON_SHIFT: u32 = 24;
const MAGIC_SHIFT: u32 = 48;

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request: its handler must reply.
    Request,
    /// A reply to a request.
    Reply,
    /// A message that came back to its sender (see [`Reason`]).
    Returned,
    /// Several short replies in one link message (see the [module documentation](self)).
    Batch,
}

/// Why a message came back to its sender's handler 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Reason {
    /// The request presented a tag other than the destination endpoint's.
    WrongTag = 1,
    /// No handler is registered at that index at the destination.
    UnknownHandler = 2,
    /// The request's handler returned without replying.
    NoReply = 3,
    /// The handler panicked.
    HandlerPanicked = 4,
    /// A reply arrived from an endpoint with no request of ours outstanding.
    UnexpectedReply = 5,
    /// The message is larger than the destination accepts.
    TooLarge = 6,
}

impl Reason {
    fn from_u8(v: u8) -> Option<Reason> {
        Some(match v {
            1 => Reason::WrongTag,
            2 => Reason::UnknownHandler,
            3 => Reason::NoReply,
            4 => Reason::HandlerPanicked,
            5 => Reason::UnexpectedReply,
            6 => Reason::TooLarge,
            _ => return None,
        })
    }

    /// A short description.
    pub fn describe(self) -> &'static str {
        match self {
            Reason::WrongTag => "the destination's tag was wrong",
            Reason::UnknownHandler => "no handler at that index at the destination",
            Reason::NoReply => "the request's handler did not reply",
            Reason::HandlerPanicked => "the handler panicked",
            Reason::UnexpectedReply => "a reply to no outstanding request",
            Reason::TooLarge => "the message is larger than the destination accepts",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// A decoded link tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Handler index.
    pub handler: u8,
    /// Argument words.
    pub nargs: usize,
    /// What it is.
    pub kind: Kind,
    /// Carries data.
    pub bulk: bool,
    /// First chunk.
    pub first: bool,
    /// Last chunk.
    pub last: bool,
    /// Returned messages: why, and whether a request came back.
    pub returned: Option<(Reason, bool)>,
}

/// Encodes a tag.
#[inline]
pub fn tag(kind: Kind, handler: u8, nargs: usize, bulk: bool, chunk: u64) -> u64 {
    debug_assert!(nargs <= MAX_ARGS);
    let k = match kind {
        Kind::Request => 0,
        Kind::Reply => 1,
        Kind::Returned => 2,
        Kind::Batch => 3,
    };
    (MAGIC << MAGIC_SHIFT)
        | handler as u64
        | ((nargs as u64) << NARGS_SHIFT)
        | (k << KIND_SHIFT)
        | if bulk { BULK } else { 0 }
        | chunk
}

/// Encodes the tag of a returned message.
pub fn returned_tag(handler: u8, nargs: usize, reason: Reason, was_request: bool) -> u64 {
    tag(Kind::Returned, handler, nargs, false, FIRST | LAST)
        | ((reason as u64) << REASON_SHIFT)
        | if was_request { WAS_REQUEST } else { 0 }
}

/// Decodes a tag; `None` if it is not an active message of this version.
#[inline]
pub fn decode(t: u64) -> Option<Head> {
    if t >> MAGIC_SHIFT != MAGIC {
        return None;
    }
    let nargs = ((t >> NARGS_SHIFT) & 0xf) as usize;
    if nargs > MAX_ARGS {
        return None;
    }
    let kind = match (t >> KIND_SHIFT) & 3 {
        0 => Kind::Request,
        1 => Kind::Reply,
        2 => Kind::Returned,
        _ => Kind::Batch,
    };
    if kind == Kind::Batch
        && (t & (HANDLER | BULK | (0xf << NARGS_SHIFT)) != 0 || t & (FIRST | LAST) != FIRST | LAST)
    {
        return None;
    }
    let returned = if kind == Kind::Returned {
        let r = Reason::from_u8(((t >> REASON_SHIFT) & 0xff) as u8)?;
        Some((r, t & WAS_REQUEST != 0))
    } else {
        None
    };
    Some(Head {
        handler: (t & HANDLER) as u8,
        nargs,
        kind,
        bulk: t & BULK != 0,
        first: t & FIRST != 0,
        last: t & LAST != 0,
        returned,
    })
}

/// The kind, handler and argument words of a whole short request or reply (one link
/// message, no data): the messages of the fast path, told apart from every other tag
/// with one compare; `None` for the others (which [`decode`] reads).
#[inline(always)]
pub fn short(t: u64) -> Option<(Kind, u8, usize)> {
    // What may vary: the handler, the argument count and the kind's low bit (request
    // or reply); the rest is the magic and both chunk flags.
    const VARIES: u64 = HANDLER | (0xf << NARGS_SHIFT) | (1 << KIND_SHIFT);
    if t & !VARIES != (MAGIC << MAGIC_SHIFT) | FIRST | LAST {
        return None;
    }
    let nargs = ((t >> NARGS_SHIFT) & 0xf) as usize;
    if nargs > MAX_ARGS {
        return None;
    }
    let kind = if t & (1 << KIND_SHIFT) == 0 {
        Kind::Request
    } else {
        Kind::Reply
    };
    Some((kind, (t & HANDLER) as u8, nargs))
}

/// The tag of a batch of replies.
pub fn batch_tag() -> u64 {
    tag(Kind::Batch, 0, 0, false, FIRST | LAST)
}

/// Reads little-endian word `i` of `b`.
#[inline]
pub fn word(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        for kind in [Kind::Request, Kind::Reply] {
            for nargs in 0..=MAX_ARGS {
                for &(bulk, chunk) in &[
                    (false, FIRST | LAST),
                    (true, FIRST),
                    (true, 0),
                    (true, LAST),
                ] {
                    let h = decode(tag(kind, 200, nargs, bulk, chunk)).unwrap();
                    assert_eq!(
                        (h.kind, h.handler, h.nargs, h.bulk),
                        (kind, 200, nargs, bulk)
                    );
                    assert_eq!((h.first, h.last), (chunk & FIRST != 0, chunk & LAST != 0));
                    assert_eq!(h.returned, None);
                }
            }
        }
        let h = decode(returned_tag(7, 3, Reason::NoReply, true)).unwrap();
        assert_eq!(h.kind, Kind::Returned);
        assert_eq!(h.returned, Some((Reason::NoReply, true)));
        assert_eq!((h.handler, h.nargs), (7, 3));
        let h = decode(batch_tag()).unwrap();
        assert_eq!(
            (h.kind, h.handler, h.nargs, h.bulk),
            (Kind::Batch, 0, 0, false)
        );
    }

    /// `short` takes every tag a sender makes for a whole short request or reply, and
    /// reads each tag it takes as `decode` does; every other tag (the bits `decode`
    /// ignores set, too) goes to `decode` and the general path.
    #[test]
    fn short_is_decode_of_the_fast_path() {
        let mut tags = vec![0, u64::MAX, batch_tag()];
        for kind in [Kind::Request, Kind::Reply, Kind::Returned, Kind::Batch] {
            for nargs in 0..=MAX_ARGS {
                for bulk in [false, true] {
                    for chunk in [0, FIRST, LAST, FIRST | LAST] {
                        for handler in [0, 1, 200, 255] {
                            let t = tag(kind, handler, nargs, bulk, chunk);
                            let fast = !bulk
                                && chunk == FIRST | LAST
                                && matches!(kind, Kind::Request | Kind::Reply);
                            assert_eq!(
                                short(t),
                                fast.then_some((kind, handler, nargs)),
                                "tag {t:#x}"
                            );
                            tags.push(t);
                            tags.extend((0..64).map(|b| t ^ (1 << b)));
                        }
                    }
                }
            }
        }
        tags.push(returned_tag(7, 3, Reason::NoReply, true));
        for t in tags {
            if let Some((kind, handler, nargs)) = short(t) {
                let h = decode(t).expect("a tag short takes decodes");
                assert!(h.first && h.last && !h.bulk, "tag {t:#x}");
                assert_eq!((h.kind, h.handler, h.nargs), (kind, handler, nargs));
            }
        }
    }

    #[test]
    fn foreign_tags_are_refused() {
        assert_eq!(decode(0), None);
        assert_eq!(decode(u64::MAX), None);
        // Nine arguments, or a batch with a handler, words, data or in chunks, or a
        // returned message with no reason.
        assert_eq!(decode(tag(Kind::Request, 1, 0, false, 0) | (9 << 8)), None);
        assert_eq!(decode(tag(Kind::Request, 1, 0, false, 0) | (3 << 12)), None);
        assert_eq!(decode(batch_tag() | 1), None);
        assert_eq!(decode(batch_tag() | (2 << 8)), None);
        assert_eq!(decode(tag(Kind::Batch, 0, 0, true, FIRST | LAST)), None);
        assert_eq!(decode(tag(Kind::Batch, 0, 0, false, FIRST)), None);
        assert_eq!(decode(tag(Kind::Returned, 1, 0, false, 0)), None);
    }
}
