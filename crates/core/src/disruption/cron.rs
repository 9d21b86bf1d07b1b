//! A cron matcher for budget schedules: the five standard fields (minute, hour, day of month, month,
//! day of week) with `*`, `?`, lists, ranges, steps and month/day names, plus the `@yearly`,
//! `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight` and `@hourly` macros — the syntax
//! upstream's NodePool budgets accept (`pkg/apis/v1/nodepool.go` parses with robfig/cron's standard
//! parser; the CRD pattern admits exactly those macros). Times are UTC, as upstream evaluates them.
//!
//! Pure arithmetic on Unix seconds: no time zone database, no clock.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

/// A parsed schedule: the allowed values of each field as bit sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    /// Day of month and day of week both restricted: a day matches when either does (cron's rule);
    /// when one of them is `*` or `?`, both must match.
    either_day: bool,
}

/// Why a schedule could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cron schedule {schedule:?}: {reason}; write five fields (minute hour day-of-month month day-of-week) such as \"0 9 * * mon-fri\", or a macro such as @daily")]
pub struct CronError {
    pub schedule: String,
    pub reason: String,
}

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field { name: "minute", min: 0, max: 59, names: &[] };
const HOUR: Field = Field { name: "hour", min: 0, max: 23, names: &[] };
const DAY_OF_MONTH: Field = Field { name: "day of month", min: 1, max: 31, names: &[] };
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
};
const DAY_OF_WEEK: Field =
    Field { name: "day of week", min: 0, max: 6, names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"] };

impl Cron {
    pub fn parse(schedule: &str) -> Result<Cron, CronError> {
        let err = |reason: String| CronError { schedule: schedule.to_string(), reason };
        let expanded = match schedule.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => return Err(err(format!("unknown macro {other}"))),
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(err(format!("it has {} fields, not 5", fields.len())));
        }
        let parse = |text: &str, field: &Field| parse_field(text, field).map_err(err);
        let unrestricted = |text: &str| text.starts_with('*') || text.starts_with('?');
        Ok(Cron {
            minutes: parse(fields[0], &MINUTE)?,
            hours: parse(fields[1], &HOUR)?,
            days_of_month: parse(fields[2], &DAY_OF_MONTH)?,
            months: parse(fields[3], &MONTH)?,
            days_of_week: parse(fields[4], &DAY_OF_WEEK)?,
            either_day: !unrestricted(fields[2]) && !unrestricted(fields[4]),
        })
    }

    /// Whether the schedule fires at the minute that contains `at`.
    pub fn matches(&self, at: Timestamp) -> bool {
        let t = Civil::from_unix_minute(at.as_second().div_euclid(60));
        self.matches_civil(&t)
    }

    fn matches_civil(&self, t: &Civil) -> bool {
        let bit = |set: u64, v: u32| set & (1 << v) != 0;
        let dom = bit(self.days_of_month, t.day);
        let dow = bit(self.days_of_week, t.weekday);
        let day = if self.either_day { dom || dow } else { dom && dow };
        day && bit(self.months, t.month) && bit(self.hours, t.hour) && bit(self.minutes, t.minute)
    }

    /// The latest firing at or before `now` and after `now - window`, if any: a budget with this
    /// schedule and a `duration` of `window` is active exactly when there is one (upstream
    /// `Budget.IsActive`: the next firing after `now - duration` is not after `now`).
    pub fn last_fire_within(&self, now: Timestamp, window: Duration) -> Option<Timestamp> {
        let now_minute = now.as_second().div_euclid(60);
        let window_seconds = window.as_secs() as i64;
        let earliest = now.as_second() - window_seconds; // exclusive
        let mut minute = now_minute;
        while minute * 60 > earliest {
            let civil = Civil::from_unix_minute(minute);
            if !self.day_matches(&civil) {
                // Skip to the last minute of the previous day.
                minute = minute - i64::from(civil.hour * 60 + civil.minute) - 1;
                continue;
            }
            if self.matches_civil(&civil) {
                return Timestamp::from_second(minute * 60).ok();
            }
            minute -= 1;
        }
        None
    }

    fn day_matches(&self, t: &Civil) -> bool {
        let bit = |set: u64, v: u32| set & (1 << v) != 0;
        let dom = bit(self.days_of_month, t.day);
        let dow = bit(self.days_of_week, t.weekday);
        let day = if self.either_day { dom || dow } else { dom && dow };
        day && bit(self.months, t.month)
    }
}

/// One comma-separated field as a bit set.
fn parse_field(text: &str, field: &Field) -> Result<u64, String> {
    let mut set = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 =
                    s.parse().map_err(|_| format!("step {s:?} of the {} is not a number", field.name))?;
                if step == 0 {
                    return Err(format!("step 0 in the {}", field.name));
                }
                (r, Some(step))
            }
            None => (part, None),
        };
        let (low, high) = if range == "*" || range == "?" {
            (field.min, field.max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, field)?, value(b, field)?)
        } else {
            let v = value(range, field)?;
            // `5/15` means from 5 to the end in steps of 15.
            (v, if step.is_some() { field.max } else { v })
        };
        if low > high {
            return Err(format!("range {range:?} of the {} runs backwards", field.name));
        }
        let step = step.unwrap_or(1);
        let mut v = low;
        while v <= high {
            set |= 1 << v;
            v += step;
        }
    }
    Ok(set)
}

fn value(text: &str, field: &Field) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = field.names.iter().position(|n| *n == lower) {
        return Ok(field.min + i as u32);
    }
    let v: u32 = text.parse().map_err(|_| format!("{text:?} is not a valid {}", field.name))?;
    if v < field.min || v > field.max {
        return Err(format!("{v} is outside the {} range {}-{}", field.name, field.min, field.max));
    }
    Ok(v)
}

/// A UTC minute broken into calendar fields.
struct Civil {
    month: u32,
    day: u32,
    /// 0 = Sunday.
    weekday: u32,
    hour: u32,
    minute: u32,
}

impl Civil {
    fn from_unix_minute(minute: i64) -> Civil {
        let days = minute.div_euclid(24 * 60);
        let minute_of_day = minute.rem_euclid(24 * 60) as u32;
        let (month, day) = month_day_from_days(days);
        Civil {
            month,
            day,
            // 1970-01-01 was a Thursday.
            weekday: (days + 4).rem_euclid(7) as u32,
            hour: minute_of_day / 60,
            minute: minute_of_day % 60,
        }
    }
}

/// Month and day of the proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn month_day_from_days(days: i64) -> (u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn fields_match_calendar_times() {
        let weekdays_nine = Cron::parse("0 9 * * mon-fri").unwrap();
        assert!(weekdays_nine.matches(at("2026-12-01T09:00:30Z")), "a Tuesday at 09:00");
        assert!(!weekdays_nine.matches(at("2026-12-06T09:00:00Z")), "a Sunday");
        assert!(!weekdays_nine.matches(at("2026-12-01T09:01:00Z")));
        let steps = Cron::parse("*/15 0-6,22 1,15 */2 *").unwrap();
        assert!(steps.matches(at("2026-01-15T22:45:00Z")));
        assert!(!steps.matches(at("2026-02-15T22:45:00Z")), "February is not in */2 from 1");
        assert!(!steps.matches(at("2026-01-15T21:45:00Z")));
        assert!(Cron::parse("@daily").unwrap().matches(at("2024-02-29T00:00:00Z")));
        assert!(Cron::parse("@yearly").unwrap().matches(at("2027-01-01T00:00:59Z")));
        assert!(Cron::parse("@weekly").unwrap().matches(at("2026-12-06T00:00:00Z")), "a Sunday");
        assert!(Cron::parse("0 * * DEC ?").unwrap().matches(at("2026-12-31T23:00:00Z")));
    }

    #[test]
    fn day_of_month_or_day_of_week_when_both_are_restricted() {
        let either = Cron::parse("0 0 13 * fri").unwrap();
        assert!(either.matches(at("2026-12-13T00:00:00Z")), "the 13th, a Sunday");
        assert!(either.matches(at("2026-12-04T00:00:00Z")), "a Friday, the 4th");
        assert!(!either.matches(at("2026-12-05T00:00:00Z")));
        let both = Cron::parse("0 0 */2 * fri").unwrap();
        assert!(both.matches(at("2026-12-11T00:00:00Z")), "odd day and a Friday: the OR rule");
    }

    #[test]
    fn last_fire_within_a_window() {
        let nine = Cron::parse("0 9 * * *").unwrap();
        let eight_hours = Duration::from_secs(8 * 3600);
        assert_eq!(
            nine.last_fire_within(at("2026-12-01T16:59:59Z"), eight_hours),
            Some(at("2026-12-01T09:00:00Z"))
        );
        assert_eq!(
            nine.last_fire_within(at("2026-12-01T17:00:00Z"), eight_hours),
            None,
            "the window is half-open"
        );
        assert_eq!(nine.last_fire_within(at("2026-12-01T08:59:00Z"), eight_hours), None);
        let monthly = Cron::parse("@monthly").unwrap();
        let long = Duration::from_secs(40 * 24 * 3600);
        assert_eq!(
            monthly.last_fire_within(at("2026-03-10T05:00:00Z"), long),
            Some(at("2026-03-01T00:00:00Z"))
        );
    }

    #[test]
    fn bad_schedules_name_the_field() {
        for (text, part) in [
            ("0 9 * *", "4 fields"),
            ("60 * * * *", "minute range"),
            ("* 24 * * *", "hour range"),
            ("* * 0 * *", "day of month range"),
            ("* * * 13 *", "month range"),
            ("* * * * 8", "day of week range"),
            ("*/0 * * * *", "step 0"),
            ("5-1 * * * *", "runs backwards"),
            ("@reboot", "unknown macro"),
            ("x * * * *", "not a valid minute"),
        ] {
            let err = Cron::parse(text).unwrap_err().to_string();
            assert!(err.contains(part), "{text}: {err}");
        }
    }
}
