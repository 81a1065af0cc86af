//! The fault harness shared by the delivery campaign and the incident
//! replays (`guildhall chaos`).
//!
//! Pure: [`history`], the checker that judges a run from its complete
//! history (what every client sent and was answered, every dispatch every
//! session received); [`catalog`], the replays and their sizes; [`report`],
//! a replay's `summary.json` and `report.html`. At the edge: [`harness`],
//! the real cluster and the sampler; [`workload`], the users, guilds,
//! sessions and posters; one module per replay ([`node_loss`],
//! [`poisoned`]), and [`replay`] to run one by its scenario.

pub mod catalog;
pub mod harness;
pub mod history;
pub mod node_loss;
pub mod poisoned;
pub mod report;
pub mod workload;

use catalog::Scenario;

/// Runs `scenario`'s replay.
///
/// # Errors
/// What kept its cluster from starting or its workload from being set up;
/// a scenario that is not replayable yet.
pub async fn replay(scenario: Scenario, options: &harness::Options) -> Result<report::Run, String> {
    match scenario {
        Scenario::GuildsNodeLoss => node_loss::run(options).await,
        Scenario::PoisonedDiscovery => poisoned::run(options).await,
        other => Err(format!("{} is not replayable yet", other.name())),
    }
}
