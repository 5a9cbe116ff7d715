//! This machine's clock, read one way: milliseconds since the Unix epoch.
//! Times it gives are written into Paimon's snapshots and the stores'
//! files, and compared with times other processes wrote; where another
//! machine's clock may differ, the caller allows for skew.

/// Milliseconds since the Unix epoch; 0 for a clock set before it.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// [`now_ms`] as the signed milliseconds files record.
pub(crate) fn now_ms_signed() -> i64 {
    i64::try_from(now_ms()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_readings_agree_and_move_forward() {
        let before = now_ms();
        let signed = now_ms_signed();
        let after = now_ms();
        // 2020-01-01 as a floor: a clock that read 0 here would be broken.
        assert!(before > 1_577_836_800_000, "{before}");
        assert!(
            before <= u64::try_from(signed).expect("positive")
                && u64::try_from(signed).expect("positive") <= after
        );
    }
}
