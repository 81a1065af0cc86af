//! Admission and overload control: the mechanisms each postmortem was missing.
//!
//! | module | mechanism | seed |
//! |---|---|---|
//! | [`permit`] | fail-fast permit pool with criticality classes | 000, 001 |
//! | [`adaptive`] | adaptive concurrency limits (AIMD, Gradient2) | 000 |
//! | [`admission`] | handshake admission: admit, hold in a reserved slot, or refuse with a spread `Retry-After` | 001 |
//! | [`token_bucket`] | token bucket whose rate changes at run time | 002, 003 |
//! | [`retry`] | retry budget and full-jitter exponential backoff | 000, 001 |
//! | [`deadline`] | absolute deadlines: expired work is never started | 000 |
//! | [`singleflight`] | one fetch per key, bounded waiters | 000 |
//! | [`down`] | coalesced DOWN notices: per-peer batches, capped delivery | 004 |
//! | [`drain`] | RECONNECT schedule that fits a grace period | 004 |
//! | [`spawn`] | hierarchical spawn budget: coordinators and their children draw from one allowance, per-guild shares, live caps | 003 |
//! | [`breaker`] | consecutive-failure circuit breaker with a half-open probe | 003 |
//! | [`log_throttle`] | one log line per key per interval, with a suppressed count | 000 |
//!
//! Architecture invariant: pure. No clock (time is `now_ms`), no randomness
//! source (callers pass random numbers in), no I/O, no runtime. Thin async
//! adapters belong in the crates that do I/O.

pub mod adaptive;
pub mod admission;
pub mod breaker;
pub mod deadline;
pub mod down;
pub mod drain;
pub mod log_throttle;
pub mod permit;
pub mod retry;
pub mod singleflight;
pub mod spawn;
pub mod token_bucket;

/// The error every fail-fast mechanism answers with: retryable later, never
/// queued. Mapped to HTTP 503/429 with `Retry-After`, a resumable close code,
/// or the bus's `overloaded` reply at the edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overloaded;

impl std::fmt::Display for Overloaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("overloaded")
    }
}

impl std::error::Error for Overloaded {}

/// How much a request matters; shed from the bottom (resilience.md:
/// resume and identify > message send > voice join > presence > typing >
/// member-list sync).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Criticality {
    /// Member-list sync, lazy loads: first to go.
    Sheddable = 0,
    /// Typing indicators.
    Typing = 1,
    /// Presence updates.
    Presence = 2,
    /// Voice joins.
    Voice = 3,
    /// Sending a message.
    Send = 4,
    /// Identify and resume: losing these disconnects users.
    Critical = 5,
}

impl Criticality {
    /// Every class, lowest first.
    pub const ALL: [Criticality; 6] = [
        Criticality::Sheddable,
        Criticality::Typing,
        Criticality::Presence,
        Criticality::Voice,
        Criticality::Send,
        Criticality::Critical,
    ];

    /// Share of a pool (permille) this class may fill. A class is admitted
    /// only while the pool's occupancy is below its share, so the last slots
    /// are kept for the classes that matter most.
    pub fn admit_share_permille(self) -> u32 {
        match self {
            Criticality::Sheddable => 500,
            Criticality::Typing => 600,
            Criticality::Presence => 700,
            Criticality::Voice => 800,
            Criticality::Send => 900,
            Criticality::Critical => 1000,
        }
    }
}
