//! Decoding key bytes back into values, for error messages and explain.

use bson::{Bson, Document};

use super::encode::{float_from_order_key, END, TYPE_OFFSET};
use super::KeyPattern;
use crate::error::QueryError;

/// Decodes a key back to {field: value} for error messages (DuplicateKey
/// keyValue) and explain; numeric types may come back normalised.
pub fn decode_key(key: &[u8], pattern: &KeyPattern) -> Result<Document, QueryError> {
    let mut out = Document::new();
    let mut reader = Reader {
        bytes: key,
        pos: 0,
        invert: false,
    };
    for field in &pattern.fields {
        reader.invert = field.descending;
        let value = reader.value()?;
        out.insert(field.path.clone(), value);
    }
    if reader.pos != key.len() {
        return Err(corrupt("trailing bytes after the last key field"));
    }
    Ok(out)
}

fn corrupt(what: &str) -> QueryError {
    QueryError::new(
        crate::error::codes::BAD_VALUE,
        format!("malformed index key: {what}"),
    )
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    invert: bool,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, QueryError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| corrupt("truncated"))?;
        self.pos += 1;
        Ok(if self.invert { !b } else { b })
    }

    fn peek(&self) -> Result<u8, QueryError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| corrupt("truncated"))?;
        Ok(if self.invert { !b } else { b })
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], QueryError> {
        let mut buf = [0u8; N];
        for slot in &mut buf {
            *slot = self.byte()?;
        }
        Ok(buf)
    }

    fn escaped(&mut self) -> Result<Vec<u8>, QueryError> {
        let mut bytes = Vec::new();
        loop {
            let b = self.byte()?;
            if b != 0 {
                bytes.push(b);
                continue;
            }
            match self.byte()? {
                0 => return Ok(bytes),
                0xFF => bytes.push(0),
                _ => return Err(corrupt("bad string escape")),
            }
        }
    }

    fn string(&mut self) -> Result<String, QueryError> {
        String::from_utf8(self.escaped()?).map_err(|_| corrupt("string is not UTF-8"))
    }

    fn document_body(&mut self) -> Result<Document, QueryError> {
        let mut doc = Document::new();
        loop {
            if self.byte()? == END {
                return Ok(doc);
            }
            let name = self.string()?;
            let value = self.value()?;
            doc.insert(name, value);
        }
    }

    fn value(&mut self) -> Result<Bson, QueryError> {
        let tag = i32::from(self.byte()?) - TYPE_OFFSET;
        Ok(match tag {
            -1 => Bson::MinKey,
            0 => Bson::Undefined,
            5 => Bson::Null,
            10 => {
                let key = u64::from_be_bytes(self.take::<8>()?);
                let diff = u16::from_be_bytes(self.take::<2>()?);
                if key == 0 && diff == 0 {
                    Bson::Double(f64::NAN)
                } else {
                    number_from_parts(float_from_order_key(key), diff)
                }
            }
            15 => Bson::String(self.string()?),
            20 => Bson::Document(self.document_body()?),
            25 => {
                let mut items = Vec::new();
                while self.peek()? != END {
                    items.push(self.value()?);
                }
                self.byte()?;
                Bson::Array(items)
            }
            30 => {
                let len = u32::from_be_bytes(self.take::<4>()?) as usize;
                let subtype = self.byte()?;
                if self.bytes.len() - self.pos < len {
                    return Err(corrupt("truncated binary"));
                }
                let mut bytes = Vec::with_capacity(len);
                for _ in 0..len {
                    bytes.push(self.byte()?);
                }
                Bson::Binary(bson::Binary {
                    subtype: subtype.into(),
                    bytes,
                })
            }
            35 => Bson::ObjectId(bson::oid::ObjectId::from_bytes(self.take::<12>()?)),
            40 => Bson::Boolean(self.byte()? != 0),
            45 => {
                let raw = u64::from_be_bytes(self.take::<8>()?) ^ (1u64 << 63);
                Bson::DateTime(bson::DateTime::from_millis(raw as i64))
            }
            47 => {
                let time = u32::from_be_bytes(self.take::<4>()?);
                let increment = u32::from_be_bytes(self.take::<4>()?);
                Bson::Timestamp(bson::Timestamp { time, increment })
            }
            50 => {
                let pattern = self.string()?;
                let options = self.string()?;
                let pattern = pattern.try_into().map_err(|_| corrupt("regex pattern"))?;
                let options = options.try_into().map_err(|_| corrupt("regex options"))?;
                Bson::RegularExpression(bson::Regex { pattern, options })
            }
            // The pointer's parts are private in the bson crate; its text is
            // enough for error messages and explain.
            55 => Bson::String(self.string()?),
            60 => Bson::JavaScriptCode(self.string()?),
            65 => {
                let code = self.string()?;
                let scope = self.document_body()?;
                Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code, scope })
            }
            127 => Bson::MaxKey,
            _ => return Err(corrupt("unknown type byte")),
        })
    }
}

/// Rebuilds a number from its order key float and tie-breaker, choosing
/// the narrowest integer type that holds an integral value.
fn number_from_parts(f: f64, diff: u16) -> Bson {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if diff != 0 || (f.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&f)) {
        let whole = f as i128 + i128::from(diff);
        if let Ok(small) = i32::try_from(whole) {
            return Bson::Int32(small);
        }
        if let Ok(big) = i64::try_from(whole) {
            return Bson::Int64(big);
        }
    }
    Bson::Double(f)
}
