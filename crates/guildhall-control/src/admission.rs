//! Handshake admission: admit now, hold briefly, or refuse with a
//! `Retry-After`.
//!
//! Seed 001: a reconnect herd after a dependency outage. A gateway node
//! admits WebSocket upgrades at a fixed rate. An upgrade that finds no free
//! slot is *held* when one is free within `hold_ms_max` (a client that can
//! be admitted soon is never refused: a refused one comes back, which costs
//! more), and is otherwise refused before the 101 with a `Retry-After`.
//!
//! Slots are handed out by virtual scheduling (GCRA with no burst
//! tolerance): each admission takes the next free slot, one every
//! `1 / rate` seconds, so admissions in any one second never exceed the
//! rate, and a held upgrade *owns* its slot: it is admitted when its wait
//! ends, in arrival order, without asking again (no held upgrade is
//! overtaken by a later one). The holds are bounded by the hold time
//! itself: at most `rate × hold_ms_max` slots can be promised ahead.
//!
//! A refusal's `Retry-After` points at the earliest time a new upgrade could
//! be held, spread over the time the node needs to admit everyone it refused
//! in the current second (`unit` is the caller's random number): refused
//! clients that all came back after the same delay would only be refused
//! together again.
//!
//! The gateway (`guildhall-node`'s `gateway::Admission`) and the
//! simulator's herd scenario both drive this type.

const NS_PER_MS: u64 = 1_000_000;
const NS_PER_S: u64 = 1_000_000_000;
/// Refusals are counted per window of this length for the spread.
const REFUSED_WINDOW_MS: u64 = 1_000;

/// The bounds admission applies (the gateway takes them from `Limits`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeBounds {
    /// Upgrades admitted per second (`handshake_rate_per_s`).
    pub rate_per_s: u32,
    /// Longest hold (`handshake_hold_ms_max`).
    pub hold_ms_max: u64,
    /// Sessions the node holds before it refuses every upgrade
    /// (`sessions_per_node_max`).
    pub sessions_max: usize,
    /// `Retry-After` when the node is full (`sessions_full_retry_after_s`).
    pub sessions_full_retry_after_s: u64,
    /// Longest `Retry-After` (`handshake_retry_after_s_max`).
    pub retry_after_s_max: u64,
}

/// What to do with one upgrade.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Upgrade now.
    Admit,
    /// Upgrade after `wait_ms` (the slot is reserved: do not ask again).
    Hold {
        /// How long to hold, at most the bounds' `hold_ms_max`.
        wait_ms: u64,
    },
    /// Answer 503 with this `Retry-After`.
    Refuse {
        /// Seconds, in `1..=retry_after_s_max`.
        retry_after_s: u64,
    },
}

/// Handshake admission of one node.
#[derive(Clone, Debug)]
pub struct HandshakeAdmission {
    bounds: HandshakeBounds,
    /// Time between two slots (rounded up: never faster than the rate).
    interval_ns: u64,
    /// The next free slot.
    next_slot_ns: u64,
    refused_window_start_ms: u64,
    refused_in_window: u64,
}

impl HandshakeAdmission {
    /// Admission with nothing admitted yet.
    ///
    /// ```
    /// use guildhall_control::admission::{Decision, HandshakeAdmission, HandshakeBounds};
    /// let bounds = HandshakeBounds {
    ///     rate_per_s: 1_000, // one slot per millisecond
    ///     hold_ms_max: 2,
    ///     sessions_max: 100,
    ///     sessions_full_retry_after_s: 5,
    ///     retry_after_s_max: 60,
    /// };
    /// let mut admission = HandshakeAdmission::new(bounds);
    /// assert_eq!(admission.decide(0, 0, 0.0), Decision::Admit);
    /// assert_eq!(admission.decide(0, 1, 0.0), Decision::Hold { wait_ms: 1 });
    /// assert_eq!(admission.decide(0, 2, 0.0), Decision::Hold { wait_ms: 2 });
    /// assert_eq!(admission.decide(0, 3, 0.0), Decision::Refuse { retry_after_s: 1 });
    /// assert_eq!(admission.decide(0, 100, 0.0), Decision::Refuse { retry_after_s: 5 });
    /// ```
    pub fn new(bounds: HandshakeBounds) -> Self {
        let rate = u64::from(
            bounds
                .rate_per_s
                .clamp(1, guildhall_limits::TOKEN_BUCKET_RATE_PER_S_MAX),
        );
        Self {
            bounds,
            interval_ns: NS_PER_S.div_ceil(rate),
            next_slot_ns: 0,
            refused_window_start_ms: 0,
            refused_in_window: 0,
        }
    }

    /// Decides for one upgrade at `now_ms` on a node holding `sessions`;
    /// `unit` is a random number in `[0, 1)` that spreads `Retry-After`.
    pub fn decide(&mut self, now_ms: u64, sessions: usize, unit: f64) -> Decision {
        if sessions >= self.bounds.sessions_max {
            return Decision::Refuse {
                retry_after_s: self.retry_after_s_bounded(self.bounds.sessions_full_retry_after_s),
            };
        }
        let now_ns = now_ms.saturating_mul(NS_PER_MS);
        let hold_ns = self.bounds.hold_ms_max.saturating_mul(NS_PER_MS);
        // A reserved slot is never more than a hold and one interval ahead
        // of the clock; one further ahead means the clock stepped back.
        // Start again from now rather than refuse every upgrade until the
        // clock catches up.
        if self.next_slot_ns
            > now_ns
                .saturating_add(hold_ns)
                .saturating_add(self.interval_ns)
        {
            self.next_slot_ns = now_ns;
        }
        let slot_ns = self.next_slot_ns.max(now_ns);
        let wait_ns = slot_ns - now_ns;
        if wait_ns <= hold_ns {
            self.next_slot_ns = slot_ns.saturating_add(self.interval_ns);
            return match wait_ns.div_ceil(NS_PER_MS) {
                0 => Decision::Admit,
                wait_ms => Decision::Hold { wait_ms },
            };
        }
        if now_ms
            >= self
                .refused_window_start_ms
                .saturating_add(REFUSED_WINDOW_MS)
        {
            self.refused_window_start_ms = now_ms;
            self.refused_in_window = 0;
        }
        self.refused_in_window += 1;
        // When a new upgrade would fit in the hold again, plus a share of
        // the time it takes to admit everyone refused this second.
        let earliest_ns = wait_ns - hold_ns;
        let spread_ns = self.refused_in_window.saturating_mul(self.interval_ns);
        let after_ns = earliest_ns.saturating_add((spread_ns as f64 * unit.clamp(0.0, 1.0)) as u64);
        Decision::Refuse {
            retry_after_s: self.retry_after_s_bounded(after_ns.div_ceil(NS_PER_S)),
        }
    }

    fn retry_after_s_bounded(&self, seconds: u64) -> u64 {
        seconds.clamp(1, self.bounds.retry_after_s_max.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bounds(rate_per_s: u32, hold_ms_max: u64) -> HandshakeBounds {
        HandshakeBounds {
            rate_per_s,
            hold_ms_max,
            sessions_max: usize::MAX,
            sessions_full_retry_after_s: 5,
            retry_after_s_max: 60,
        }
    }

    #[test]
    fn a_clock_that_steps_back_does_not_refuse_everyone() {
        let mut admission = HandshakeAdmission::new(bounds(10, 100));
        for _ in 0..2 {
            let decision = admission.decide(10_000_000, 0, 0.5);
            assert!(!matches!(decision, Decision::Refuse { .. }), "{decision:?}");
        }
        // The clock goes back an hour: the next upgrade is still admitted
        // or held, never refused until the clock catches up.
        let decision = admission.decide(10_000_000 - 3_600_000, 0, 0.5);
        assert!(!matches!(decision, Decision::Refuse { .. }), "{decision:?}");
    }

    /// Runs `steps` of (ms since the previous upgrade, unit) and returns
    /// each upgrade's decision with the time it was asked.
    fn run(admission: &mut HandshakeAdmission, steps: &[(u64, f64)]) -> Vec<(u64, Decision)> {
        let mut now = 0;
        steps
            .iter()
            .map(|(dt, unit)| {
                now += dt;
                (now, admission.decide(now, 0, *unit))
            })
            .collect()
    }

    /// When each admitted upgrade goes through.
    fn admitted_at(decisions: &[(u64, Decision)]) -> Vec<u64> {
        decisions
            .iter()
            .filter_map(|(now, d)| match d {
                Decision::Admit => Some(*now),
                Decision::Hold { wait_ms } => Some(now + wait_ms),
                Decision::Refuse { .. } => None,
            })
            .collect()
    }

    #[test]
    fn a_full_hold_refuses_and_spreads_retry_after_over_the_refused() {
        // 10 per second, holds up to 1 s: one now, ten held, then refusals.
        let mut admission = HandshakeAdmission::new(bounds(10, 1_000));
        let decisions: Vec<Decision> = (0..41).map(|_| admission.decide(0, 0, 0.999)).collect();
        assert_eq!(decisions[0], Decision::Admit);
        assert!(
            decisions[1..=10]
                .iter()
                .all(|d| matches!(d, Decision::Hold { .. }))
        );
        let Decision::Refuse { retry_after_s } = decisions[11] else {
            panic!("{:?}", decisions[11]);
        };
        // The first refusal is told to come back when the hold has room
        // again (100 ms, rounded up to a second); the 30th of the second
        // also waits for most of the 30 × 100 ms the earlier ones need.
        assert_eq!(retry_after_s, 1);
        assert_eq!(decisions[40], Decision::Refuse { retry_after_s: 4 });
    }

    #[test]
    fn a_full_node_refuses_with_its_own_retry_after() {
        let mut admission = HandshakeAdmission::new(HandshakeBounds {
            sessions_max: 3,
            ..bounds(100, 100)
        });
        assert_eq!(
            admission.decide(0, 3, 0.5),
            Decision::Refuse { retry_after_s: 5 }
        );
        assert_eq!(admission.decide(0, 2, 0.5), Decision::Admit);
    }

    proptest! {
        /// However upgrades arrive, no second (of admission times) holds
        /// more admissions than the rate.
        #[test]
        fn admissions_never_exceed_the_rate_in_any_second(
            rate in 1u32..3_000, hold in 1u64..2_000,
            steps in proptest::collection::vec((0u64..4, 0.0f64..1.0), 1..600),
        ) {
            let mut admission = HandshakeAdmission::new(bounds(rate, hold));
            let at = admitted_at(&run(&mut admission, &steps));
            for start in &at {
                let in_second = at.iter().filter(|t| **t >= *start && **t < start + 1_000).count();
                prop_assert!(in_second as u64 <= u64::from(rate), "{in_second} > {rate}");
            }
        }

        /// Holds stay within the bound, held upgrades go through in arrival
        /// order, and every refusal's Retry-After is within its bounds.
        #[test]
        fn holds_are_bounded_and_first_come_first_served(
            rate in 1u32..3_000, hold in 1u64..2_000,
            steps in proptest::collection::vec((0u64..4, 0.0f64..1.0), 1..600),
        ) {
            let mut admission = HandshakeAdmission::new(bounds(rate, hold));
            let decisions = run(&mut admission, &steps);
            for (_, decision) in &decisions {
                match decision {
                    Decision::Hold { wait_ms } => prop_assert!((1..=hold).contains(wait_ms)),
                    Decision::Refuse { retry_after_s } => prop_assert!((1..=60).contains(retry_after_s)),
                    Decision::Admit => {}
                }
            }
            let at = admitted_at(&decisions);
            prop_assert!(at.windows(2).all(|w| w[0] <= w[1]), "{at:?}");
        }

        /// A refusal means the hold really is full: an upgrade is refused
        /// only while about rate × hold of them are already promised (within
        /// two: the slot taken at the instant itself, and the interval's
        /// rounding).
        #[test]
        fn refuses_only_when_the_hold_is_full(
            rate in 1u32..3_000, hold in 1u64..2_000,
            steps in proptest::collection::vec((0u64..4, 0.0f64..1.0), 1..600),
        ) {
            let mut admission = HandshakeAdmission::new(bounds(rate, hold));
            let decisions = run(&mut admission, &steps);
            let at = admitted_at(&decisions);
            for (now, decision) in &decisions {
                if matches!(decision, Decision::Refuse { .. }) {
                    let promised = at.iter().filter(|t| **t > *now).count() as u64;
                    let capacity = u64::from(rate) * hold / 1_000;
                    prop_assert!(promised + 2 >= capacity, "refused with {promised} of {capacity} promised");
                }
            }
        }
    }
}
