//! RFC 3339 times in UTC (`2026-11-26T17:00:00Z`, fractions of a second
//! allowed) as ns since the epoch, for `stream cat --from TIME`: the one
//! form the CLI needs, without a calendar dependency.

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// days-from-civil, public domain).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z` (or a space for the `T`, `+00:00`
/// for the `Z`); `None` for anything else.
pub fn rfc3339_utc(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z').or_else(|| s.strip_suffix("+00:00"))?;
    let b = s.as_bytes();
    if b.len() < 19 || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut ns = 0i64;
    if b.len() > 19 {
        let frac = s.get(20..)?;
        if b[19] != b'.'
            || frac.is_empty()
            || frac.len() > 9
            || !frac.bytes().all(|c| c.is_ascii_digit())
        {
            return None;
        }
        ns = frac.parse::<i64>().ok()? * 10i64.pow(9 - frac.len() as u32);
    }
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se;
    secs.checked_mul(1_000_000_000)?.checked_add(ns)
}

#[cfg(test)]
mod tests {
    use super::rfc3339_utc;

    #[test]
    fn times() {
        assert_eq!(rfc3339_utc("1970-01-01T00:00:00Z"), Some(0));
        // `date -u -d 2026-11-26T17:00:00Z +%s` = 1795712400
        assert_eq!(
            rfc3339_utc("2026-11-26T17:00:00Z"),
            Some(1_795_712_400_000_000_000)
        );
        assert_eq!(
            rfc3339_utc("2000-02-29 12:34:56.5+00:00"),
            Some(951_827_696_500_000_000)
        );
        for bad in [
            "2026-11-26",
            "2026-13-01T00:00:00Z",
            "2026-11-26T17:00:00",
            "x",
        ] {
            assert_eq!(rfc3339_utc(bad), None, "{bad}");
        }
    }
}
