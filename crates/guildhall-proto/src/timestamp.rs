//! ISO 8601 timestamps as Discord sends them:
//! `2024-01-01T00:00:00.000000+00:00`. Microsecond precision and a `+00:00`
//! offset, never `Z`: Python's `datetime.fromisoformat` before 3.11 rejects
//! `Z`, and discord.py parses every timestamp with it.
//!
//! Written by hand (Howard Hinnant's `civil_from_days`, public domain):
//! formatting one fixed shape does not justify a date-time crate in the wire
//! crate, and the algorithm is exhaustively checked below.

/// Formats Unix milliseconds.
///
/// ```
/// use guildhall_proto::timestamp::format_unix_ms;
/// assert_eq!(format_unix_ms(1_704_067_200_000), "2024-01-01T00:00:00.000000+00:00");
/// assert_eq!(format_unix_ms(1_420_070_400_123), "2015-01-01T00:00:00.123000+00:00");
/// ```
pub fn format_unix_ms(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let micros = (unix_ms % 1000) * 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}+00:00",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// (year, month, day) of days since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(format_unix_ms(0), "1970-01-01T00:00:00.000000+00:00");
        assert_eq!(
            format_unix_ms(951_782_400_000),
            "2000-02-29T00:00:00.000000+00:00"
        );
        assert_eq!(
            format_unix_ms(4_102_444_799_999),
            "2099-12-31T23:59:59.999000+00:00"
        );
    }

    /// Every day from 1970 to 2200 follows the previous one.
    #[test]
    fn days_are_contiguous() {
        let mut prev = civil_from_days(0);
        for day in 1..84_000 {
            let next = civil_from_days(day);
            let (py, pm, pd) = prev;
            let ok =
                (next == (py, pm, pd + 1)) || (next == (py, pm + 1, 1)) || (next == (py + 1, 1, 1));
            assert!(ok, "{prev:?} -> {next:?}");
            prev = next;
        }
    }
}
