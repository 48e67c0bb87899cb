//! The bit-test operators `$bitsAllSet`, `$bitsAnySet`, `$bitsAllClear` and
//! `$bitsAnyClear`, as MongoDB 7.0 defines them: the mask is a number, an
//! array of bit positions, or BinData; a value qualifies when it is an
//! integral number representable as a 64-bit integer (tested in two's
//! complement, so a negative number's bits above 63 are set) or BinData
//! (bit `p` is bit `p % 8` of byte `p / 8`; bits past its end are clear).

use bson::Bson;

use crate::compare::{as_number, decimal_to_f64, Number};
use crate::error::QueryError;

/// The highest bit position a mask may name (MongoDB's positions are
/// 32-bit signed integers).
const BIT_POSITION_MAX: i64 = i32::MAX as i64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitTest {
    AllSet,
    AnySet,
    AllClear,
    AnyClear,
}

/// A parsed bit test: which test, on which bit positions.
#[derive(Clone, Debug)]
pub struct BitsPredicate {
    pub test: BitTest,
    pub positions: Vec<u32>,
}

impl BitTest {
    pub fn from_operator(name: &str) -> Option<BitTest> {
        match name {
            "$bitsAllSet" => Some(BitTest::AllSet),
            "$bitsAnySet" => Some(BitTest::AnySet),
            "$bitsAllClear" => Some(BitTest::AllClear),
            "$bitsAnyClear" => Some(BitTest::AnyClear),
            _ => None,
        }
    }
}

/// An integral number representable as i64, else `None`.
fn as_i64(value: &Bson) -> Option<i64> {
    let float = match value {
        Bson::Decimal128(d) => decimal_to_f64(d),
        other => match as_number(other)? {
            Number::Int(n) => return Some(n),
            Number::Float(f) => f,
        },
    };
    // 2^63 is the first double past i64::MAX.
    (float.fract() == 0.0 && float >= -9.223_372_036_854_776e18 && float < 9.223_372_036_854_776e18)
        .then_some(float as i64)
}

impl BitsPredicate {
    pub fn parse(name: &str, test: BitTest, argument: &Bson) -> Result<BitsPredicate, QueryError> {
        let positions = match argument {
            Bson::Binary(binary) => set_bits(&binary.bytes),
            Bson::Array(items) => items
                .iter()
                .map(|item| position(name, item))
                .collect::<Result<Vec<_>, _>>()?,
            number if as_number(number).is_some() || matches!(number, Bson::Decimal128(_)) => {
                let mask = as_i64(number).ok_or_else(|| {
                    QueryError::failed_to_parse(format!("{name} cannot represent mask as a 64-bit integer: {number}"))
                })?;
                if mask < 0 {
                    return Err(QueryError::failed_to_parse(format!(
                        "{name} cannot take a negative number mask: {number}"
                    )));
                }
                set_bits(&mask.to_le_bytes())
            }
            other => {
                return Err(QueryError::bad_value(format!(
                    "{name} takes an Array, a number, or a BinData but received: {other}"
                )))
            }
        };
        Ok(BitsPredicate { test, positions })
    }

    pub fn matches(&self, candidate: Option<&Bson>) -> bool {
        let Some(value) = candidate else {
            return false;
        };
        let bit: Box<dyn Fn(u32) -> bool + '_> = match value {
            Bson::Binary(binary) => Box::new(|p: u32| {
                let byte = (p / 8) as usize;
                binary.bytes.get(byte).is_some_and(|b| b & (1 << (p % 8)) != 0)
            }),
            number => {
                let Some(n) = as_i64(number) else { return false };
                // Bits above 63 repeat the sign bit.
                Box::new(move |p: u32| if p >= 64 { n < 0 } else { n & (1i64 << p) != 0 })
            }
        };
        match self.test {
            BitTest::AllSet => self.positions.iter().all(|p| bit(*p)),
            BitTest::AnySet => self.positions.iter().any(|p| bit(*p)),
            BitTest::AllClear => self.positions.iter().all(|p| !bit(*p)),
            BitTest::AnyClear => self.positions.iter().any(|p| !bit(*p)),
        }
    }
}

fn position(name: &str, item: &Bson) -> Result<u32, QueryError> {
    let value = as_i64(item).filter(|_| as_number(item).is_some() || matches!(item, Bson::Decimal128(_)));
    match value {
        Some(p) if (0..=BIT_POSITION_MAX).contains(&p) => Ok(p as u32),
        Some(p) => Err(QueryError::bad_value(format!(
            "bit positions must be >= 0 but got: {name}: {p}"
        ))),
        None => Err(QueryError::bad_value(format!(
            "bit positions must be an integer but got: {item}"
        ))),
    }
}

fn set_bits(bytes: &[u8]) -> Vec<u32> {
    (0..bytes.len() as u32 * 8)
        .filter(|p| bytes[(p / 8) as usize] & (1 << (p % 8)) != 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use bson::spec::BinarySubtype;
    use bson::Binary;

    use super::*;

    fn test(name: &str, mask: Bson, value: Bson) -> bool {
        let kind = BitTest::from_operator(name).unwrap();
        BitsPredicate::parse(name, kind, &mask).unwrap().matches(Some(&value))
    }

    #[test]
    fn masks_positions_and_bindata() {
        // 54 = 0b110110
        assert!(test("$bitsAllSet", Bson::Int32(0b110), Bson::Int32(54)));
        assert!(!test("$bitsAllSet", Bson::Int32(0b111), Bson::Int32(54)));
        assert!(test(
            "$bitsAnySet",
            Bson::Array(vec![Bson::Int32(0), Bson::Int32(1)]),
            Bson::Int64(54)
        ));
        assert!(test(
            "$bitsAllClear",
            Bson::Array(vec![Bson::Int32(0), Bson::Int32(3)]),
            Bson::Double(54.0)
        ));
        assert!(test("$bitsAnyClear", Bson::Int32(1), Bson::Int32(54)));
        assert!(!test("$bitsAllSet", Bson::Int32(2), Bson::Double(2.5)));
        assert!(!test("$bitsAllSet", Bson::Int32(2), Bson::String("2".into())));
        assert!(test(
            "$bitsAllSet",
            Bson::Array(vec![Bson::Int32(200)]),
            Bson::Int32(-1)
        ));
        let binary = |bytes: Vec<u8>| {
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes,
            })
        };
        assert!(test("$bitsAllSet", binary(vec![0b110]), Bson::Int32(54)));
        assert!(test("$bitsAllSet", Bson::Int32(0b10_0000_0001), binary(vec![1, 2])));
    }

    #[test]
    fn bad_masks_are_refused() {
        let parse = |mask: Bson| {
            BitsPredicate::parse("$bitsAllSet", BitTest::AllSet, &mask)
                .unwrap_err()
                .code
        };
        assert_eq!(parse(Bson::Int32(-1)), 9);
        assert_eq!(parse(Bson::Double(1.5)), 9);
        assert_eq!(parse(Bson::String("x".into())), 2);
        assert_eq!(parse(Bson::Array(vec![Bson::Int32(-1)])), 2);
        assert_eq!(parse(Bson::Array(vec![Bson::String("x".into())])), 2);
    }
}
