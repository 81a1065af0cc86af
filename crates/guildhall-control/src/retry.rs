//! Retry budget and backoff.
//!
//! Seed 000: "amplified by API retries, which overflowed the subscription
//! queue". Retries are useful for a lone failure and poison during overload.
//! A [`RetryBudget`] lets retries add at most a ratio of first attempts (plus
//! a small floor per second) over a sliding window, so a failing dependency
//! sees at most (1 + ratio) × the normal load instead of a multiple of it.
//! [`backoff_full_jitter_ms`] spreads the retries that are allowed.

/// Finagle-style retry budget over a sliding window of fixed buckets.
#[derive(Clone, Debug)]
pub struct RetryBudget {
    ratio_permille: u32,
    floor_per_s: u32,
    window_ms: u64,
    bucket_ms: u64,
    /// (bucket index, first attempts, retries) ring of fixed size.
    buckets: Vec<(u64, u64, u64)>,
    /// Retries refused so far.
    pub refused_total: u64,
}

impl RetryBudget {
    /// A budget of `ratio_permille` of first attempts plus `floor_per_s`,
    /// counted over `window_ms` split into `buckets` buckets.
    pub fn new(ratio_permille: u32, floor_per_s: u32, window_ms: u64, buckets: usize) -> Self {
        let buckets = buckets.max(1);
        let window_ms = window_ms.max(buckets as u64);
        Self {
            ratio_permille,
            floor_per_s,
            window_ms,
            bucket_ms: window_ms / buckets as u64,
            buckets: vec![(u64::MAX, 0, 0); buckets],
            refused_total: 0,
        }
    }

    /// The defaults of [`guildhall_limits`]: 20 % of first attempts plus 10
    /// per second, over 10 s.
    ///
    /// ```
    /// use guildhall_control::retry::RetryBudget;
    /// let mut budget = RetryBudget::with_defaults();
    /// for t in 0..1_000 {
    ///     budget.on_first_attempt(t); // 1,000 first attempts in 1 s
    /// }
    /// let granted = (0..1_000).filter(|_| budget.try_retry(1_000)).count();
    /// assert_eq!(granted, 200 + 100); // 20 % + 10/s × 10 s, then no more
    /// ```
    pub fn with_defaults() -> Self {
        use guildhall_limits as l;
        Self::new(
            l::RETRY_BUDGET_RATIO_PERMILLE,
            l::RETRY_BUDGET_FLOOR_PER_S,
            l::RETRY_BUDGET_WINDOW_MS,
            l::RETRY_BUDGET_BUCKETS,
        )
    }

    fn slot(&mut self, now_ms: u64) -> &mut (u64, u64, u64) {
        let index = now_ms / self.bucket_ms;
        let len = self.buckets.len();
        let slot = &mut self.buckets[(index % len as u64) as usize];
        if slot.0 != index {
            *slot = (index, 0, 0);
        }
        slot
    }

    fn totals(&self, now_ms: u64) -> (u64, u64) {
        let index = now_ms / self.bucket_ms;
        let oldest = index.saturating_sub(self.buckets.len() as u64 - 1);
        self.buckets
            .iter()
            .filter(|(i, _, _)| *i != u64::MAX && *i >= oldest && *i <= index)
            .fold((0, 0), |(f, r), (_, bf, br)| (f + bf, r + br))
    }

    /// Records a first attempt.
    pub fn on_first_attempt(&mut self, now_ms: u64) {
        self.slot(now_ms).1 += 1;
    }

    /// Asks to retry; records the retry if allowed.
    pub fn try_retry(&mut self, now_ms: u64) -> bool {
        let (firsts, retries) = self.totals(now_ms);
        let allowed = firsts * u64::from(self.ratio_permille) / 1000
            + u64::from(self.floor_per_s) * self.window_ms / 1000;
        if retries < allowed {
            self.slot(now_ms).2 += 1;
            true
        } else {
            self.refused_total += 1;
            false
        }
    }
}

/// Full-jitter exponential backoff (AWS architecture blog): a delay drawn
/// uniformly from `[0, min(cap, base × 2^attempt)]`. `unit` is a random number
/// in `[0, 1)` supplied by the caller (this crate has no randomness source).
///
/// ```
/// use guildhall_control::retry::backoff_full_jitter_ms;
/// assert_eq!(backoff_full_jitter_ms(0, 100, 30_000, 0.5), 50);
/// assert_eq!(backoff_full_jitter_ms(20, 100, 30_000, 0.999), 29_970);
/// ```
pub fn backoff_full_jitter_ms(attempt: u32, base_ms: u64, cap_ms: u64, unit: f64) -> u64 {
    let ceiling = base_ms.saturating_mul(1u64 << attempt.min(32)).min(cap_ms);
    (ceiling as f64 * unit.clamp(0.0, 1.0)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quiet_client_may_retry_a_lone_failure() {
        let mut budget = RetryBudget::with_defaults();
        budget.on_first_attempt(0);
        assert!(budget.try_retry(1));
    }

    #[test]
    fn old_attempts_leave_the_window() {
        let mut budget = RetryBudget::new(1000, 0, 1000, 10);
        budget.on_first_attempt(0);
        assert!(budget.try_retry(50));
        assert!(!budget.try_retry(60));
        budget.on_first_attempt(2_000);
        assert!(
            budget.try_retry(2_001),
            "window slid: the old retry no longer counts"
        );
    }

    proptest! {
        /// Whenever a retry is granted, the retries in the budget's window
        /// (this one included) are within ratio × first attempts + floor.
        #[test]
        fn retries_never_exceed_ratio_plus_floor(
            ratio in 0u32..1000, floor in 0u32..20,
            events in proptest::collection::vec((0u64..30, proptest::bool::ANY), 1..2000),
        ) {
            let mut budget = RetryBudget::new(ratio, floor, 1_000, 10);
            let mut now = 0;
            let mut log: Vec<(u64, bool)> = Vec::new(); // (time, is_retry)
            for (dt, retry) in events {
                now += dt;
                if !retry {
                    budget.on_first_attempt(now);
                    log.push((now, false));
                    continue;
                }
                if budget.try_retry(now) {
                    log.push((now, true));
                    // The window the budget counts: its ten 100 ms buckets.
                    let oldest = (now / 100).saturating_sub(9) * 100;
                    let firsts = log.iter().filter(|(t, r)| *t >= oldest && !r).count() as u64;
                    let retries = log.iter().filter(|(t, r)| *t >= oldest && *r).count() as u64;
                    prop_assert!(retries <= firsts * u64::from(ratio) / 1000 + u64::from(floor));
                }
            }
        }

        #[test]
        fn backoff_stays_within_cap(attempt in 0u32..100, unit in 0.0f64..1.0) {
            prop_assert!(backoff_full_jitter_ms(attempt, 100, 30_000, unit) <= 30_000);
        }
    }
}
