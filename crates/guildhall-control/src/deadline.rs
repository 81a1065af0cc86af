//! Absolute deadlines that travel with a request.
//!
//! Seed 000: the API timed out and retried while the router was still
//! working on the abandoned requests. A deadline is an absolute time (not a
//! timeout, which each hop would restart); every hop checks it before
//! starting work and drops work whose caller has already given up.

/// The request must be finished by `at_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline {
    /// Absolute time, in the same clock as every `now_ms`.
    pub at_ms: u64,
}

/// The deadline passed before the work started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired;

impl Deadline {
    /// A deadline `budget_ms` after `now_ms`.
    pub fn after(now_ms: u64, budget_ms: u64) -> Self {
        Self {
            at_ms: now_ms.saturating_add(budget_ms),
        }
    }

    /// Time left (0 once passed).
    pub fn remaining_ms(&self, now_ms: u64) -> u64 {
        self.at_ms.saturating_sub(now_ms)
    }

    /// Whether the caller has given up.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        now_ms >= self.at_ms
    }

    /// Gate before starting work: expired work is never started.
    ///
    /// ```
    /// use guildhall_control::deadline::{Deadline, Expired};
    /// let deadline = Deadline::after(1_000, 200);
    /// assert_eq!(deadline.check_start(1_100), Ok(()));
    /// assert_eq!(deadline.check_start(1_200), Err(Expired));
    /// ```
    pub fn check_start(&self, now_ms: u64) -> Result<(), Expired> {
        if self.is_expired(now_ms) {
            Err(Expired)
        } else {
            Ok(())
        }
    }

    /// The tighter of two deadlines (a hop never extends its caller's).
    pub fn min(self, other: Deadline) -> Deadline {
        if self.at_ms <= other.at_ms {
            self
        } else {
            other
        }
    }
}
