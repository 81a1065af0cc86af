//! A deterministic discrete-event simulator for Guildhall's mechanisms.
//!
//! Each scenario reproduces one postmortem in `shared/seeds` (see
//! `docs/simulation.md`): it models clients, nodes and backends in virtual
//! time and drives the *same* types the server uses. Every scenario runs in a
//! hardened configuration and, with `naive`, in the configuration that
//! reproduces the incident.
//!
//! Determinism: one seeded PCG stream per run, integer microseconds for time,
//! ties in the event queue broken by insertion order, ordered maps only. Same
//! parameters and seed, same JSON, byte for byte.

pub mod down;
pub mod drain;
pub mod flood;
pub mod herd;
pub mod membership;
pub mod report;
pub mod ring;
pub mod sim;
pub mod voice;

/// Every scenario, for the CLI and the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Seed 003: ring collapse; plain vs bounded loads.
    Ring,
    /// Seed 000: users router under a cache-miss flood.
    Flood,
    /// Seed 003: registry partition vs self-preservation.
    Membership,
    /// Seed 004: DOWN notices after a node loss.
    Down,
    /// Seed 001: reconnect herd after a dependency outage.
    Herd,
    /// Seed 004: draining a node inside its grace period.
    Drain,
    /// Seed 003: the voice-syncer fleet restarted cold.
    Voice,
}

impl Scenario {
    /// All scenarios, in report order.
    pub const ALL: [Scenario; 7] = [
        Scenario::Ring,
        Scenario::Flood,
        Scenario::Membership,
        Scenario::Down,
        Scenario::Herd,
        Scenario::Drain,
        Scenario::Voice,
    ];

    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Ring => "ring",
            Scenario::Flood => "flood",
            Scenario::Membership => "membership",
            Scenario::Down => "down",
            Scenario::Herd => "herd",
            Scenario::Drain => "drain",
            Scenario::Voice => "voice",
        }
    }
}
