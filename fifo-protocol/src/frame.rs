//! Framing: a 4-byte little-endian body length, then a MessagePack body.
//!
//! A FIFO is a byte stream, so messages need boundaries. This module is the only place
//! that knows the frame layout, and the only place that turns untrusted bytes into
//! messages: it checks the announced length against [`MAX_FRAME_LEN`] before anything is
//! allocated, so a hostile or corrupt header (say, 4 GiB) costs nothing but an error.
//! After bytes that are not frames, [`find_sync`] finds where a [`Command::Sync`] frame
//! starts, so a reader can get back in step with the stream.
//!
//! ```text
//! +----------------------+--------------------------------------+
//! | len: u32 LE (bytes)  | body: len bytes, rmp_serde named map |
//! +----------------------+--------------------------------------+
//! ```

use std::io::{self, Cursor, Read, Write};
use std::ops::Range;

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::message::{Command, Reply};

/// Largest accepted frame body, in bytes (1 MiB), header excluded.
///
/// Real messages are a few hundred bytes; the bound only exists so that a corrupt or
/// hostile length prefix cannot make either side allocate or wait for gigabytes.
pub const MAX_FRAME_LEN: u32 = 1024 * 1024;

/// Size of the frame header (the little-endian `u32` body length), in bytes.
pub const HEADER_LEN: usize = 4;

/// A type that travels in frames: [`Command`] or [`Reply`].
///
/// Sealed; it only exists so the codec functions can name what they failed to decode.
pub trait Message: Serialize + DeserializeOwned + sealed::Sealed {
    /// Type name used in error messages.
    const NAME: &'static str;
}

impl Message for Command {
    const NAME: &'static str = "Command";
}

impl Message for Reply {
    const NAME: &'static str = "Reply";
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::message::Command {}
    impl Sealed for crate::message::Reply {}
}

/// Encodes `msg` as one complete frame (header and body).
///
/// # Errors
/// [`Error::Encode`] if serialization fails, [`Error::FrameTooLarge`] if the body would
/// exceed [`MAX_FRAME_LEN`] bytes.
pub fn encode_frame<M: Message>(msg: &M) -> Result<Vec<u8>> {
    let mut frame = Vec::new();
    encode_frame_into(&mut frame, msg)?;
    Ok(frame)
}

/// Appends `msg` as one complete frame (header and body) to `out`; on error `out` is left
/// as it was.
///
/// Allocates nothing when `out` has the spare capacity: rmp-serde writes the messages of
/// this crate (which hold no sequences of unknown length) straight into the buffer. The
/// client relies on this to send commands inside benchmark regions.
///
/// # Errors
/// As [`encode_frame`].
pub(crate) fn encode_frame_into<M: Message>(out: &mut Vec<u8>, msg: &M) -> Result<()> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    let encoded = rmp_serde::encode::write_named(out, msg).map_err(|source| Error::Encode {
        what: M::NAME,
        source,
    });
    let body_len = out.len() - start - HEADER_LEN;
    let len = encoded.and_then(|()| {
        u32::try_from(body_len)
            .ok()
            .filter(|&len| len <= MAX_FRAME_LEN)
            .ok_or(Error::FrameTooLarge {
                len: body_len as u64,
                max: MAX_FRAME_LEN,
            })
    });
    match len {
        Ok(len) => {
            out[start..start + HEADER_LEN].copy_from_slice(&len.to_le_bytes());
            Ok(())
        }
        Err(err) => {
            out.truncate(start);
            Err(err)
        }
    }
}

/// Reads the body length in bytes from a frame header, rejecting anything above
/// [`MAX_FRAME_LEN`].
///
/// # Errors
/// [`Error::FrameTooLarge`].
pub fn body_len(header: [u8; HEADER_LEN]) -> Result<usize> {
    let len = u32::from_le_bytes(header);
    if len > MAX_FRAME_LEN {
        return Err(Error::FrameTooLarge {
            len: u64::from(len),
            max: MAX_FRAME_LEN,
        });
    }
    Ok(len as usize)
}

/// Finds the first frame at the start of `buf`, for stream readers that accumulate bytes.
///
/// Returns `Ok(None)` while the frame is incomplete, or `Ok(Some((body, consumed)))` where
/// `consumed` is the frame's total size in bytes (header included).
///
/// # Errors
/// [`Error::FrameTooLarge`] as soon as the 4 header bytes are present and announce too
/// long a body; the frame's end is unknown then, and a reader has to look for the next
/// frame it can trust with [`find_sync`].
pub fn split_frame(buf: &[u8]) -> Result<Option<(&[u8], usize)>> {
    let Some(header) = buf.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let len = body_len(*header)?;
    let end = HEADER_LEN + len;
    Ok(buf.get(HEADER_LEN..end).map(|body| (body, end)))
}

/// Decodes one frame body (without its header) into a message.
///
/// Strings are borrowed from `body` while decoding, so nothing is allocated unless the
/// message itself owns text (e.g. [`Reply::Err`]'s message): the client decodes the
/// replies it awaits inside benchmark regions with this function. A string or collection
/// whose announced length exceeds what `body` holds fails at once, so bogus lengths
/// inside a body cannot trigger large allocations either.
///
/// # Errors
/// [`Error::FrameTooLarge`] if `body` exceeds [`MAX_FRAME_LEN`] bytes, [`Error::Decode`]
/// if it is not a valid message, [`Error::TrailingBytes`] if bytes follow the message.
pub fn decode_body<M: Message>(body: &[u8]) -> Result<M> {
    if body.len() > MAX_FRAME_LEN as usize {
        return Err(Error::FrameTooLarge {
            len: body.len() as u64,
            max: MAX_FRAME_LEN,
        });
    }
    let mut de = rmp_serde::Deserializer::from_read_ref(body);
    let msg = M::deserialize(&mut de).map_err(|source| Error::Decode {
        what: M::NAME,
        len: body.len(),
        source,
    })?;
    // The slice deserializer does not say where it stopped; instead, it must find no
    // further value. Reading the next marker fails with end-of-file exactly when the
    // message used the whole body.
    match IgnoredAny::deserialize(&mut de) {
        Err(rmp_serde::decode::Error::InvalidMarkerRead(e))
            if e.kind() == io::ErrorKind::UnexpectedEof =>
        {
            Ok(msg)
        }
        _ => Err(trailing_bytes::<M>(body)),
    }
}

/// Decodes one reply frame body (without its header) in place: as [`decode_body`] for a
/// [`Reply`], but a refusal's message is borrowed from `body`, so nothing is allocated for
/// any reply.
///
/// # Errors
/// As [`decode_body`].
pub fn decode_reply_ref(body: &[u8]) -> Result<crate::message::ReplyRef<'_>> {
    if body.len() > MAX_FRAME_LEN as usize {
        return Err(Error::FrameTooLarge {
            len: body.len() as u64,
            max: MAX_FRAME_LEN,
        });
    }
    let mut de = rmp_serde::Deserializer::from_read_ref(body);
    let msg = crate::message::ReplyRef::deserialize(&mut de).map_err(|source| Error::Decode {
        what: Reply::NAME,
        len: body.len(),
        source,
    })?;
    match IgnoredAny::deserialize(&mut de) {
        Err(rmp_serde::decode::Error::InvalidMarkerRead(e))
            if e.kind() == io::ErrorKind::UnexpectedEof =>
        {
            Ok(msg)
        }
        _ => Err(trailing_bytes::<Reply>(body)),
    }
}

/// The [`Error::TrailingBytes`] for a `body` known to hold one valid `M` followed by
/// more bytes: decodes it again with a reader that counts what it consumed. Error path
/// only; it allocates.
fn trailing_bytes<M: Message>(body: &[u8]) -> Error {
    let mut de = rmp_serde::Deserializer::new(Cursor::new(body));
    let used = match M::deserialize(&mut de) {
        Ok(_) => de.position() as usize,
        // Unreachable: the slice deserializer accepted the same bytes.
        Err(source) => {
            return Error::Decode {
                what: M::NAME,
                len: body.len(),
                source,
            };
        }
    };
    Error::TrailingBytes {
        what: "message",
        used,
        extra: body.len() - used,
    }
}

/// Largest body, in bytes, of a frame that [`find_sync`] accepts as a [`Command::Sync`]
/// frame (64).
///
/// Bounds how far the search looks ahead from a candidate start, and so how many bytes
/// at the end of a buffer can be left undecided. [`FifoClient`](crate::FifoClient)'s
/// `Sync` bodies take 14 to 22 bytes; the margin leaves room for other encoders (wider
/// integer or string markers).
pub const MAX_SYNC_BODY_LEN: usize = 64;

/// What [`find_sync`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncSearch {
    /// A complete [`Command::Sync`] frame starts at this offset of the buffer: the first
    /// one among the start offsets searched.
    Found(usize),
    /// No complete `Sync` frame starts at any offset searched; at this offset, the first
    /// such, the bytes present are a prefix of one, so only more bytes can tell. Every
    /// offset searched before it is certainly not the start of a `Sync` frame.
    Undecided(usize),
    /// No offset searched starts a `Sync` frame, whatever bytes follow.
    Absent,
}

/// Looks in `buf` for the first offset in `starts` where a complete [`Command::Sync`]
/// frame begins, to get back in step with a stream after bytes that are not frames.
///
/// A `Sync` frame is a header announcing 1 to [`MAX_SYNC_BODY_LEN`] bytes followed by a
/// body that [`decode_body`] decodes as exactly one `Command::Sync` (no trailing bytes).
/// A candidate may extend past `starts.end` (up to the end of `buf`). A complete `Sync`
/// frame wins over an earlier undecided candidate; an undecided one is reported only
/// when none is found. `starts` is clamped to `buf`.
///
/// Cost: four byte comparisons per offset, plus a decode of at most
/// [`MAX_SYNC_BODY_LEN`] bytes where a plausible header sits; nothing is allocated for
/// offsets whose header is implausible, and never more than a small error message
/// otherwise.
pub fn find_sync(buf: &[u8], starts: Range<usize>) -> SyncSearch {
    let end = starts.end.min(buf.len());
    let mut undecided = None;
    for at in starts.start..end {
        match sync_frame_at(&buf[at..]) {
            Some(true) => return SyncSearch::Found(at),
            Some(false) => {}
            None => {
                undecided.get_or_insert(at);
            }
        }
    }
    undecided.map_or(SyncSearch::Absent, SyncSearch::Undecided)
}

/// Whether `bytes` starts with a complete `Sync` frame: `Some(true)` or `Some(false)`,
/// or `None` if `bytes` is a prefix of one (more bytes needed to tell).
fn sync_frame_at(bytes: &[u8]) -> Option<bool> {
    let plausible = 1..=MAX_SYNC_BODY_LEN;
    let Some(header) = bytes.first_chunk::<HEADER_LEN>() else {
        // A cut header: a prefix of a Sync header iff its low byte is a plausible length
        // and the bytes present above it are zero.
        let prefix = match bytes.split_first() {
            Some((&low, high)) => {
                plausible.contains(&usize::from(low)) && high.iter().all(|&b| b == 0)
            }
            None => true,
        };
        return if prefix { None } else { Some(false) };
    };
    let len = u32::from_le_bytes(*header) as usize;
    if !plausible.contains(&len) {
        return Some(false);
    }
    match bytes.get(HEADER_LEN..HEADER_LEN + len) {
        Some(body) => Some(matches!(
            decode_body::<Command>(body),
            Ok(Command::Sync { .. })
        )),
        None => {
            // A cut body: still a candidate while decoding it fails for want of bytes. A
            // message that ends early, or any other failure, rules it out.
            let partial = &bytes[HEADER_LEN..];
            let mut de = rmp_serde::Deserializer::from_read_ref(partial);
            match Command::deserialize(&mut de) {
                Err(
                    rmp_serde::decode::Error::InvalidMarkerRead(e)
                    | rmp_serde::decode::Error::InvalidDataRead(e),
                ) if e.kind() == io::ErrorKind::UnexpectedEof => None,
                _ => Some(false),
            }
        }
    }
}

/// Decodes `bytes`, which must be exactly one frame.
///
/// The header is checked first: a frame announcing more than [`MAX_FRAME_LEN`] bytes is
/// rejected from its 4 header bytes alone.
///
/// # Errors
/// [`Error::IncompleteFrame`], [`Error::FrameTooLarge`], [`Error::TrailingBytes`],
/// [`Error::Decode`].
pub fn decode_frame<M: Message>(bytes: &[u8]) -> Result<M> {
    let Some(header) = bytes.first_chunk::<HEADER_LEN>() else {
        return Err(Error::IncompleteFrame {
            needed: HEADER_LEN,
            available: bytes.len(),
        });
    };
    let needed = HEADER_LEN + body_len(*header)?;
    if bytes.len() < needed {
        return Err(Error::IncompleteFrame {
            needed,
            available: bytes.len(),
        });
    }
    if bytes.len() > needed {
        return Err(Error::TrailingBytes {
            what: "frame",
            used: needed,
            extra: bytes.len() - needed,
        });
    }
    decode_body(&bytes[HEADER_LEN..])
}

/// Reads one frame from a blocking reader and decodes it.
///
/// Reads the header, checks the length, then reads exactly the body: it never reads past
/// the frame and never allocates more than [`MAX_FRAME_LEN`] bytes.
///
/// # Errors
/// [`Error::IncompleteFrame`] if the reader hits end-of-file mid-frame (or before it),
/// [`Error::StreamIo`] on a read error, plus those of [`decode_body`].
pub fn read_frame<M: Message, R: Read + ?Sized>(reader: &mut R) -> Result<M> {
    let mut header = [0u8; HEADER_LEN];
    let got = read_full(reader, &mut header)?;
    if got < HEADER_LEN {
        return Err(Error::IncompleteFrame {
            needed: HEADER_LEN,
            available: got,
        });
    }
    let len = body_len(header)?;
    let mut body = vec![0u8; len];
    let got = read_full(reader, &mut body)?;
    if got < len {
        return Err(Error::IncompleteFrame {
            needed: HEADER_LEN + len,
            available: HEADER_LEN + got,
        });
    }
    decode_body(&body)
}

/// Encodes `msg` and writes it as one frame with a single `write_all`.
///
/// # Errors
/// Those of [`encode_frame`], and [`Error::StreamIo`] on a write error.
pub fn write_frame<M: Message, W: Write + ?Sized>(writer: &mut W, msg: &M) -> Result<()> {
    let frame = encode_frame(msg)?;
    writer
        .write_all(&frame)
        .and_then(|()| writer.flush())
        .map_err(|source| Error::StreamIo {
            op: "write frame",
            source,
        })
}

/// Fills `buf` until it is full or the reader reports end-of-file; returns bytes read.
fn read_full<R: Read + ?Sized>(reader: &mut R, buf: &mut [u8]) -> Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(Error::StreamIo {
                    op: "read frame",
                    source,
                });
            }
        }
    }
    Ok(filled)
}
