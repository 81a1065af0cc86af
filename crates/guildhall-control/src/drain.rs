//! The drain planner (seed 004).
//!
//! Pods were resized; the handoff could not finish inside Kubernetes' grace
//! period; 17 % of sessions died at once. A drain must *fit*: given the
//! sessions on a node, the grace period, a safety margin and how fast the
//! receiving nodes accept resumes, the planner produces a paced schedule of
//! op 7 RECONNECT batches that ends before `grace − margin`, or says it cannot
//! fit (and readiness should fail before the drain is ever attempted).
//!
//! The schedule uses `utilization` of the receivers' resume capacity rather
//! than all of it: receivers keep headroom for their own clients. When that
//! is too slow to fit, the rate rises up to the full capacity; beyond that the
//! plan does not fit and says how many sessions would be left over.

/// What the planner needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainInput {
    /// Sessions to move.
    pub sessions: u64,
    /// SIGTERM → SIGKILL.
    pub grace_ms: u64,
    /// Kept free at the end (last resumes, flush, exit).
    pub margin_ms: u64,
    /// Resumes per second the receiving nodes accept in total.
    pub resume_cap_per_s: u64,
    /// Share of that capacity to plan for, permille.
    pub utilization_permille: u32,
    /// Time between batches.
    pub batch_interval_ms: u64,
}

impl DrainInput {
    /// Defaults of [`guildhall_limits`] for everything but the sessions and
    /// the receivers' capacity.
    pub fn with_defaults(sessions: u64, resume_cap_per_s: u64) -> Self {
        use guildhall_limits as l;
        Self {
            sessions,
            grace_ms: l::DRAIN_GRACE_MS,
            margin_ms: l::DRAIN_MARGIN_MS,
            resume_cap_per_s,
            utilization_permille: l::DRAIN_RECEIVER_UTILIZATION_PERMILLE,
            batch_interval_ms: l::DRAIN_BATCH_INTERVAL_MS,
        }
    }
}

/// A schedule of RECONNECT batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainPlan {
    /// Whether every session is sent RECONNECT by `deadline_ms`.
    pub fits: bool,
    /// `grace − margin`.
    pub deadline_ms: u64,
    /// Sessions per batch (the last may be smaller).
    pub batch_size: u64,
    /// Time between batch starts.
    pub interval_ms: u64,
    /// Number of batches.
    pub batches: u64,
    /// When the last RECONNECT is sent (jitter included).
    pub last_send_ms: u64,
    /// Sessions a non-fitting plan leaves after the deadline.
    pub sessions_unfit: u64,
    /// Planned RECONNECTs per second.
    pub rate_per_s: u64,
}

/// Plans a drain.
///
/// ```
/// use guildhall_control::drain::{plan, DrainInput};
/// let p = plan(DrainInput::with_defaults(50_000, 5_000));
/// assert!(p.fits);
/// assert!(p.last_send_ms <= 20_000); // 4,000/s: 12.5 s
/// let p = plan(DrainInput::with_defaults(500_000, 5_000));
/// assert!(!p.fits); // 100 s of resumes cannot fit in 25 s
/// ```
pub fn plan(input: DrainInput) -> DrainPlan {
    let deadline_ms = input.grace_ms.saturating_sub(input.margin_ms);
    let interval_ms = input.batch_interval_ms.max(1);
    let cap_per_s = input.resume_cap_per_s.max(1);
    let comfortable = (cap_per_s * u64::from(input.utilization_permille) / 1000).max(1);
    // The rate needed to finish in time; batches are sent at interval starts
    // and spread by jitter over their interval, so the window is the deadline.
    let needed = (input.sessions * 1000).div_ceil(deadline_ms.max(1));
    let rate_per_s = comfortable.max(needed).min(cap_per_s);
    let batch_size = (rate_per_s * interval_ms / 1000).max(1);
    let batches = input.sessions.div_ceil(batch_size);
    let last_send_ms = batches.saturating_mul(interval_ms).saturating_sub(1);
    let fits = input.sessions == 0 || last_send_ms < deadline_ms;
    let sessions_unfit = if fits {
        0
    } else {
        input
            .sessions
            .saturating_sub(deadline_ms / interval_ms * batch_size)
    };
    DrainPlan {
        fits,
        deadline_ms,
        batch_size,
        interval_ms,
        batches,
        last_send_ms: if input.sessions == 0 { 0 } else { last_send_ms },
        sessions_unfit,
        rate_per_s,
    }
}

impl DrainPlan {
    /// When session number `index` (0-based, in the order the node chooses)
    /// is sent RECONNECT: its batch's start plus `unit` (random in `[0, 1)`)
    /// of the interval, so a batch arrives spread out rather than as a spike.
    pub fn send_at_ms(&self, index: u64, unit: f64) -> u64 {
        let batch = index / self.batch_size;
        let jitter = (self.interval_ms as f64 * unit.clamp(0.0, 0.999_999)) as u64;
        batch * self.interval_ms + jitter.min(self.interval_ms - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// When the plan says it fits, every send lands before the deadline,
        /// and no interval carries more than the receivers' capacity.
        #[test]
        fn fitting_plans_end_inside_the_grace_period(
            sessions in 0u64..200_000, grace_s in 5u64..120, margin_s in 0u64..5,
            cap in 1u64..20_000, util in 1u32..=1000, interval in 10u64..1000,
            units in proptest::collection::vec(0.0f64..1.0, 8),
        ) {
            let input = DrainInput {
                sessions, grace_ms: grace_s * 1000, margin_ms: margin_s * 1000,
                resume_cap_per_s: cap, utilization_permille: util, batch_interval_ms: interval,
            };
            let p = plan(input);
            prop_assert!(p.rate_per_s <= cap);
            prop_assert!(p.batch_size * 1000 <= cap * interval || p.batch_size == 1);
            if p.fits && sessions > 0 {
                for (i, unit) in units.iter().enumerate() {
                    let index = (sessions - 1) * i as u64 / 7;
                    prop_assert!(p.send_at_ms(index, *unit) < p.deadline_ms);
                }
                prop_assert!(p.send_at_ms(sessions - 1, 0.999) <= p.last_send_ms);
            } else if sessions > 0 {
                prop_assert!(p.sessions_unfit > 0);
            }
        }
    }
}
