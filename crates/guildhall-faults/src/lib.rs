//! The fault harness shared by the delivery campaign and the incident
//! replays. Today it holds [`history`], the checker that judges a run from
//! its complete history: what every client sent and was answered, and
//! every dispatch every session received. The campaign's cluster, workload
//! and nemesis record into it.

pub mod history;
