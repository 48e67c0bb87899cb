//! The nesting depth of a BSON document, measured on its raw bytes before
//! anything decodes it.
//!
//! The `bson` crate turns bytes into a `Document` (and later drops, clones,
//! compares and formats it) by recursion, one call per level, with no
//! depth limit of its own; so does nearly every query function downstream.
//! A client could therefore send a document nested a few thousand levels
//! deep and overflow a worker thread's stack, which aborts the whole
//! process. MongoDB refuses such a message while validating it
//! (`validateBSON`, with `maxBSONDepth`), and so does this walk: it keeps
//! its own bounded stack of open documents instead of recursing, reads no
//! byte outside the slice, and never panics on malformed input.
//!
//! Depth counts as MongoDB's validator counts it: the top-level document
//! is depth 0, each embedded document or array one more, and a
//! code-with-scope value two (its own frame plus its scope document's).
//!
//! The walk also checks every length it relies on (each element must end
//! inside its parent, each document must end with its terminating zero
//! exactly where its length says), so the structure it measured is the
//! structure the decoder will see: no nesting can hide inside bytes the
//! walk skipped.

use crate::WireError;

/// The most bytes of the field path quoted in the error message; field
/// names are client-chosen and may be megabytes long.
const ERROR_PATH_BYTES_MAX: usize = 1024;

/// Checks that `bytes` is exactly one structurally sound BSON document whose
/// nesting does not exceed `max_depth`. Too deep is `NestingTooDeep` (with
/// the dotted path of the element that went past the limit, as MongoDB's
/// message gives it); anything malformed is `InvalidBson`.
pub fn check_nesting_depth(bytes: &[u8], max_depth: usize) -> Result<(), WireError> {
    let length = read_length(bytes, 0).ok_or_else(|| invalid("BSON data has to be at least 5 bytes"))?;
    if length < 5 {
        return Err(invalid("BSON data has to be at least 5 bytes"));
    }
    if length != bytes.len() {
        return Err(invalid("Incorrect BSON length"));
    }
    if bytes[length - 1] != 0 {
        return Err(invalid("BSON object not terminated with EOO"));
    }
    Walk { bytes, max_depth, frames: Vec::new() }.run(length)
}

/// One document (or array, or code-with-scope value) still open.
struct Frame {
    /// The offset just past its terminating byte.
    end: usize,
    /// The field name (offset, length) of the element that opened it; the
    /// top-level document has none.
    name: (usize, usize),
    /// A code-with-scope frame: it ends right after its scope document.
    code_with_scope: bool,
}

struct Walk<'a> {
    bytes: &'a [u8],
    max_depth: usize,
    frames: Vec<Frame>,
}

impl Walk<'_> {
    fn run(mut self, length: usize) -> Result<(), WireError> {
        self.frames.push(Frame { end: length, name: (0, 0), code_with_scope: false });
        let mut at = 4;
        while let Some(frame_end) = self.frames.last().map(|frame| frame.end) {
            // The parent's terminating zero is the last byte an element may use.
            if at >= frame_end {
                return Err(invalid("BSON size is larger than buffer size"));
            }
            let element_type = self.bytes[at];
            if element_type == 0 {
                at = self.close_frame(at + 1)?;
                continue;
            }
            let name_start = at + 1;
            let name_len = cstring_len(self.bytes, name_start, frame_end - 1)
                .ok_or_else(|| invalid("field name is not terminated inside its document"))?;
            at = self.element(element_type, (name_start, name_len), name_start + name_len + 1, frame_end - 1)?;
        }
        assert_eq!(at, length, "the outermost frame ends where the document does");
        Ok(())
    }

    /// Pops the frame whose terminating zero ended just before `at`, and a
    /// code-with-scope frame its scope document completes. Returns where
    /// the parent continues.
    fn close_frame(&mut self, at: usize) -> Result<usize, WireError> {
        let frame = self.frames.pop().expect("close_frame runs with a frame open");
        if at != frame.end {
            return Err(invalid("incorrect BSON length"));
        }
        if self.frames.last().is_some_and(|parent| parent.code_with_scope) {
            let code = self.frames.pop().expect("the parent checked just above");
            if at != code.end {
                return Err(invalid("incorrect BSON length of a code-with-scope value"));
            }
        }
        Ok(at)
    }

    /// Skips the value of one element that starts at `at` and must end at
    /// or before `limit`, opening a frame for an embedded document; returns
    /// where the next element starts.
    fn element(&mut self, element_type: u8, name: (usize, usize), at: usize, limit: usize) -> Result<usize, WireError> {
        let fixed = |count: usize| end_within(at, count, limit);
        match element_type {
            // double, UTC datetime, timestamp, int64
            0x01 | 0x09 | 0x11 | 0x12 => fixed(8),
            // string, JavaScript code, symbol
            0x02 | 0x0D | 0x0E => self.string(at, limit),
            // embedded document, array
            0x03 | 0x04 => self.open(at, limit, name, false),
            0x05 => {
                let count = read_length(self.bytes, at).ok_or_else(|| invalid("invalid binary length"))?;
                end_within(at, 5usize.checked_add(count).ok_or_else(|| invalid("binary length overflows"))?, limit)
            }
            // undefined, null, min key, max key
            0x06 | 0x0A | 0xFF | 0x7F => Ok(at),
            0x07 => fixed(12),
            0x08 => match self.bytes.get(at) {
                Some(0 | 1) if at < limit => Ok(at + 1),
                _ => Err(invalid("BSON bool is neither false nor true")),
            },
            0x0B => {
                let pattern = cstring_len(self.bytes, at, limit).ok_or_else(|| invalid("unterminated regex"))?;
                let options_at = at + pattern + 1;
                let options =
                    cstring_len(self.bytes, options_at, limit).ok_or_else(|| invalid("unterminated regex"))?;
                Ok(options_at + options + 1)
            }
            0x0C => {
                let after = self.string(at, limit)?;
                end_within(after, 12, limit)
            }
            0x0F => self.open(at, limit, name, true),
            0x10 => fixed(4),
            0x13 => fixed(16),
            other => Err(invalid(&format!("Unrecognized BSON type {other}"))),
        }
    }

    /// A length-prefixed, zero-terminated string at `at`.
    fn string(&self, at: usize, limit: usize) -> Result<usize, WireError> {
        let count = read_length(self.bytes, at).ok_or_else(|| invalid("truncated string length"))?;
        if count == 0 {
            return Err(invalid("Not null terminated string"));
        }
        let end = end_within(at, 4usize.checked_add(count).ok_or_else(|| invalid("string length overflows"))?, limit)?;
        if self.bytes[end - 1] != 0 {
            return Err(invalid("Not null terminated string"));
        }
        Ok(end)
    }

    /// Opens the frame of an embedded document or array (or of a
    /// code-with-scope value and its scope document) at `at`, refusing it
    /// when it would go past `max_depth`. Returns where its first element
    /// starts.
    fn open(
        &mut self,
        at: usize,
        limit: usize,
        name: (usize, usize),
        code_with_scope: bool,
    ) -> Result<usize, WireError> {
        let count = read_length(self.bytes, at).ok_or_else(|| invalid("truncated nested object length"))?;
        let end = end_within(at, count, limit)?;
        if !code_with_scope {
            self.push(Frame { end, name, code_with_scope: false }, count)?;
            return Ok(at + 4);
        }
        // code_w_s: int32 total, string code, document scope.
        self.push(Frame { end, name, code_with_scope: true }, count)?;
        if count < 14 {
            return Err(invalid("code with scope is shorter than 14 bytes"));
        }
        let scope_at = self.string(at + 4, end)?;
        let scope_len = read_length(self.bytes, scope_at).ok_or_else(|| invalid("truncated scope length"))?;
        if scope_at.checked_add(scope_len) != Some(end) {
            return Err(invalid("code with scope does not end with its scope document"));
        }
        self.push(Frame { end, name: (scope_at, 0), code_with_scope: false }, scope_len)?;
        Ok(scope_at + 4)
    }

    /// Pushes one frame; the depth is checked first, as MongoDB checks it
    /// before the nested length.
    fn push(&mut self, frame: Frame, declared: usize) -> Result<(), WireError> {
        // The top-level document is frame 0, at depth 0.
        if self.frames.len() > self.max_depth {
            return Err(WireError::NestingTooDeep(self.path(frame.name)));
        }
        if declared < 5 {
            return Err(invalid("Nested BSON object has to be at least 5 bytes"));
        }
        self.frames.push(frame);
        Ok(())
    }

    /// The dotted field path of the open frames and then `last`, cut at
    /// `ERROR_PATH_BYTES_MAX`.
    fn path(&self, last: (usize, usize)) -> String {
        let mut path = Vec::new();
        let names = self.frames.iter().skip(1).map(|frame| frame.name).chain(std::iter::once(last));
        for (index, (start, len)) in names.enumerate() {
            if index > 0 {
                path.push(b'.');
            }
            path.extend_from_slice(&self.bytes[start..start + len]);
            if path.len() > ERROR_PATH_BYTES_MAX {
                path.truncate(ERROR_PATH_BYTES_MAX);
                path.extend_from_slice(b"...");
                break;
            }
        }
        String::from_utf8_lossy(&path).into_owned()
    }
}

fn invalid(message: &str) -> WireError {
    WireError::InvalidBson(message.to_owned())
}

/// The non-negative little-endian int32 at `at`, if four bytes are there.
fn read_length(bytes: &[u8], at: usize) -> Option<usize> {
    let field = bytes.get(at..at.checked_add(4)?)?;
    let value = i32::from_le_bytes([field[0], field[1], field[2], field[3]]);
    usize::try_from(value).ok()
}

/// `at + count`, if that stays at or before `limit`.
fn end_within(at: usize, count: usize, limit: usize) -> Result<usize, WireError> {
    match at.checked_add(count) {
        Some(end) if end <= limit => Ok(end),
        _ => Err(invalid("BSON size is larger than buffer size")),
    }
}

/// The length of the zero-terminated string at `at`, if its zero lies
/// before `limit`.
fn cstring_len(bytes: &[u8], at: usize, limit: usize) -> Option<usize> {
    bytes.get(at..limit)?.iter().position(|&byte| byte == 0)
}
