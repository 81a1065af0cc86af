//! The incident replays `guildhall chaos` knows: one scenario per incident
//! report, each with the report it reproduces, the mechanism that survives
//! it, and the sizes of each scale. Pure data: the runner (`run`) reads it,
//! `chaos list` prints it, and the report quotes it.

use serde::Serialize;

/// One replayable incident.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Seed 000: a users router that handled one request at a time, a
    /// flood of cache misses after a guilds node's loss.
    UsersFlood,
    /// Seed 001: presence stalled, a reconnect herd, session buffers
    /// without bound.
    PresenceHerd,
    /// Seed 002: an empty value under a discovery key crashed every
    /// watcher.
    PoisonedDiscovery,
    /// Seed 003: voice syncers out of the ring, the survivors drowned, a
    /// cold restart's spawn herd.
    SyncerRing,
    /// Seed 004: a resize whose session handoff did not fit the grace
    /// period.
    ResizeDrain,
    /// Seed 000's first sentence: a guilds node OOM-killed, its guilds to
    /// be served again by the others.
    GuildsNodeLoss,
}

impl Scenario {
    /// Every scenario, in the order `chaos list` prints them.
    pub const ALL: [Self; 6] = [
        Self::UsersFlood,
        Self::PresenceHerd,
        Self::PoisonedDiscovery,
        Self::SyncerRing,
        Self::ResizeDrain,
        Self::GuildsNodeLoss,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::UsersFlood => "users-flood",
            Self::PresenceHerd => "presence-herd",
            Self::PoisonedDiscovery => "poisoned-discovery",
            Self::SyncerRing => "syncer-ring",
            Self::ResizeDrain => "resize-drain",
            Self::GuildsNodeLoss => "guilds-node-loss",
        }
    }

    /// The scenario named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The incident report it replays (the seed's number).
    pub fn seed_report(self) -> &'static str {
        match self {
            Self::UsersFlood | Self::GuildsNodeLoss => "000",
            Self::PresenceHerd => "001",
            Self::PoisonedDiscovery => "002",
            Self::SyncerRing => "003",
            Self::ResizeDrain => "004",
        }
    }

    /// What happened, in a sentence or two (the report's opening).
    pub fn incident(self) -> &'static str {
        match self {
            Self::UsersFlood => {
                "A guilds node's loss sent a flood of member loads that all missed the cache to \
                 the users service, whose routers waited on each shard round-trip in their \
                 receive loop: three routers, three requests at a time. Retries overflowed the \
                 subscription into a slow-consumer state, and a warning logged per dropped \
                 message burned the CPU the routers needed."
            }
            Self::PresenceHerd => {
                "One presence node stalled; millions of sessions reconnected toward the others \
                 at once, and sessions buffered events for stalled clients without bound until \
                 the session nodes ran out of memory."
            }
            Self::PoisonedDiscovery => {
                "A connection reset mid-request stored an empty value under a service-discovery \
                 key; every watcher failed to parse it and crash-looped, and supervisors \
                 restarted whole nodes."
            }
            Self::SyncerRing => {
                "Most voice syncers fell out of the etcd-announced ring; the few left took the \
                 others' placements and drowned, and the cold restart's creation rate limit \
                 counted only each coordinator, not its children."
            }
            Self::ResizeDrain => {
                "Pods were resized and reduced; session handoff could not finish inside the \
                 grace period, 17 % of sessions died at once, and the DOWN notifications that \
                 followed starved the registry keep-alives."
            }
            Self::GuildsNodeLoss => {
                "A sudden memory spike on guilds-2, one of twelve guilds nodes, got it \
                 OOM-killed: every guild it owned had to be loaded again elsewhere, and every \
                 session in those guilds heard nothing until it was."
            }
        }
    }

    /// What survives it here, in a sentence (the report's second line).
    pub fn mechanism(self) -> &'static str {
        match self {
            Self::UsersFlood => {
                "Coalesced loads, a task per request under an adaptive fail-fast limit, \
                 deadlines, a retry budget and aggregated logging (resilience.md S1)."
            }
            Self::PresenceHerd => {
                "Bounded session queues, presence off the critical path, a capped reconnect \
                 rate and memory-pressure admission (S2)."
            }
            Self::PoisonedDiscovery => {
                "Every entry validated, the last good value kept, atomic announces and \
                 restart budgets (S3)."
            }
            Self::SyncerRing => {
                "Bounded-load consistent hashing, self-preservation, spawn budgets that count \
                 children and bounded mailboxes (S4)."
            }
            Self::ResizeDrain => {
                "A paced drain planned to fit the grace period, coalesced DOWN notices and \
                 isolated lease keep-alives (S5)."
            }
            Self::GuildsNodeLoss => {
                "Leases expire the dead owner, the bounded-load ring places its guilds on the \
                 survivors (each at most ⌈1.25 × average⌉), the new owners load them with a \
                 bounded number of loads in flight, and the api nodes' outboxes redeliver \
                 what the dead owner acknowledged but never fanned out."
            }
        }
    }

    /// Whether `chaos run` can replay it yet.
    pub fn runnable(self) -> bool {
        matches!(self, Self::GuildsNodeLoss | Self::PoisonedDiscovery)
    }
}

/// How large a replay is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scale {
    /// CI's: under a minute on two cores, short leases.
    Small,
    /// One machine, default limits.
    Medium,
    /// As many sessions and processes as one 24 GiB machine holds.
    Large,
}

impl Scale {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Small => "small",
            Self::Medium => "medium",
            Self::Large => "large",
        }
    }

    /// The scale named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Small, Self::Medium, Self::Large]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// Limit overrides every replay's processes get: one token posts for every
/// poster and every user registers from one address (a load generator's
/// shortcuts for thousands of users), so the per-token and per-address
/// REST limits would otherwise measure themselves, not the cluster.
fn load_env() -> Vec<(String, String)> {
    vec![
        (
            "GUILDHALL_REST_RATE_LIMIT_PER_WINDOW".to_owned(),
            "1000000".to_owned(),
        ),
        (
            "GUILDHALL_REST_AUTH_RATE_LIMIT_PER_WINDOW".to_owned(),
            "1000000".to_owned(),
        ),
    ]
}

/// The sizes of a `poisoned-discovery` replay.
#[derive(Clone, Debug)]
pub struct DiscoverySize {
    /// Processes running the gateway and api roles (the first also runs
    /// users and presence).
    pub fronts: usize,
    /// Processes running the guilds role.
    pub guilds_nodes: usize,
    /// The workload.
    pub workload: crate::workload::Size,
    /// The baseline before the injection.
    pub baseline_ms: u64,
    /// Corrupt values written per second.
    pub inject_per_s: u64,
    /// How long they are written.
    pub inject_ms: u64,
    /// How long the cluster is watched after the late process joined.
    pub observe_ms: u64,
    /// Limit overrides every process gets.
    pub env: Vec<(String, String)>,
    /// What was scaled down from the incident, and why.
    pub scaled_down: String,
}

impl DiscoverySize {
    /// The sizes at `scale`: resilience.md S3's injection (100 values a
    /// second for 60 s) from medium on.
    pub fn at(scale: Scale) -> Self {
        let size = |guilds, users, sessions, post_interval_ms| crate::workload::Size {
            guilds,
            users,
            guilds_per_user: guilds.min(5),
            sessions,
            recording_sessions: 2,
            post_interval_ms,
        };
        match scale {
            Scale::Small => Self {
                fronts: 2,
                guilds_nodes: 2,
                workload: size(6, 4, 20, 500),
                baseline_ms: 4_000,
                inject_per_s: 100,
                inject_ms: 10_000,
                observe_ms: 4_000,
                env: load_env(),
                scaled_down: "100 values a second for 10 s instead of 60 s, 4 processes, 6 guilds,                               20 sessions, so that CI replays it in under a minute."
                    .to_owned(),
            },
            Scale::Medium => Self {
                fronts: 2,
                guilds_nodes: 3,
                workload: size(100, 20, 1_000, 2_000),
                baseline_ms: 15_000,
                inject_per_s: 100,
                inject_ms: 60_000,
                observe_ms: 15_000,
                env: load_env(),
                scaled_down: "5 processes, 100 guilds, 1,000 sessions on one machine; the                               injection at resilience.md's full rate and length."
                    .to_owned(),
            },
            Scale::Large => Self {
                fronts: 4,
                guilds_nodes: 6,
                workload: size(500, 100, 8_000, 5_000),
                baseline_ms: 20_000,
                inject_per_s: 100,
                inject_ms: 60_000,
                observe_ms: 20_000,
                env: load_env(),
                scaled_down: "10 processes, 500 guilds, 8,000 sessions: what one 24 GiB machine                               holds beside the load generator."
                    .to_owned(),
            },
        }
    }
}

/// The sizes of a `guilds-node-loss` replay.
#[derive(Clone, Debug)]
pub struct NodeLossSize {
    /// Processes running the gateway and api roles (the first also runs
    /// users and presence).
    pub fronts: usize,
    /// Processes running the guilds role; one of them is killed.
    pub guilds_nodes: usize,
    /// The workload: guilds (one poster each), users each in a few
    /// guilds, their sessions (a few recording), the posting pace.
    pub workload: crate::workload::Size,
    /// The baseline before the kill.
    pub baseline_ms: u64,
    /// Longest wait for the dead node's guilds to be served again before
    /// the replay gives up on recovery (and fails its criterion).
    pub recovery_wait_ms_max: u64,
    /// How long the cluster is watched after the replacement node joined.
    pub observe_ms: u64,
    /// Limit overrides (`GUILDHALL_<LIMIT>`) every process gets: the REST
    /// rate limit lifted (one token posts for all), and at small scale
    /// short leases.
    pub env: Vec<(String, String)>,
    /// What was scaled down from the incident, and why (in the report).
    pub scaled_down: String,
}

impl NodeLossSize {
    /// The sizes at `scale`.
    pub fn at(scale: Scale) -> Self {
        let load_env = load_env();
        let mut short_leases = load_env.clone();
        short_leases.extend([
            ("GUILDHALL_LEASE_TTL_MS".to_owned(), "2000".to_owned()),
            (
                "GUILDHALL_LEASE_RENEW_INTERVAL_MS".to_owned(),
                "500".to_owned(),
            ),
            (
                "GUILDHALL_MEMBER_PERMANENT_DOWN_MS".to_owned(),
                "600".to_owned(),
            ),
            (
                "GUILDHALL_PLACEMENT_REFRESH_INTERVAL_MS".to_owned(),
                "200".to_owned(),
            ),
        ]);
        match scale {
            Scale::Small => Self {
                fronts: 2,
                guilds_nodes: 3,
                workload: crate::workload::Size {
                    guilds: 12,
                    users: 4,
                    guilds_per_user: 6,
                    sessions: 40,
                    recording_sessions: 2,
                    post_interval_ms: 500,
                },
                baseline_ms: 6_000,
                recovery_wait_ms_max: 30_000,
                observe_ms: 6_000,
                env: short_leases,
                scaled_down: "3 guilds processes instead of 12, 12 guilds, 40 sessions of 4 users in 6 guilds each; leases of \
                              2 s (and 0.6 s before a down member is removed) instead of the \
                              default 15 s and 10 s, so that CI replays it in under a minute: \
                              the recovery bound is the same formula of those limits."
                    .to_owned(),
            },
            Scale::Medium => Self {
                fronts: 2,
                guilds_nodes: 4,
                workload: crate::workload::Size {
                    guilds: 200,
                    users: 40,
                    guilds_per_user: 10,
                    sessions: 2_000,
                    recording_sessions: 4,
                    post_interval_ms: 5_000,
                },
                baseline_ms: 20_000,
                recovery_wait_ms_max: 120_000,
                observe_ms: 20_000,
                env: load_env.clone(),
                scaled_down: "4 guilds processes instead of 12, 200 guilds, 2,000 sessions of 40 users in 10 guilds each, on one \
                              machine, at the default limits."
                    .to_owned(),
            },
            Scale::Large => Self {
                fronts: 4,
                guilds_nodes: 6,
                workload: crate::workload::Size {
                    guilds: 1_000,
                    users: 200,
                    guilds_per_user: 10,
                    sessions: 12_000,
                    recording_sessions: 4,
                    post_interval_ms: 20_000,
                },
                baseline_ms: 30_000,
                recovery_wait_ms_max: 180_000,
                observe_ms: 30_000,
                env: load_env.clone(),
                scaled_down:
                    "6 guilds processes instead of 12, 1,000 guilds, 12,000 sessions of 200 users in 10 guilds each, over \
                              4 gateway processes: what one 24 GiB machine and its file limit \
                              hold beside the load generator, at the default limits."
                        .to_owned(),
            },
        }
    }

    /// A limit's value for this run: the override, else the default.
    pub fn limit_ms(&self, env: &str, default_ms: u64) -> u64 {
        self.env
            .iter()
            .find(|(k, _)| k == env)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(default_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_every_report_is_replayed() {
        for scenario in Scenario::ALL {
            assert_eq!(Scenario::parse(scenario.name()), Some(scenario));
        }
        let mut seeds: Vec<_> = Scenario::ALL.iter().map(|s| s.seed_report()).collect();
        seeds.dedup();
        assert_eq!(seeds, ["000", "001", "002", "003", "004", "000"]);
        for scale in ["small", "medium", "large"] {
            assert_eq!(Scale::parse(scale).map(Scale::name), Some(scale));
        }
        assert_eq!(Scenario::parse("nope"), None);
    }

    #[test]
    fn small_runs_short_leases_and_larger_scales_the_defaults() {
        let small = NodeLossSize::at(Scale::Small);
        assert_eq!(small.limit_ms("GUILDHALL_LEASE_TTL_MS", 15_000), 2_000);
        let medium = NodeLossSize::at(Scale::Medium);
        assert_eq!(medium.limit_ms("GUILDHALL_LEASE_TTL_MS", 15_000), 15_000);
        for scale in [Scale::Small, Scale::Medium, Scale::Large] {
            let size = NodeLossSize::at(scale);
            let load = &size.workload;
            assert!(load.recording_sessions <= load.users && load.users <= load.sessions);
            assert!(
                load.users * load.guilds_per_user >= load.guilds,
                "every guild has members"
            );
            assert!(load.guilds_per_user <= load.guilds);
            assert!(size.guilds_nodes >= 2, "one must survive the kill");
        }
    }
}
