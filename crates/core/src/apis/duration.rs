//! Durations as the CRDs write them: `720h`, `1h30m`, `30s`, or `Never`.
//!
//! The schema patterns in [`crate::apis::validation`] only admit whole numbers of hours, minutes and
//! seconds, so parsing is exact and needs no floating point.

use std::time::Duration;

/// A duration that may be `Never` (expireAfter, consolidateAfter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum NillableDuration {
    After(Duration),
    Never,
}

/// Why a duration string could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid duration {value:?}: {reason}; write whole hours, minutes and seconds such as 720h, 1h30m or 90s"
)]
pub struct DurationError {
    pub value: String,
    pub reason: &'static str,
}

/// Parses `1h30m`, `90s`, `0s`. `Never` is not accepted here; see [`parse_nillable`].
pub fn parse(value: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError { value: value.to_string(), reason };
    if value.is_empty() {
        return Err(err("it is empty"));
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in value.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return Err(err("only the units h, m and s are allowed")),
        };
        if digits.is_empty() {
            return Err(err("a unit must follow a number"));
        }
        let n: u64 = digits.parse().map_err(|_| err("the number is too large"))?;
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(|| err("the duration is too large"))?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(err("the last number has no unit"));
    }
    Ok(Duration::from_secs(total))
}

/// Parses a duration or `Never`.
pub fn parse_nillable(value: &str) -> Result<NillableDuration, DurationError> {
    if value == "Never" {
        return Ok(NillableDuration::Never);
    }
    parse(value).map(NillableDuration::After)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_style_durations() {
        assert_eq!(parse("720h"), Ok(Duration::from_secs(720 * 3600)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_nillable("Never"), Ok(NillableDuration::Never));
        assert_eq!(parse_nillable("30s"), Ok(NillableDuration::After(Duration::from_secs(30))));
    }

    #[test]
    fn rejects_what_the_schema_rejects() {
        for bad in ["", "5", "h", "1.5h", "1d", "never", "-1h"] {
            assert!(parse_nillable(bad).is_err(), "{bad}");
        }
    }
}
