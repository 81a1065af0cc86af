//! A circuit breaker per dependency (one per SFU in the voice role).
//!
//! Seed 003: syncers kept sending RPCs to SFUs that could not answer, and
//! the pending retries filled the mailboxes. After `failures_max`
//! consecutive failures the breaker opens: callers are refused at once for
//! `cool_down_ms` (and the voice role moves the SFU's calls elsewhere).
//! Then one probe is let through (half-open): its success closes the
//! breaker, its failure opens it for another cool-down.

/// The breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Requests flow; `failures` consecutive ones failed.
    Closed {
        /// Consecutive failures so far.
        failures: u32,
    },
    /// Refusing until `until_ms`.
    Open {
        /// When a probe may go.
        until_ms: u64,
    },
    /// One probe is out; others are refused until it answers.
    HalfOpen,
}

/// A consecutive-failure circuit breaker.
#[derive(Clone, Debug)]
pub struct Breaker {
    failures_max: u32,
    cool_down_ms: u64,
    state: BreakerState,
    /// Times it opened.
    pub opened_total: u64,
}

impl Breaker {
    /// A closed breaker.
    ///
    /// ```
    /// use guildhall_control::breaker::Breaker;
    /// let mut breaker = Breaker::new(2, 1_000);
    /// breaker.on_failure(0);
    /// assert!(breaker.allow(0));
    /// breaker.on_failure(0);
    /// assert!(!breaker.allow(999)); // open
    /// assert!(breaker.allow(1_000)); // the probe
    /// assert!(!breaker.allow(1_000)); // only one
    /// breaker.on_success();
    /// assert!(breaker.allow(1_000));
    /// ```
    pub fn new(failures_max: u32, cool_down_ms: u64) -> Self {
        Self {
            failures_max: failures_max.max(1),
            cool_down_ms,
            state: BreakerState::Closed { failures: 0 },
            opened_total: 0,
        }
    }

    /// The state.
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Whether it is open (or half-open with its probe out) at `now_ms`:
    /// what a caller choosing among dependencies wants to know, without
    /// taking the probe.
    pub fn is_open(&self, now_ms: u64) -> bool {
        match self.state {
            BreakerState::Closed { .. } => false,
            BreakerState::Open { until_ms } => now_ms < until_ms,
            BreakerState::HalfOpen => true,
        }
    }

    /// Whether a request may go at `now_ms`; after the cool-down, the first
    /// caller takes the probe.
    pub fn allow(&mut self, now_ms: u64) -> bool {
        match self.state {
            BreakerState::Closed { .. } => true,
            BreakerState::Open { until_ms } if now_ms >= until_ms => {
                self.state = BreakerState::HalfOpen;
                true
            }
            BreakerState::Open { .. } | BreakerState::HalfOpen => false,
        }
    }

    /// A request succeeded.
    pub fn on_success(&mut self) {
        self.state = BreakerState::Closed { failures: 0 };
    }

    /// A request failed at `now_ms`. Returns whether this opened the
    /// breaker.
    pub fn on_failure(&mut self, now_ms: u64) -> bool {
        let open = match self.state {
            BreakerState::Closed { failures } => failures + 1 >= self.failures_max,
            BreakerState::HalfOpen => true,
            // A late answer to a request sent before it opened.
            BreakerState::Open { .. } => false,
        };
        if open {
            self.state = BreakerState::Open {
                until_ms: now_ms.saturating_add(self.cool_down_ms),
            };
            self.opened_total += 1;
        } else if let BreakerState::Closed { failures } = self.state {
            self.state = BreakerState::Closed {
                failures: failures + 1,
            };
        }
        open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_a_success_resets() {
        let mut b = Breaker::new(3, 100);
        b.on_failure(0);
        b.on_failure(0);
        b.on_success();
        assert!(!b.on_failure(0));
        assert!(!b.on_failure(0));
        assert!(b.on_failure(5));
        assert!(b.is_open(104) && !b.allow(104));
        assert!(!b.is_open(105));
        assert!(b.allow(105));
        assert!(b.on_failure(106), "a failed probe reopens");
        assert_eq!(b.state(), BreakerState::Open { until_ms: 206 });
        assert_eq!(b.opened_total, 2);
        assert!(!b.on_failure(150), "late answers do not extend it");
    }
}
