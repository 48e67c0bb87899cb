//! `$dateToParts`, `$dateFromParts` and `$dateFromString`, in UTC.
//! Parts outside their usual range carry over (month 14 is February of
//! the next year), as MongoDB does. `$dateFromString` reads ISO 8601
//! text, or a `format` made of %Y %m %d %H %M %S %L %j %z %Z %% and
//! literal characters.

use bson::{doc, Bson};

use super::dates::{civil, date_millis, days_from_civil, parse_iso, require_utc, MILLIS_PER_DAY};
use super::{is_nullish, type_name, ArgStyle, Args, Context, OpSpec, Value};
use crate::error::{codes, QueryError};

const CONVERSION_FAILURE: i32 = 241;

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec {
        name: "$dateToParts",
        style: ArgStyle::Named { required: &["date"], optional: &["timezone", "iso8601"] },
        eval: eval_date_to_parts,
    },
    OpSpec {
        name: "$dateFromParts",
        style: ArgStyle::Named {
            required: &[],
            optional: &["year", "month", "day", "hour", "minute", "second", "millisecond", "timezone", "isoWeekYear", "isoWeek", "isoDayOfWeek"],
        },
        eval: eval_date_from_parts,
    },
    OpSpec {
        name: "$dateFromString",
        style: ArgStyle::Named { required: &["dateString"], optional: &["format", "timezone", "onError", "onNull"] },
        eval: eval_date_from_string,
    },
];

fn eval_date_to_parts(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let date = args.eval(0, cx)?;
    if !require_utc(name, args, 1, cx)? || is_nullish(&date) {
        return Ok(Some(Bson::Null));
    }
    let iso = match args.eval(2, cx)? {
        None | Some(Bson::Null) => false,
        Some(Bson::Boolean(b)) => b,
        other => return Err(QueryError::new(40521, format!("iso8601 must be a boolean, found {}", type_name(&other)))),
    };
    let c = civil(date_millis(name, date.as_ref().expect("nullish checked"))?);
    let int = |v: u32| Bson::Int32(v as i32);
    let year = |y: i64| Bson::Int32(i32::try_from(y).unwrap_or(i32::MAX));
    let parts = if iso {
        let (week_year, week) = c.iso_week();
        doc! {"isoWeekYear": year(week_year), "isoWeek": int(week), "isoDayOfWeek": int(c.iso_day_of_week()),
              "hour": int(c.hour), "minute": int(c.minute), "second": int(c.second), "millisecond": int(c.millisecond)}
    } else {
        doc! {"year": year(c.year), "month": int(c.month), "day": int(c.day),
              "hour": int(c.hour), "minute": int(c.minute), "second": int(c.second), "millisecond": int(c.millisecond)}
    };
    Ok(Some(Bson::Document(parts)))
}

/// A whole-number part; `None` when absent.
fn part(name: &str, what: &str, args: &Args, index: usize, cx: &Context) -> Result<Option<i64>, QueryError> {
    if args.get(index).is_none() {
        return Ok(None);
    }
    let value = args.eval(index, cx)?;
    if is_nullish(&value) {
        return Err(QueryError::new(40515, format!("{name}: '{what}' is null")));
    }
    match value.as_ref().and_then(super::arithmetic::Num::from_bson) {
        Some(n) if n.as_f64().fract() == 0.0 && n.as_f64().abs() < 1e15 => Ok(Some(n.as_f64() as i64)),
        _ => Err(QueryError::new(40515, format!("'{what}' must evaluate to an integer, found {}", type_name(&value)))),
    }
}

fn eval_date_from_parts(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    if (8..=10).any(|i| args.get(i).is_some()) {
        return Err(QueryError::new(codes::COMMAND_NOT_SUPPORTED, "$dateFromParts with ISO week parts is not supported by Slipstream"));
    }
    if !require_utc(name, args, 7, cx)? {
        return Ok(Some(Bson::Null));
    }
    let year = part(name, "year", args, 0, cx)?
        .ok_or_else(|| QueryError::new(40516, "$dateFromParts requires either 'year' or 'isoWeekYear' to be present"))?;
    if !(1..=9999).contains(&year) {
        return Err(QueryError::new(40523, format!("'year' must evaluate to an integer in the range 1 to 9999, found {year}")));
    }
    let month = part(name, "month", args, 1, cx)?.unwrap_or(1);
    let day = part(name, "day", args, 2, cx)?.unwrap_or(1);
    let hour = part(name, "hour", args, 3, cx)?.unwrap_or(0);
    let minute = part(name, "minute", args, 4, cx)?.unwrap_or(0);
    let second = part(name, "second", args, 5, cx)?.unwrap_or(0);
    let millisecond = part(name, "millisecond", args, 6, cx)?.unwrap_or(0);
    // Months carry into years; days, hours, ... carry by plain addition.
    let month_index = year * 12 + month - 1;
    let first_of_month = days_from_civil(month_index.div_euclid(12), (month_index.rem_euclid(12) + 1) as u32, 1);
    let millis = (first_of_month + day - 1) * MILLIS_PER_DAY
        + hour * 3_600_000
        + minute * 60_000
        + second * 1000
        + millisecond;
    Ok(Some(Bson::DateTime(bson::DateTime::from_millis(millis))))
}

fn eval_date_from_string(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let text = args.eval(0, cx)?;
    if is_nullish(&text) {
        return match args.get(4) {
            Some(_) => args.eval(4, cx),
            None => Ok(Some(Bson::Null)),
        };
    }
    if !require_utc(name, args, 2, cx)? {
        return Ok(Some(Bson::Null));
    }
    let format = match args.get(1) {
        None => None,
        Some(_) => match args.eval(1, cx)? {
            None | Some(Bson::Null) => return Ok(Some(Bson::Null)),
            Some(Bson::String(f)) => Some(f),
            other => return Err(QueryError::new(40684, format!("$dateFromString requires that 'format' be a string, found: {}", type_name(&other)))),
        },
    };
    let parsed = match &text {
        Some(Bson::String(s)) => match &format {
            None => parse_iso(s).ok_or_else(|| failure(s)),
            Some(f) => parse_with_format(s, f),
        },
        other => Err(QueryError::new(CONVERSION_FAILURE, format!("$dateFromString requires that 'dateString' be a string, found: {}", type_name(other)))),
    };
    match parsed {
        Ok(millis) => Ok(Some(Bson::DateTime(bson::DateTime::from_millis(millis)))),
        Err(error) if error.code == CONVERSION_FAILURE && args.get(3).is_some() => args.eval(3, cx),
        Err(error) => Err(error),
    }
}

fn failure(text: &str) -> QueryError {
    QueryError::new(CONVERSION_FAILURE, format!("Error parsing date string '{text}'"))
}

/// Reads `digits` (at most `max`, at least one) from the front of `rest`.
fn take_number(rest: &mut &str, max: usize) -> Option<i64> {
    let count = rest.bytes().take(max).take_while(u8::is_ascii_digit).count();
    if count == 0 {
        return None;
    }
    let (digits, tail) = rest.split_at(count);
    *rest = tail;
    digits.parse().ok()
}

fn parse_with_format(text: &str, format: &str) -> Result<i64, QueryError> {
    let (mut year, mut month, mut day, mut hour, mut minute, mut second, mut millis) = (1970, 1, 1, 0, 0, 0, 0);
    let mut day_of_year = None;
    let mut offset_millis = 0;
    let mut rest = text;
    let mut spec = format.chars();
    while let Some(ch) = spec.next() {
        if ch != '%' {
            rest = rest.strip_prefix(ch).ok_or_else(|| failure(text))?;
            continue;
        }
        let directive = spec.next().ok_or_else(|| QueryError::new(18535, "Unmatched '%' at end of format string"))?;
        match directive {
            'Y' => year = take_number(&mut rest, 4).ok_or_else(|| failure(text))?,
            'm' => month = take_number(&mut rest, 2).ok_or_else(|| failure(text))?,
            'd' => day = take_number(&mut rest, 2).ok_or_else(|| failure(text))?,
            'H' => hour = take_number(&mut rest, 2).ok_or_else(|| failure(text))?,
            'M' => minute = take_number(&mut rest, 2).ok_or_else(|| failure(text))?,
            'S' => second = take_number(&mut rest, 2).ok_or_else(|| failure(text))?,
            'L' => millis = take_number(&mut rest, 3).ok_or_else(|| failure(text))?,
            'j' => day_of_year = Some(take_number(&mut rest, 3).ok_or_else(|| failure(text))?),
            'Z' => {
                // Minutes offset from UTC, signed.
                let sign = if rest.starts_with('-') { -1 } else { 1 };
                rest = rest.strip_prefix(['+', '-']).ok_or_else(|| failure(text))?;
                offset_millis = sign * take_number(&mut rest, 4).ok_or_else(|| failure(text))? * 60_000;
            }
            'z' => {
                let sign = if rest.starts_with('-') { -1 } else { 1 };
                rest = rest.strip_prefix(['+', '-']).ok_or_else(|| failure(text))?;
                let hours = take_number(&mut rest, 2).ok_or_else(|| failure(text))?;
                rest = rest.strip_prefix(':').unwrap_or(rest);
                let minutes = take_number(&mut rest, 2).ok_or_else(|| failure(text))?;
                offset_millis = sign * (hours * 3_600_000 + minutes * 60_000);
            }
            '%' => rest = rest.strip_prefix('%').ok_or_else(|| failure(text))?,
            other => {
                return Err(QueryError::new(18536, format!("Invalid format character '%{other}' in format string")))
            }
        }
    }
    if !rest.is_empty() || !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 59 {
        return Err(failure(text));
    }
    let days = match day_of_year {
        Some(doy) => days_from_civil(year, 1, 1) + doy - 1,
        None => days_from_civil(year, month as u32, day as u32),
    };
    Ok(days * MILLIS_PER_DAY + hour * 3_600_000 + minute * 60_000 + second * 1000 + millis - offset_millis)
}

#[cfg(test)]
mod tests {
    use crate::expr::{Expr, Variables};
    use bson::{bson, doc, Bson};

    fn eval(expr: Bson) -> Result<Bson, crate::QueryError> {
        Expr::parse(&expr)?.evaluate(&doc! {}, &Variables::empty())
    }

    fn date(millis: i64) -> Bson {
        Bson::DateTime(bson::DateTime::from_millis(millis))
    }

    #[test]
    fn to_parts_and_back() {
        // 2017-01-01T01:29:09.123Z, MongoDB's documented example.
        let d = date(1_483_234_149_123);
        assert_eq!(
            eval(bson!({"$dateToParts": {"date": d.clone()}})).unwrap(),
            bson!({"year": 2017, "month": 1, "day": 1, "hour": 1, "minute": 29, "second": 9, "millisecond": 123})
        );
        assert_eq!(
            eval(bson!({"$dateToParts": {"date": d.clone(), "iso8601": true}})).unwrap(),
            bson!({"isoWeekYear": 2016, "isoWeek": 52, "isoDayOfWeek": 7, "hour": 1, "minute": 29, "second": 9, "millisecond": 123})
        );
        let back = bson!({"$dateFromParts": {"year": 2017, "month": 1, "day": 1, "hour": 1, "minute": 29, "second": 9, "millisecond": 123}});
        assert_eq!(eval(back).unwrap(), d);
        // Out-of-range parts carry: month 14 of 2016 is February 2017.
        assert_eq!(eval(bson!({"$dateFromParts": {"year": 2016, "month": 14, "day": 1}})).unwrap(), eval(bson!({"$dateFromParts": {"year": 2017, "month": 2}})).unwrap());
        assert_eq!(eval(bson!({"$dateFromParts": {"month": 2}})).unwrap_err().code, 40516);
    }

    #[test]
    fn from_string() {
        assert_eq!(eval(bson!({"$dateFromString": {"dateString": "2017-02-08T12:10:40.787Z"}})).unwrap(), date(1_486_555_840_787));
        assert_eq!(eval(bson!({"$dateFromString": {"dateString": "08/02/2017 12:10", "format": "%d/%m/%Y %H:%M"}})).unwrap(), date(1_486_555_800_000));
        assert_eq!(eval(bson!({"$dateFromString": {"dateString": "2017-02-08 12:10:40 +0100", "format": "%Y-%m-%d %H:%M:%S %z"}})).unwrap(), date(1_486_552_240_000));
        assert_eq!(eval(bson!({"$dateFromString": {"dateString": "not a date"}})).unwrap_err().code, 241);
        assert_eq!(eval(bson!({"$dateFromString": {"dateString": "not a date", "onError": "bad"}})).unwrap(), Bson::from("bad"));
        assert_eq!(eval(bson!({"$dateFromString": {"dateString": null, "onNull": 0}})).unwrap(), Bson::Int32(0));
    }
}
