//! A token bucket whose rate can be changed while it runs.
//!
//! Seed 002's recovery was "raise the connection throttle step by step";
//! seed 003's was "tune the syncer creation rate limit", which turned out to
//! be stale or unset. Here the rate is a first-class, observable value:
//! [`TokenBucket::set_rate`] changes it at run time without losing the
//! tokens already earned or granting a burst.
//!
//! Arithmetic is in integer micro-tokens so the bucket is exact and
//! deterministic; rates are clamped to
//! [`guildhall_limits::TOKEN_BUCKET_RATE_PER_S_MAX`].

const MICRO: u64 = 1_000_000;

/// Refused: try again in `retry_after_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimited {
    /// When enough tokens will have accrued (never 0).
    pub retry_after_ms: u64,
}

/// Tokens accrue at `rate_per_s` up to `burst`.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate_per_s: u32,
    burst: u32,
    micro_tokens: u64,
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket at `now_ms`.
    ///
    /// ```
    /// use guildhall_control::token_bucket::TokenBucket;
    /// let mut bucket = TokenBucket::new(0, 10, 2); // 10/s, burst 2
    /// assert!(bucket.try_take(0, 1).is_ok());
    /// assert!(bucket.try_take(0, 1).is_ok());
    /// assert_eq!(bucket.try_take(0, 1).unwrap_err().retry_after_ms, 100);
    /// assert!(bucket.try_take(100, 1).is_ok());
    /// ```
    pub fn new(now_ms: u64, rate_per_s: u32, burst: u32) -> Self {
        let burst = burst.max(1);
        Self {
            rate_per_s: rate_per_s.min(guildhall_limits::TOKEN_BUCKET_RATE_PER_S_MAX),
            burst,
            micro_tokens: u64::from(burst) * MICRO,
            last_ms: now_ms,
        }
    }

    fn refill(&mut self, now_ms: u64) {
        if now_ms > self.last_ms {
            let earned =
                (now_ms - self.last_ms).saturating_mul(u64::from(self.rate_per_s)) * (MICRO / 1000);
            self.micro_tokens = self
                .micro_tokens
                .saturating_add(earned)
                .min(u64::from(self.burst) * MICRO);
            self.last_ms = now_ms;
        }
    }

    /// Takes `n` tokens or says when to come back.
    pub fn try_take(&mut self, now_ms: u64, n: u32) -> Result<(), RateLimited> {
        self.refill(now_ms);
        let need = u64::from(n) * MICRO;
        if self.micro_tokens >= need {
            self.micro_tokens -= need;
            return Ok(());
        }
        let missing = need - self.micro_tokens;
        let retry_after_ms = if self.rate_per_s == 0 || n > self.burst {
            u64::MAX
        } else {
            missing
                .div_ceil(u64::from(self.rate_per_s) * (MICRO / 1000))
                .max(1)
        };
        Err(RateLimited { retry_after_ms })
    }

    /// Changes the rate from `now_ms` on; tokens earned so far are kept.
    pub fn set_rate(&mut self, now_ms: u64, rate_per_s: u32) {
        self.refill(now_ms);
        self.rate_per_s = rate_per_s.min(guildhall_limits::TOKEN_BUCKET_RATE_PER_S_MAX);
    }

    /// The rate.
    pub fn rate_per_s(&self) -> u32 {
        self.rate_per_s
    }

    /// Whole tokens available at `now_ms`.
    pub fn available(&mut self, now_ms: u64) -> u64 {
        self.refill(now_ms);
        self.micro_tokens / MICRO
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rate_change_applies_from_now_without_a_burst() {
        let mut bucket = TokenBucket::new(0, 1, 1);
        bucket.try_take(0, 1).unwrap();
        bucket.set_rate(500, 100); // half a token earned at the old rate
        assert!(bucket.try_take(500, 1).is_err());
        assert!(bucket.try_take(505, 1).is_ok());
        assert_eq!(bucket.available(10_000), 1, "burst caps what accrues");
    }

    proptest! {
        /// Tokens granted over any interval never exceed burst + rate × time.
        #[test]
        fn never_grants_more_than_rate_allows(
            rate in 1u32..5000, burst in 1u32..100,
            steps in proptest::collection::vec((0u64..50, 1u32..5), 1..500),
        ) {
            let mut bucket = TokenBucket::new(0, rate, burst);
            let (mut now, mut granted) = (0u64, 0u64);
            for (dt, n) in steps {
                now += dt;
                if bucket.try_take(now, n).is_ok() {
                    granted += u64::from(n);
                }
                let allowed = u64::from(burst) + (u64::from(rate) * now) / 1000;
                prop_assert!(granted <= allowed, "granted {granted} > allowed {allowed}");
            }
        }
    }
}
