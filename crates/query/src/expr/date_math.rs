//! Date arithmetic in UTC: `$dateAdd`, `$dateSubtract`, `$dateDiff`,
//! `$dateTrunc`. Month-based units follow the calendar (adding a month to
//! January 31 gives the last day of February, as in MongoDB); the others
//! are fixed lengths of milliseconds.

use bson::Bson;

use super::dates::{civil, date_millis, days_from_civil, require_utc, MILLIS_PER_DAY};
use super::{is_nullish, type_name, ArgStyle, Args, Context, OpSpec, Value};
use crate::error::{codes, QueryError};

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec {
        name: "$dateAdd",
        style: ArgStyle::Named { required: &["startDate", "unit", "amount"], optional: &["timezone"] },
        eval: eval_date_add,
    },
    OpSpec {
        name: "$dateSubtract",
        style: ArgStyle::Named { required: &["startDate", "unit", "amount"], optional: &["timezone"] },
        eval: eval_date_add,
    },
    OpSpec {
        name: "$dateDiff",
        style: ArgStyle::Named { required: &["startDate", "endDate", "unit"], optional: &["timezone", "startOfWeek"] },
        eval: eval_date_diff,
    },
    OpSpec {
        name: "$dateTrunc",
        style: ArgStyle::Named { required: &["date", "unit"], optional: &["binSize", "timezone", "startOfWeek"] },
        eval: eval_date_trunc,
    },
];

/// `$dateTrunc` counts bins from 2000-01-01T00:00:00Z, as MongoDB does.
const TRUNC_REFERENCE_MILLIS: i64 = 946_684_800_000;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Unit {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Millisecond,
}

impl Unit {
    fn parse(name: &str, value: &Value) -> Result<Unit, QueryError> {
        let Some(Bson::String(text)) = value else {
            return Err(QueryError::new(codes::FAILED_TO_PARSE, format!("{name} requires 'unit' to be a string, but got {}", type_name(value))));
        };
        Ok(match text.as_str() {
            "year" => Unit::Year,
            "quarter" => Unit::Quarter,
            "month" => Unit::Month,
            "week" => Unit::Week,
            "day" => Unit::Day,
            "hour" => Unit::Hour,
            "minute" => Unit::Minute,
            "second" => Unit::Second,
            "millisecond" => Unit::Millisecond,
            other => return Err(QueryError::new(codes::FAILED_TO_PARSE, format!("{name}: unknown time unit value: {other}"))),
        })
    }

    /// The fixed length of a unit, `None` for calendar (month-based) units.
    fn millis(self) -> Option<i64> {
        match self {
            Unit::Week => Some(7 * MILLIS_PER_DAY),
            Unit::Day => Some(MILLIS_PER_DAY),
            Unit::Hour => Some(3_600_000),
            Unit::Minute => Some(60_000),
            Unit::Second => Some(1000),
            Unit::Millisecond => Some(1),
            Unit::Year | Unit::Quarter | Unit::Month => None,
        }
    }

    fn months(self) -> i64 {
        match self {
            Unit::Year => 12,
            Unit::Quarter => 3,
            _ => 1,
        }
    }
}

fn integer(name: &str, what: &str, value: &Value) -> Result<i64, QueryError> {
    match value.as_ref().and_then(super::arithmetic::Num::from_bson) {
        Some(n) if n.as_f64().fract() == 0.0 && n.as_f64().abs() < 9.0e18 => Ok(n.as_f64() as i64),
        _ => Err(QueryError::new(5166405, format!("{name} expects integer {what}, found {}", type_name(value)))),
    }
}

fn overflow(name: &str) -> QueryError {
    QueryError::new(5166406, format!("{name} overflowed"))
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Adds calendar months, clamping the day to the end of the month.
fn add_months(millis: i64, months: i64) -> Option<i64> {
    let c = civil(millis);
    let index = c.year.checked_mul(12)?.checked_add(i64::from(c.month) - 1)?.checked_add(months)?;
    let year = index.div_euclid(12);
    let month = (index.rem_euclid(12) + 1) as u32;
    let day = c.day.min(days_in_month(year, month));
    let time_of_day = millis.rem_euclid(MILLIS_PER_DAY);
    days_from_civil(year, month, day).checked_mul(MILLIS_PER_DAY)?.checked_add(time_of_day)
}

fn eval_date_add(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let (start, unit, amount) = (args.eval(0, cx)?, args.eval(1, cx)?, args.eval(2, cx)?);
    if !require_utc(name, args, 3, cx)? || is_nullish(&start) || is_nullish(&unit) || is_nullish(&amount) {
        return Ok(Some(Bson::Null));
    }
    let start = date_millis(name, start.as_ref().expect("nullish checked"))?;
    let unit = Unit::parse(name, &unit)?;
    let mut amount = integer(name, "amount", &amount)?;
    if name == "$dateSubtract" {
        amount = amount.checked_neg().ok_or_else(|| overflow(name))?;
    }
    let result = match unit.millis() {
        Some(length) => amount.checked_mul(length).and_then(|delta| start.checked_add(delta)),
        None => amount.checked_mul(unit.months()).and_then(|months| add_months(start, months)),
    };
    let millis = result.ok_or_else(|| overflow(name))?;
    Ok(Some(Bson::DateTime(bson::DateTime::from_millis(millis))))
}

/// Day of week 0 = Sunday ... 6 = Saturday from a `startOfWeek` value.
fn start_of_week(name: &str, args: &Args, index: usize, cx: &Context) -> Result<i64, QueryError> {
    if args.get(index).is_none() {
        return Ok(0);
    }
    let value = args.eval(index, cx)?;
    let Some(Bson::String(text)) = &value else {
        return Err(QueryError::new(codes::FAILED_TO_PARSE, format!("{name} requires 'startOfWeek' to be a string, but got {}", type_name(&value))));
    };
    let days = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    let long = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"];
    let lower = text.to_ascii_lowercase();
    days.iter()
        .zip(long.iter())
        .position(|(short, full)| lower == *short || lower == *full)
        .map(|p| p as i64)
        .ok_or_else(|| QueryError::new(codes::FAILED_TO_PARSE, format!("{name}: unknown day of week value: {text}")))
}

/// The first day (days since the epoch) of the week holding `days`.
fn week_start_day(days: i64, first_weekday: i64) -> i64 {
    // 1970-01-01 was a Thursday (weekday 4 when Sunday is 0).
    let weekday = (days + 4).rem_euclid(7);
    days - (weekday - first_weekday).rem_euclid(7)
}

fn month_index(millis: i64) -> i64 {
    let c = civil(millis);
    c.year * 12 + i64::from(c.month) - 1
}

fn eval_date_diff(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let (start, end, unit) = (args.eval(0, cx)?, args.eval(1, cx)?, args.eval(2, cx)?);
    if !require_utc(name, args, 3, cx)? || is_nullish(&start) || is_nullish(&end) || is_nullish(&unit) {
        return Ok(Some(Bson::Null));
    }
    let start = date_millis(name, start.as_ref().expect("nullish checked"))?;
    let end = date_millis(name, end.as_ref().expect("nullish checked"))?;
    let unit = Unit::parse(name, &unit)?;
    let first_weekday = start_of_week(name, args, 4, cx)?;
    // Differences count unit boundaries crossed, not elapsed lengths.
    let difference = match unit {
        Unit::Week => {
            let weeks = |millis: i64| week_start_day(millis.div_euclid(MILLIS_PER_DAY), first_weekday).div_euclid(7);
            weeks(end) - weeks(start)
        }
        Unit::Year | Unit::Quarter | Unit::Month => {
            let months = unit.months();
            month_index(end).div_euclid(months) - month_index(start).div_euclid(months)
        }
        fixed => {
            let length = fixed.millis().expect("fixed unit");
            end.div_euclid(length) - start.div_euclid(length)
        }
    };
    Ok(Some(Bson::Int64(difference)))
}

fn eval_date_trunc(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let (date, unit) = (args.eval(0, cx)?, args.eval(1, cx)?);
    if !require_utc(name, args, 3, cx)? || is_nullish(&date) || is_nullish(&unit) {
        return Ok(Some(Bson::Null));
    }
    let millis = date_millis(name, date.as_ref().expect("nullish checked"))?;
    let unit = Unit::parse(name, &unit)?;
    let bin_size = match args.get(2) {
        None => 1,
        Some(_) => {
            let value = args.eval(2, cx)?;
            if is_nullish(&value) {
                return Ok(Some(Bson::Null));
            }
            let n = integer(name, "binSize", &value)?;
            if n < 1 {
                return Err(QueryError::new(5439018, format!("{name} requires 'binSize' to be greater than 0, but got value {n}")));
            }
            n
        }
    };
    let first_weekday = start_of_week(name, args, 4, cx)?;
    let truncated = match unit {
        Unit::Week if bin_size != 1 => {
            // Where MongoDB anchors multi-week bins is not pinned down
            // here; refuse rather than guess.
            return Err(QueryError::new(codes::COMMAND_NOT_SUPPORTED, "$dateTrunc with unit 'week' and a binSize other than 1 is not supported by Slipstream"));
        }
        Unit::Week => week_start_day(millis.div_euclid(MILLIS_PER_DAY), first_weekday) * MILLIS_PER_DAY,
        Unit::Year | Unit::Quarter | Unit::Month => {
            let bin_months = bin_size.checked_mul(unit.months()).ok_or_else(|| overflow(name))?;
            let since_reference = month_index(millis) - 2000 * 12;
            let index = 2000 * 12 + since_reference.div_euclid(bin_months) * bin_months;
            let (year, month) = (index.div_euclid(12), (index.rem_euclid(12) + 1) as u32);
            days_from_civil(year, month, 1) * MILLIS_PER_DAY
        }
        fixed => {
            let length = fixed.millis().expect("fixed unit").checked_mul(bin_size).ok_or_else(|| overflow(name))?;
            TRUNC_REFERENCE_MILLIS + (millis - TRUNC_REFERENCE_MILLIS).div_euclid(length) * length
        }
    };
    Ok(Some(Bson::DateTime(bson::DateTime::from_millis(truncated))))
}

#[cfg(test)]
mod tests {
    use crate::expr::dates::parse_iso;
    use crate::expr::{Expr, Variables};
    use bson::{bson, doc, Bson};

    fn at(text: &str) -> Bson {
        Bson::DateTime(bson::DateTime::from_millis(parse_iso(text).unwrap()))
    }

    fn eval(expr: Bson) -> Result<Bson, crate::QueryError> {
        Expr::parse(&expr)?.evaluate(&doc! {}, &Variables::empty())
    }

    #[test]
    fn date_add_and_subtract() {
        assert_eq!(eval(bson!({"$dateAdd": {"startDate": at("2021-01-31T10:00:00Z"), "unit": "month", "amount": 1}})).unwrap(), at("2021-02-28T10:00:00Z"));
        assert_eq!(eval(bson!({"$dateAdd": {"startDate": at("2020-02-29T00:00:00Z"), "unit": "year", "amount": 1}})).unwrap(), at("2021-02-28T00:00:00Z"));
        assert_eq!(eval(bson!({"$dateAdd": {"startDate": at("2021-03-10T00:00:00Z"), "unit": "day", "amount": 3}})).unwrap(), at("2021-03-13T00:00:00Z"));
        assert_eq!(eval(bson!({"$dateSubtract": {"startDate": at("2021-03-31T00:00:00Z"), "unit": "quarter", "amount": 1}})).unwrap(), at("2020-12-31T00:00:00Z"));
        assert_eq!(eval(bson!({"$dateAdd": {"startDate": null, "unit": "day", "amount": 3}})).unwrap(), Bson::Null);
        assert_eq!(eval(bson!({"$dateAdd": {"startDate": at("2021-03-10T00:00:00Z"), "unit": "day", "amount": 1.5}})).unwrap_err().code, 5166405);
        assert_eq!(eval(bson!({"$dateAdd": {"startDate": at("2021-03-10T00:00:00Z"), "unit": "fortnight", "amount": 1}})).unwrap_err().code, 9);
        assert_eq!(eval(bson!({"$dateAdd": {"startDate": at("2021-03-10T00:00:00Z"), "unit": "day", "amount": 1, "timezone": "Europe/Paris"}})).unwrap_err().code, 115);
    }

    #[test]
    fn date_diff_counts_boundaries() {
        let diff = |start: &str, end: &str, unit: &str| eval(bson!({"$dateDiff": {"startDate": at(start), "endDate": at(end), "unit": unit}})).unwrap();
        assert_eq!(diff("2021-12-31T23:59:00Z", "2022-01-01T00:01:00Z", "year"), Bson::Int64(1));
        assert_eq!(diff("2021-12-31T23:59:00Z", "2022-01-01T00:01:00Z", "day"), Bson::Int64(1));
        assert_eq!(diff("2021-01-01T00:00:00Z", "2021-03-15T00:00:00Z", "month"), Bson::Int64(2));
        assert_eq!(diff("2021-03-15T00:00:00Z", "2021-01-01T00:00:00Z", "month"), Bson::Int64(-2));
        assert_eq!(diff("2021-01-01T00:00:00Z", "2021-01-01T01:30:00Z", "minute"), Bson::Int64(90));
        // 2021-01-02 is a Saturday, 2021-01-03 a Sunday.
        assert_eq!(diff("2021-01-02T00:00:00Z", "2021-01-03T00:00:00Z", "week"), Bson::Int64(1));
        let monday = eval(bson!({"$dateDiff": {"startDate": at("2021-01-02T00:00:00Z"), "endDate": at("2021-01-03T00:00:00Z"), "unit": "week", "startOfWeek": "monday"}})).unwrap();
        assert_eq!(monday, Bson::Int64(0));
    }

    #[test]
    fn date_trunc_bins_from_the_reference() {
        let trunc = |date: &str, unit: &str, bin: i32| eval(bson!({"$dateTrunc": {"date": at(date), "unit": unit, "binSize": bin}})).unwrap();
        assert_eq!(trunc("2021-03-20T11:30:05Z", "hour", 1), at("2021-03-20T11:00:00Z"));
        assert_eq!(trunc("2021-03-20T11:30:05Z", "hour", 2), at("2021-03-20T10:00:00Z"));
        assert_eq!(trunc("2021-03-20T11:30:05Z", "month", 1), at("2021-03-01T00:00:00Z"));
        assert_eq!(trunc("2021-03-20T11:30:05Z", "quarter", 1), at("2021-01-01T00:00:00Z"));
        assert_eq!(trunc("2021-03-20T11:30:05Z", "year", 5), at("2020-01-01T00:00:00Z"));
        assert_eq!(trunc("2021-03-20T11:30:05Z", "week", 1), at("2021-03-14T00:00:00Z"));
        assert_eq!(trunc("1999-12-31T23:00:00Z", "day", 1), at("1999-12-31T00:00:00Z"));
    }
}
