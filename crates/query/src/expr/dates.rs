//! Date operators, in UTC only. A `timezone` other than UTC answers a
//! clear error instead of a wrong hour. Calendar arithmetic uses the
//! proleptic Gregorian calendar (Howard Hinnant's days-from-civil
//! algorithm), like MongoDB.

use bson::Bson;

use super::{is_nullish, type_name, ArgStyle, Args, Context, Expr, OpSpec, Value};
use crate::error::{codes, QueryError};

pub(super) const MILLIS_PER_DAY: i64 = 86_400_000;

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec { name: "$year", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec { name: "$month", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec { name: "$dayOfMonth", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec { name: "$hour", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec { name: "$minute", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec { name: "$second", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec { name: "$millisecond", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec { name: "$dayOfWeek", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec { name: "$dayOfYear", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec { name: "$week", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec { name: "$isoWeek", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec { name: "$isoWeekYear", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec { name: "$isoDayOfWeek", style: ArgStyle::Custom(parse_date_part), eval: eval_date_part },
    OpSpec {
        name: "$dateToString",
        style: ArgStyle::Named { required: &["date"], optional: &["format", "timezone", "onNull"] },
        eval: eval_date_to_string,
    },
];

/// A broken-down UTC time.
#[derive(Debug, PartialEq)]
pub(super) struct Civil {
    pub(super) year: i64,
    pub(super) month: u32,
    pub(super) day: u32,
    pub(super) hour: u32,
    pub(super) minute: u32,
    pub(super) second: u32,
    pub(super) millisecond: u32,
    /// 1 = Sunday ... 7 = Saturday, as `$dayOfWeek` answers.
    pub(super) day_of_week: u32,
    /// 1 ..= 366.
    pub(super) day_of_year: u32,
}

pub(super) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub(super) fn civil(millis: i64) -> Civil {
    let days = millis.div_euclid(MILLIS_PER_DAY);
    let in_day = millis.rem_euclid(MILLIS_PER_DAY);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    // 1970-01-01 was a Thursday (day 5 when Sunday is 1).
    let day_of_week = ((days + 4).rem_euclid(7) + 1) as u32;
    let day_of_year = (days - days_from_civil(year, 1, 1) + 1) as u32;
    Civil {
        year,
        month,
        day,
        hour: (in_day / 3_600_000) as u32,
        minute: (in_day / 60_000 % 60) as u32,
        second: (in_day / 1000 % 60) as u32,
        millisecond: (in_day % 1000) as u32,
        day_of_week,
        day_of_year,
    }
}

impl Civil {
    /// ISO day of week: Monday = 1 ... Sunday = 7.
    pub(super) fn iso_day_of_week(&self) -> u32 {
        if self.day_of_week == 1 { 7 } else { self.day_of_week - 1 }
    }

    /// `$week` / `%U`: weeks start on Sunday; days before the year's first
    /// Sunday are in week 0.
    fn week(&self) -> u32 {
        (self.day_of_year + 6 - (self.day_of_week - 1)) / 7
    }

    /// ISO 8601 week-numbering year and week (`$isoWeekYear`, `$isoWeek`).
    pub(super) fn iso_week(&self) -> (i64, u32) {
        let week = (self.day_of_year as i64 - self.iso_day_of_week() as i64 + 10) / 7;
        if week < 1 {
            return (self.year - 1, iso_weeks_in_year(self.year - 1));
        }
        if week as u32 > iso_weeks_in_year(self.year) {
            return (self.year + 1, 1);
        }
        (self.year, week as u32)
    }
}

/// 53 when the year starts on a Thursday, or on a Wednesday in a leap
/// year; otherwise 52.
fn iso_weeks_in_year(year: i64) -> u32 {
    let jan1 = civil(days_from_civil(year, 1, 1) * MILLIS_PER_DAY);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match jan1.iso_day_of_week() {
        4 => 53,
        3 if leap => 53,
        _ => 52,
    }
}

/// "YYYY-MM-DDTHH:MM:SS.mmmZ", the form `$toString` gives dates.
pub(crate) fn format_iso(millis: i64) -> String {
    let c = civil(millis);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second, c.millisecond
    )
}

/// Parses "YYYY-MM-DD" with an optional "THH:MM[:SS[.fff]]" and an
/// optional "Z" or "+HH:MM"/"-HH:MM" offset; `None` when malformed.
pub(crate) fn parse_iso(text: &str) -> Option<i64> {
    let number = |s: &str| -> Option<u32> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (date, rest) = text.split_at(text.find(['T', ' ']).unwrap_or(text.len()));
    let mut parts = date.split('-');
    let year = i64::from(number(parts.next()?)?);
    let month = number(parts.next()?)?;
    let day = number(parts.next()?)?;
    if parts.next().is_some() || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let mut millis = days_from_civil(year, month, day) * MILLIS_PER_DAY;
    let time = rest.get(1..).unwrap_or("");
    if time.is_empty() {
        return Some(millis);
    }
    let (clock, offset_millis) = split_offset(time)?;
    let mut fields = clock.split(':');
    let hour = number(fields.next()?)?;
    let minute = number(fields.next()?)?;
    let (second, fraction) = match fields.next() {
        None => (0, 0),
        Some(s) => {
            let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
            let frac_millis = if frac.is_empty() {
                0
            } else {
                let digits: String = frac.chars().chain("000".chars()).take(3).collect();
                number(&digits)?
            };
            (number(whole)?, frac_millis)
        }
    };
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    millis += i64::from(hour) * 3_600_000 + i64::from(minute) * 60_000 + i64::from(second) * 1000 + i64::from(fraction);
    Some(millis - offset_millis)
}

fn split_offset(time: &str) -> Option<(&str, i64)> {
    if let Some(clock) = time.strip_suffix('Z') {
        return Some((clock, 0));
    }
    match time.rfind(['+', '-']) {
        Some(at) => {
            let (clock, offset) = time.split_at(at);
            let sign = if offset.starts_with('-') { -1 } else { 1 };
            let digits = offset[1..].replace(':', "");
            if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let hours: i64 = digits[..2].parse().ok()?;
            let minutes: i64 = digits[2..].parse().ok()?;
            Some((clock, sign * (hours * 3_600_000 + minutes * 60_000)))
        }
        None => Some((time, 0)),
    }
}

/// Date parts accept `<date>`, `[<date>]` or `{date, timezone}`; stored
/// as `[date, timezone?]`.
fn parse_date_part(spec: &'static OpSpec, operand: &Bson) -> Result<Args, QueryError> {
    match operand {
        Bson::Document(d) if d.contains_key("date") => {
            super::parse_named(spec.name, operand, &["date"], &["timezone"])
        }
        Bson::Array(items) if items.len() == 1 => Ok(Args::positional(vec![Expr::parse(&items[0])?])),
        Bson::Array(items) => Err(QueryError::new(
            16020,
            format!("Expression {} takes exactly 1 arguments. {} were passed in.", spec.name, items.len()),
        )),
        other => Ok(Args::positional(vec![Expr::parse(other)?])),
    }
}

/// Checks that a timezone argument, if any, is UTC.
pub(super) fn require_utc(name: &str, args: &Args, index: usize, cx: &Context) -> Result<bool, QueryError> {
    if args.get(index).is_none() {
        return Ok(true);
    }
    match args.eval(index, cx)? {
        None | Some(Bson::Null) => Ok(false),
        Some(Bson::String(tz)) if matches!(tz.as_str(), "UTC" | "GMT" | "Z" | "Etc/UTC" | "+00:00" | "+0000" | "-00:00" | "+00") => Ok(true),
        Some(other) => Err(QueryError::new(
            codes::COMMAND_NOT_SUPPORTED,
            format!("{name}: timezone {other} is not supported; only UTC is"),
        )),
    }
}

/// The milliseconds of a date-like value (date, timestamp, ObjectId).
pub(super) fn date_millis(name: &str, value: &Bson) -> Result<i64, QueryError> {
    match value {
        Bson::DateTime(d) => Ok(d.timestamp_millis()),
        Bson::Timestamp(ts) => Ok(i64::from(ts.time) * 1000),
        Bson::ObjectId(oid) => Ok(oid.timestamp().timestamp_millis()),
        other => Err(QueryError::new(
            16006,
            format!("{name}: can't convert from BSON type {} to Date", type_name(&Some(other.clone()))),
        )),
    }
}

fn eval_date_part(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let value = args.eval(0, cx)?;
    if !require_utc(name, args, 1, cx)? || is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    let c = civil(date_millis(name, value.as_ref().expect("nullish checked"))?);
    let part = match name {
        "$year" => return Ok(Some(Bson::Int32(i32::try_from(c.year).unwrap_or(i32::MAX)))),
        "$month" => c.month,
        "$dayOfMonth" => c.day,
        "$hour" => c.hour,
        "$minute" => c.minute,
        "$second" => c.second,
        "$millisecond" => c.millisecond,
        "$dayOfWeek" => c.day_of_week,
        "$dayOfYear" => c.day_of_year,
        "$week" => c.week(),
        "$isoWeek" => c.iso_week().1,
        "$isoWeekYear" => return Ok(Some(Bson::Int32(i32::try_from(c.iso_week().0).unwrap_or(i32::MAX)))),
        _ => c.iso_day_of_week(),
    };
    Ok(Some(Bson::Int32(part as i32)))
}

fn eval_date_to_string(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let format = match args.get(1) {
        None => "%Y-%m-%dT%H:%M:%S.%LZ".to_string(),
        Some(_) => match args.eval(1, cx)? {
            Some(Bson::String(f)) => f,
            None | Some(Bson::Null) => return Ok(Some(Bson::Null)),
            other => return Err(QueryError::new(18533, format!("$dateToString requires that 'format' be a string, found: {}", type_name(&other)))),
        },
    };
    if !require_utc(name, args, 2, cx)? {
        return Ok(Some(Bson::Null));
    }
    let value = args.eval(0, cx)?;
    if is_nullish(&value) {
        return match args.get(3) {
            Some(_) => args.eval(3, cx),
            None => Ok(Some(Bson::Null)),
        };
    }
    let c = civil(date_millis(name, value.as_ref().expect("nullish checked"))?);
    Ok(Some(Bson::String(format_date(&format, &c)?)))
}

fn format_date(format: &str, c: &Civil) -> Result<String, QueryError> {
    let mut out = String::with_capacity(format.len() + 8);
    let mut chars = format.chars();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        let Some(spec) = chars.next() else {
            return Err(QueryError::new(18535, "Unmatched '%' at end of format string"));
        };
        let piece = match spec {
            'Y' => format!("{:04}", c.year),
            'm' => format!("{:02}", c.month),
            'd' => format!("{:02}", c.day),
            'H' => format!("{:02}", c.hour),
            'M' => format!("{:02}", c.minute),
            'S' => format!("{:02}", c.second),
            'L' => format!("{:03}", c.millisecond),
            'j' => format!("{:03}", c.day_of_year),
            'w' => c.day_of_week.to_string(),
            // ISO day of week: Monday = 1 ... Sunday = 7.
            'u' => c.iso_day_of_week().to_string(),
            'U' => format!("{:02}", c.week()),
            'V' => format!("{:02}", c.iso_week().1),
            'G' => format!("{:04}", c.iso_week().0),
            'z' => "+0000".to_string(),
            'Z' => "0".to_string(),
            '%' => "%".to_string(),
            other => {
                return Err(QueryError::new(18536, format!("Invalid format character '%{other}' in format string")))
            }
        };
        out.push_str(&piece);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Variables;
    use bson::{bson, doc};

    fn eval(expr: Bson) -> Result<Bson, QueryError> {
        // 2014-01-01T08:15:39.736Z, MongoDB's documented example date.
        let d = doc! {"date": bson::DateTime::from_millis(1_388_564_139_736)};
        Expr::parse(&expr)?.evaluate(&d, &Variables::empty())
    }

    #[test]
    fn parts_of_the_documented_example() {
        let expected = [
            ("$year", 2014), ("$month", 1), ("$dayOfMonth", 1), ("$hour", 8), ("$minute", 15),
            ("$second", 39), ("$millisecond", 736), ("$dayOfYear", 1), ("$dayOfWeek", 4),
        ];
        for (op, value) in expected {
            assert_eq!(eval(bson!({op: "$date"})).unwrap(), Bson::Int32(value), "{op}");
        }
        assert_eq!(eval(bson!({"$year": {"date": "$date", "timezone": "UTC"}})).unwrap(), Bson::Int32(2014));
        assert_eq!(eval(bson!({"$year": {"date": "$date", "timezone": "America/Chicago"}})).unwrap_err().code, 115);
        assert_eq!(eval(bson!({"$year": "$absent"})).unwrap(), Bson::Null);
    }

    #[test]
    fn weeks() {
        // 2014-01-01 was a Wednesday; 2016-01-01 a Friday (ISO week 53 of 2015).
        let at = |text: &str| Bson::DateTime(bson::DateTime::from_millis(parse_iso(text).unwrap()));
        let part = |op: &str, text: &str| {
            Expr::parse(&bson!({op: at(text)})).unwrap().evaluate(&doc! {}, &Variables::empty()).unwrap()
        };
        assert_eq!(part("$week", "2014-01-01"), Bson::Int32(0));
        assert_eq!(part("$week", "2014-01-05"), Bson::Int32(1));
        assert_eq!(part("$isoWeek", "2014-01-01"), Bson::Int32(1));
        assert_eq!(part("$isoDayOfWeek", "2014-01-05"), Bson::Int32(7));
        assert_eq!(part("$isoWeek", "2016-01-01"), Bson::Int32(53));
        assert_eq!(part("$isoWeekYear", "2016-01-01"), Bson::Int32(2015));
        assert_eq!(part("$isoWeek", "2018-12-31"), Bson::Int32(1));
        assert_eq!(part("$isoWeekYear", "2018-12-31"), Bson::Int32(2019));
        let formatted = Expr::parse(&bson!({"$dateToString": {"format": "%G-W%V-%u %U", "date": at("2016-01-01")}}))
            .unwrap()
            .evaluate(&doc! {}, &Variables::empty())
            .unwrap();
        assert_eq!(formatted, Bson::from("2015-W53-5 00"));
    }

    #[test]
    fn date_to_string_formats() {
        assert_eq!(eval(bson!({"$dateToString": {"format": "%Y-%m-%d", "date": "$date"}})).unwrap(), Bson::from("2014-01-01"));
        assert_eq!(eval(bson!({"$dateToString": {"format": "%H:%M:%S:%L%z", "date": "$date"}})).unwrap(), Bson::from("08:15:39:736+0000"));
        assert_eq!(eval(bson!({"$dateToString": {"date": "$date"}})).unwrap(), Bson::from("2014-01-01T08:15:39.736Z"));
        assert_eq!(eval(bson!({"$dateToString": {"format": "%j %w %u %%", "date": "$date"}})).unwrap(), Bson::from("001 4 3 %"));
        assert_eq!(eval(bson!({"$dateToString": {"date": "$absent", "onNull": "none"}})).unwrap(), Bson::from("none"));
        assert_eq!(eval(bson!({"$dateToString": {"format": "%Q", "date": "$date"}})).unwrap_err().code, 18536);
    }

    #[test]
    fn civil_round_trips() {
        for millis in [0i64, -1, 951_782_400_000, 1_709_164_800_000, -62_135_596_800_000] {
            assert_eq!(parse_iso(&format_iso(millis)), Some(millis), "{millis}");
        }
        assert_eq!(civil(951_782_400_000).day, 29); // 2000-02-29, a leap day.
        assert_eq!(parse_iso("2018-03-03T04:00:00+01:00"), Some(1_520_046_000_000));
    }
}
