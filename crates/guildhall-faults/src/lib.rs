//! The fault harness shared by the delivery campaign and the incident
//! replays (`guildhall chaos`).
//!
//! Pure: [`history`], the checker that judges a run from its complete
//! history (what every client sent and was answered, every dispatch every
//! session received); [`catalog`], the replays and their sizes; [`report`],
//! a replay's `summary.json` and `report.html`. At the edge: [`harness`],
//! the real cluster, the workload and the sampler; one module per replay
//! ([`node_loss`]).

pub mod catalog;
pub mod harness;
pub mod history;
pub mod node_loss;
pub mod report;
