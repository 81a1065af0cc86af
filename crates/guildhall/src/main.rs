//! The `guildhall` binary.
//!
//! Today it runs the simulator (`guildhall sim SCENARIO`); the server
//! (`guildhall serve`) is the next milestone. Command-line parsing and output
//! live here; every decision lives in the library crates.

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use guildhall_sim::{down, drain, flood, herd, membership, report, ring};
use serde::Serialize;
use std::io::Write;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "guildhall",
    version,
    about = "A Discord-compatible real-time chat server that survives its postmortems"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a resilience scenario in virtual time and print what happened as JSON.
    Sim {
        #[command(subcommand)]
        scenario: SimCommand,
    },
}

/// Flags every scenario takes.
#[derive(Args, Clone)]
struct Common {
    /// Seed of the run's one random stream: same seed, same output.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One line of compact JSON (default: indented).
    #[arg(long)]
    json: bool,
    /// The configuration that reproduces the original incident.
    #[arg(long)]
    naive: bool,
}

#[derive(Subcommand)]
enum SimCommand {
    /// Seed 003: members leave the ring; plain vs bounded-load placement.
    Ring {
        #[arg(long, default_value_t = 20)]
        nodes: u32,
        #[arg(long, default_value_t = 20_000)]
        keys: u32,
        #[arg(long, default_value_t = 5)]
        remove: u32,
        #[arg(long, default_value_t = 0.25)]
        epsilon: f64,
        #[command(flatten)]
        common: Common,
    },
    /// Seed 000: a users router under a cache-miss flood.
    Flood {
        #[arg(long, default_value_t = 1_000)]
        keys: u64,
        #[arg(long, default_value_t = 20)]
        dup: u64,
        #[arg(long, default_value_t = 2_000)]
        capacity_rps: u64,
        #[arg(long, default_value_t = 20_000)]
        offered_rps: u64,
        #[arg(long, default_value_t = 60)]
        duration_s: u64,
        #[arg(long, default_value_t = 200)]
        deadline_ms: u64,
        #[arg(long, default_value_t = 5)]
        backend_latency_ms: u64,
        #[command(flatten)]
        common: Common,
    },
    /// Seed 003: part of the members lose the registry; self-preservation.
    Membership {
        #[arg(long, default_value_t = 20)]
        members: u32,
        #[arg(long, default_value_t = 0.4)]
        partition_fraction: f64,
        #[arg(long, default_value_t = 30)]
        partition_s: u64,
        #[arg(long, default_value_t = 30)]
        window_s: u64,
        #[arg(long, default_value_t = 0.15)]
        max_removal: f64,
        #[arg(long, default_value_t = 20_000)]
        channels: u32,
        #[command(flatten)]
        common: Common,
    },
    /// Seed 004: a node holding watched sessions dies; coalesced DOWN notices.
    Down {
        #[arg(long, default_value_t = 10)]
        nodes: u32,
        #[arg(long, default_value_t = 100_000)]
        sessions_per_node: u32,
        #[arg(long, default_value_t = 0)]
        kill_node: u32,
        #[arg(long, default_value_t = 5_000)]
        batch_max: usize,
        #[arg(long, default_value_t = 100)]
        batch_interval_ms: u64,
        #[arg(long, default_value_t = 10_000)]
        deliver_rate: u32,
        #[arg(long, default_value_t = 1)]
        watchers_per_session: u32,
        #[command(flatten)]
        common: Common,
    },
    /// Seed 001: a dependency outage and the reconnect herd.
    Herd {
        #[arg(long, default_value_t = 1_000_000)]
        sessions: u64,
        #[arg(long, default_value_t = 100)]
        nodes: u32,
        #[arg(long, default_value_t = 2_000)]
        identify_rate_per_node: u64,
        #[arg(long, default_value_t = 10)]
        outage_s: u64,
        /// Cluster-wide IDENTIFY capacity of the dependency (0: derived).
        #[arg(long, default_value_t = 0)]
        users_capacity_rps: u64,
        #[arg(long, default_value_t = 1_024)]
        memory_budget_mib: u64,
        #[command(flatten)]
        common: Common,
    },
    /// Seed 004: draining a node inside its grace period.
    Drain {
        #[arg(long, default_value_t = 50_000)]
        sessions: u64,
        #[arg(long, default_value_t = 30)]
        grace_s: u64,
        #[arg(long, default_value_t = 5)]
        margin_s: u64,
        #[arg(long, default_value_t = 5_000)]
        resume_cap_per_s: u64,
        #[command(flatten)]
        common: Common,
    },
    /// Every scenario at its default size, hardened and naive: the Markdown
    /// tables of docs/simulation.md.
    Report {
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn emit<T: Serialize>(value: &T, common: &Common) -> Result<()> {
    let text = if common.json {
        serde_json::to_string(value)?
    } else {
        serde_json::to_string_pretty(value)?
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let Command::Sim { scenario } = cli.command;
    let started = Instant::now();
    match scenario {
        SimCommand::Ring {
            nodes,
            keys,
            remove,
            epsilon,
            common,
        } => {
            let params = ring::Params {
                nodes,
                keys,
                remove,
                epsilon,
                ..ring::Params::default()
            };
            emit(&ring::run(&params, common.seed, common.naive), &common)?;
        }
        SimCommand::Flood {
            keys,
            dup,
            capacity_rps,
            offered_rps,
            duration_s,
            deadline_ms,
            backend_latency_ms,
            common,
        } => {
            let params = flood::Params {
                keys,
                dup,
                capacity_rps,
                offered_rps,
                duration_s,
                deadline_ms,
                backend_latency_ms,
            };
            emit(&flood::run(&params, common.seed, common.naive), &common)?;
        }
        SimCommand::Membership {
            members,
            partition_fraction,
            partition_s,
            window_s,
            max_removal,
            channels,
            common,
        } => {
            let params = membership::Params {
                members,
                partition_fraction,
                partition_s,
                window_s,
                max_removal,
                channels,
                ..membership::Params::default()
            };
            emit(
                &membership::run(&params, common.seed, common.naive),
                &common,
            )?;
        }
        SimCommand::Down {
            nodes,
            sessions_per_node,
            kill_node,
            batch_max,
            batch_interval_ms,
            deliver_rate,
            watchers_per_session,
            common,
        } => {
            let params = down::Params {
                nodes,
                sessions_per_node,
                kill_node,
                batch_max,
                batch_interval_ms,
                deliver_rate,
                watchers_per_session,
                ..down::Params::default()
            };
            emit(&down::run(&params, common.seed, common.naive), &common)?;
        }
        SimCommand::Herd {
            sessions,
            nodes,
            identify_rate_per_node,
            outage_s,
            users_capacity_rps,
            memory_budget_mib,
            common,
        } => {
            let params = herd::Params {
                sessions,
                nodes,
                identify_rate_per_node,
                outage_s,
                users_capacity_rps,
                memory_budget_mib,
                ..herd::Params::default()
            };
            emit(&herd::run(&params, common.seed, common.naive), &common)?;
        }
        SimCommand::Drain {
            sessions,
            grace_s,
            margin_s,
            resume_cap_per_s,
            common,
        } => {
            let params = drain::Params {
                sessions,
                grace_s,
                margin_s,
                resume_cap_per_s,
                ..drain::Params::default()
            };
            emit(&drain::run(&params, common.seed, common.naive), &common)?;
        }
        SimCommand::Report { seed } => {
            let mut out = std::io::stdout().lock();
            let text = report::markdown(seed).map_err(|e| anyhow::anyhow!("{e}"))?;
            write!(out, "{text}")?;
        }
    }
    // Wall time goes to stderr: stdout must be identical for a given seed.
    eprintln!(
        "guildhall sim: {:.2} s wall",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
