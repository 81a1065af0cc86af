//! The `guildhall` binary: `serve` runs a node, `user`/`bot`/`guild` talk to
//! a running one, `sim` runs the resilience scenarios in virtual time.
//! Command-line parsing, signals and output live here; every decision lives
//! in the library crates.

mod config;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use guildhall_sim::{down, drain, flood, herd, membership, report, ring, voice};
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
// Parsed once at start-up: `serve`'s many flags costing a few hundred bytes
// of stack for the other commands is not worth a box.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Run a node: every role in one process (embedded mode), or, with
    /// --nats/--etcd/--database-url, the roles given by --roles over the
    /// real services (cluster mode).
    Serve {
        /// Address to listen on (REST, gateway, metrics) [default: 127.0.0.1:8080].
        #[arg(long)]
        listen: Option<String>,
        /// Directory for the database and the admin token [default: ./guildhall-data].
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
        /// A TOML config file (limits, listen, data_dir, cluster keys); GUILDHALL_<KEY> env vars override it.
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Roles to run, comma separated: gateway, api, guilds, users, presence, voice, sfu [default: all].
        #[arg(long, value_delimiter = ',')]
        roles: Option<Vec<String>>,
        /// NATS server URL: the bus of cluster mode (e.g. nats://127.0.0.1:4222).
        #[arg(long)]
        nats: Option<String>,
        /// etcd endpoint(s), comma separated: the registry of cluster mode.
        #[arg(long)]
        etcd: Option<String>,
        /// PostgreSQL URL: the store of cluster mode (postgres://user@host:port/db).
        #[arg(long)]
        database_url: Option<String>,
        /// This process's name in the registry, unique in the cluster [default: node-1].
        #[arg(long)]
        node_name: Option<String>,
        /// Snowflake worker id 0-1023, unique in the cluster [default: 1].
        #[arg(long)]
        worker_id: Option<u16>,
        /// The gateway URL clients are given (a load balancer's) [default: this listener].
        #[arg(long)]
        public_gateway_url: Option<String>,
        /// The directory files (attachments) are kept in [default: DATA_DIR/blobs].
        #[arg(long)]
        blob_dir: Option<std::path::PathBuf>,
        /// The base of the URLs files are served at (a CDN's) [default: http://LISTEN].
        #[arg(long)]
        public_cdn_url: Option<String>,
        /// The SFU's UDP media address [default: the listen IP, any port].
        #[arg(long)]
        voice_udp: Option<String>,
        /// The IP voice clients send media to [default: the UDP address's IP].
        #[arg(long)]
        voice_public_ip: Option<String>,
        /// The SFU's own TLS listener for the voice gateway (with --voice-tls-cert and --voice-tls-key).
        #[arg(long)]
        voice_listen: Option<String>,
        /// The voice gateway's certificate chain (PEM).
        #[arg(long)]
        voice_tls_cert: Option<std::path::PathBuf>,
        /// The voice gateway's private key (PEM).
        #[arg(long)]
        voice_tls_key: Option<std::path::PathBuf>,
        /// The endpoint voice clients are given, host:port[/path] [default: the TLS listener, else LISTEN + the voice path].
        #[arg(long)]
        voice_endpoint: Option<String>,
        /// The voice gateway's path on LISTEN (for a TLS proxy in front) [default: /voice].
        #[arg(long)]
        voice_ws_path: Option<String>,
    },
    /// Validate configuration.
    Config {
        #[command(subcommand)]
        action: ConfigCommand,
    },
    /// Manage users of a running server.
    User {
        #[command(subcommand)]
        action: UserCommand,
    },
    /// Manage bots of a running server.
    Bot {
        #[command(subcommand)]
        action: BotCommand,
    },
    /// Manage guilds of a running server.
    Guild {
        #[command(subcommand)]
        action: GuildCommand,
    },
    /// Operate a cluster's ring.
    Ring {
        #[command(subcommand)]
        action: RingCommand,
    },
    /// Run a resilience scenario in virtual time and print what happened as JSON.
    Sim {
        #[command(subcommand)]
        scenario: SimCommand,
    },
    /// Replay an incident report on a real cluster of its own, and write a report.
    Chaos {
        #[command(subcommand)]
        action: ChaosCommand,
    },
}

#[derive(Subcommand)]
enum ChaosCommand {
    /// Name the scenarios, one per incident report.
    List,
    /// Start a cluster (NATS, etcd, PostgreSQL, guildhall processes on free
    /// loopback ports), replay NAME through its four phases, stop everything
    /// it started, and write DIR/report.html and DIR/summary.json. Exits 1
    /// when a criterion fails.
    Run {
        /// The scenario (see `chaos list`).
        name: String,
        /// small (CI's, under a minute), medium or large.
        #[arg(long, default_value = "small")]
        scale: String,
        /// The seed of its random choices [default: the clock].
        #[arg(long)]
        seed: Option<u64>,
        /// Where the report goes [default: ./chaos-NAME].
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
}

/// Where the running server is.
#[derive(Args, Clone)]
struct Server {
    /// Base URL of the running server.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    server: String,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate FILE (with GUILDHALL_* overrides) and print the effective limits.
    Check {
        /// The config file.
        file: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Register a user; prints {"token","user_id"}.
    Create {
        #[arg(long)]
        username: String,
        #[arg(long)]
        password: String,
        #[command(flatten)]
        server: Server,
    },
}

#[derive(Subcommand)]
enum BotCommand {
    /// Create an application with a bot user; prints {"application_id","user_id","token"}.
    Create {
        #[arg(long)]
        name: String,
        /// The user who owns the application.
        #[arg(long)]
        owner: String,
        /// The server's data directory (for its admin token).
        #[arg(long, default_value = "./guildhall-data")]
        data_dir: std::path::PathBuf,
        #[command(flatten)]
        server: Server,
    },
}

#[derive(Subcommand)]
enum RingCommand {
    /// Release a self-preservation freeze: every node whose removals are
    /// frozen removes the members down now, at once (they are dead, not
    /// cut off). Prints {"key","release","lease_ms"}.
    Release {
        /// etcd endpoint(s) of the cluster, comma separated.
        #[arg(long)]
        etcd: String,
        /// How long the release stays posted, in ms: every frozen node reads
        /// it at its next renewal tick, and it expires by itself.
        #[arg(long, default_value_t = 60_000)]
        lease_ms: u64,
    },
}

#[derive(Subcommand)]
enum GuildCommand {
    /// Create a guild owned by the token's user; prints the guild.
    Create {
        #[arg(long)]
        name: String,
        /// The owner's token.
        #[arg(long)]
        token: String,
        #[command(flatten)]
        server: Server,
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
    /// Seed 003: the whole voice-syncer fleet restarted cold; every call
    /// re-created at once.
    Voice {
        #[arg(long, default_value_t = 20)]
        instances: u32,
        #[arg(long, default_value_t = 10_000)]
        guilds: u32,
        #[arg(long, default_value_t = 40_000)]
        calls: u32,
        #[arg(long, default_value_t = 1.0)]
        zipf_s: f64,
        #[arg(long, default_value_t = 250)]
        rpc_capacity_per_s: u32,
        #[arg(long, default_value_t = 120)]
        duration_s: u64,
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

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// Posts a release under `RING_RELEASE_KEY` with a lease of `lease_ms`. Its
/// value is unique (time and process), so each node applies it once.
async fn release_ring(etcd: &str, lease_ms: u64) -> Result<()> {
    use guildhall_cluster::Registry;
    let endpoints: Vec<&str> = etcd.split(',').map(str::trim).collect();
    let registry = guildhall_cluster::EtcdRegistry::connect(
        &endpoints,
        guildhall_cluster::EtcdOptions::default(),
    )
    .await
    .with_context(|| format!("connecting to etcd at {etcd}"))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let release = format!("release-{nanos}-{}", std::process::id());
    let key = guildhall_proto::cluster::RING_RELEASE_KEY;
    registry
        .put_with_lease(key, release.clone().into_bytes(), lease_ms)
        .await
        .with_context(|| format!("writing {key}"))?;
    let text = serde_json::json!({"key": key, "release": release, "lease_ms": lease_ms});
    writeln!(std::io::stdout().lock(), "{text}")?;
    Ok(())
}

/// `guildhall chaos`: the replays live in `guildhall_faults`; this prints
/// and writes what they return.
fn chaos(action: ChaosCommand) -> Result<()> {
    use guildhall_faults::catalog::{Scale, Scenario};
    let (name, scale, seed, out) = match action {
        ChaosCommand::List => {
            let mut text = String::new();
            for scenario in Scenario::ALL {
                text.push_str(&format!(
                    "{:<20} report {}{}\n    {}\n",
                    scenario.name(),
                    scenario.seed_report(),
                    if scenario.runnable() {
                        ""
                    } else {
                        " (not replayable yet)"
                    },
                    scenario.incident()
                ));
            }
            return print(text.trim_end());
        }
        ChaosCommand::Run {
            name,
            scale,
            seed,
            out,
        } => (name, scale, seed, out),
    };
    let scenario = Scenario::parse(&name).ok_or_else(|| {
        anyhow::anyhow!("no scenario {name:?}: `guildhall chaos list` names them")
    })?;
    let scale = Scale::parse(&scale)
        .ok_or_else(|| anyhow::anyhow!("--scale {scale:?}: small, medium or large"))?;
    if !scenario.runnable() {
        anyhow::bail!("{name} is not replayable yet: only the runnable ones of `chaos list` are");
    }
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let out = out.unwrap_or_else(|| std::path::PathBuf::from(format!("chaos-{name}")));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    eprintln!(
        "chaos {name}: scale {}, seed {seed}, report in {}",
        scale.name(),
        out.display()
    );
    let options = guildhall_faults::harness::Options {
        scale,
        seed,
        binary: std::env::current_exe().context("finding this binary to start the processes")?,
        out: out.clone(),
    };
    let run = runtime()?.block_on(async {
        tokio::select! {
            run = guildhall_faults::replay(scenario, &options) => run.map_err(|e| anyhow::anyhow!(e)),
            // Everything the run started is stopped as its values drop.
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
            () = terminated() => Err(anyhow::anyhow!("terminated")),
        }
    })?;
    std::fs::write(
        out.join("summary.json"),
        guildhall_faults::report::summary_json(&run),
    )?;
    std::fs::write(
        out.join("report.html"),
        guildhall_faults::report::html(&run),
    )?;
    // The charts' data, for whoever wants to draw or compare them again.
    std::fs::write(out.join("series.json"), serde_json::to_string(&run.charts)?)?;
    let mut text = String::new();
    for c in &run.criteria {
        text.push_str(&format!(
            "{} {}: {} {} (bound {})\n",
            if c.pass { "pass" } else { "FAIL" },
            c.name,
            c.measured,
            c.unit,
            c.bound
        ));
    }
    text.push_str(&format!("report: {}", out.join("report.html").display()));
    print(&text)?;
    if !run.passed() {
        std::process::exit(1);
    }
    Ok(())
}

/// The log filter: `RUST_LOG`, else `info`; either way async-nats at
/// `warn` unless `RUST_LOG` names it. The crate logs every connection
/// event at INFO, one line per slow-consumer drop, before our own handler
/// counts it and logs it at most once a second: seed 000's amplifier, a
/// log line per dropped message, found by `chaos run guilds-node-loss
/// --scale medium` (thousands of lines a second per process).
fn log_filter(rust_log: Option<String>) -> tracing_subscriber::EnvFilter {
    let mut directives = rust_log
        .filter(|d| !d.trim().is_empty())
        .unwrap_or_else(|| "info".to_owned());
    if !directives.contains("async_nats") {
        directives.push_str(",async_nats=warn");
    }
    tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,async_nats=warn"))
}

/// Resolves on SIGTERM (a supervisor's or `timeout`'s stop): a replay
/// must stop what it started then too. Never, if the handler cannot be
/// installed.
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            term.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

fn print(text: &str) -> Result<()> {
    writeln!(std::io::stdout().lock(), "{text}")?;
    Ok(())
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// POSTs `body` to the running server and prints the JSON answer.
fn call(server: &Server, path: &str, token: Option<&str>, body: serde_json::Value) -> Result<()> {
    runtime()?.block_on(async {
        let client = reqwest::Client::new();
        let mut request = client
            .post(format!(
                "{}/api/v10{path}",
                server.server.trim_end_matches('/')
            ))
            .json(&body);
        if let Some(token) = token {
            request = request.header("authorization", token);
        }
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            anyhow::bail!("{status}: {text}");
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "{text}")?;
        Ok(())
    })
}

/// Runs the command; a failure is one line on stderr (the error and its
/// causes, `error: ...: ...`) and exit status 1, never a backtrace: an
/// operator reads which key or value was wrong, not a stack.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    let scenario = match cli.command {
        Command::Config {
            action: ConfigCommand::Check { file },
        } => {
            let config = config::load(Some(&file), std::env::vars())?;
            let mut out = std::io::stdout().lock();
            write!(out, "{}", config::render(&config.limits)?)?;
            return Ok(());
        }
        Command::Serve {
            listen,
            data_dir,
            config,
            roles,
            nats,
            etcd,
            database_url,
            node_name,
            worker_id,
            public_gateway_url,
            blob_dir,
            public_cdn_url,
            voice_udp,
            voice_public_ip,
            voice_listen,
            voice_tls_cert,
            voice_tls_key,
            voice_endpoint,
            voice_ws_path,
        } => {
            let file = config::load(config.as_deref(), std::env::vars())?;
            let voice = config::voice_settings(
                voice_udp.or(file.voice_udp.clone()),
                voice_public_ip.or(file.voice_public_ip.clone()),
                voice_listen.or(file.voice_listen.clone()),
                voice_tls_cert.or(file.voice_tls_cert.clone()),
                voice_tls_key.or(file.voice_tls_key.clone()),
                voice_endpoint.or(file.voice_endpoint.clone()),
                voice_ws_path.or(file.voice_ws_path.clone()),
            )?;
            let cluster = config::Cluster {
                roles: roles.or(file.roles.clone()),
                nats: nats.or(file.nats.clone()),
                etcd: etcd.or(file.etcd.clone()),
                database_url: database_url.or(file.database_url.clone()),
                node_name: node_name.or(file.node_name.clone()),
                worker_id: worker_id.or(file.worker_id),
                public_gateway_url: public_gateway_url.or(file.public_gateway_url.clone()),
            }
            .resolve()?;
            let public_cdn_url = public_cdn_url.or(file.public_cdn_url.clone());
            if let Some(url) = &public_cdn_url {
                config::check_url("--public-cdn-url", url, &["http://", "https://"])?;
            }
            let listen = listen
                .or(file.listen)
                .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
            let data_dir = data_dir
                .or(file.data_dir)
                .unwrap_or_else(|| "./guildhall-data".into());
            let limits = file.limits;
            let (nats_client, etcd_client) = (file.nats_client, file.etcd_client);
            tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_env_filter(log_filter(std::env::var("RUST_LOG").ok()))
                .init();
            return runtime()?.block_on(async {
                let listener = tokio::net::TcpListener::bind(&listen).await?;
                let mut config = guildhall_node::NodeConfig {
                    roles: cluster.roles.clone(),
                    public_gateway_url: cluster.public_gateway_url.clone(),
                    files: guildhall_node::FileSettings {
                        blob_dir: blob_dir.or(file.blob_dir.clone()),
                        public_cdn_url: public_cdn_url.clone(),
                        // A secret: the config file or the environment only.
                        signing_key: file.cdn_signing_key.clone(),
                    },
                    voice,
                    ..guildhall_node::NodeConfig::embedded(data_dir)
                };
                if let Some(services) = &cluster.services {
                    // Cluster mode: the same node over the real engines.
                    let nats = guildhall_cluster::NatsBus::connect(
                        &services.nats,
                        guildhall_cluster::NatsOptions {
                            payload_bytes_max: limits.bus_payload_bytes_max,
                            ..nats_client.clone()
                        },
                    )
                    .await
                    .with_context(|| format!("connecting to NATS at {}", services.nats))?;
                    let endpoints: Vec<&str> = services.etcd.split(',').map(str::trim).collect();
                    let etcd = guildhall_cluster::EtcdRegistry::connect(&endpoints, etcd_client)
                        .await
                        .with_context(|| format!("connecting to etcd at {}", services.etcd))?;
                    config.bus = Some(std::sync::Arc::new(nats));
                    config.registry = Some(std::sync::Arc::new(etcd));
                    config.database_url = Some(services.database_url.clone());
                    config.node_name.clone_from(&services.node_name);
                    config.worker_id = services.worker_id;
                }
                config.limits = limits;
                guildhall_node::run(config, listener, shutdown_signal()).await?;
                Ok(())
            });
        }
        Command::User {
            action:
                UserCommand::Create {
                    username,
                    password,
                    server,
                },
        } => {
            return call(
                &server,
                "/auth/register",
                None,
                serde_json::json!({"username": username, "password": password}),
            );
        }
        Command::Bot {
            action:
                BotCommand::Create {
                    name,
                    owner,
                    data_dir,
                    server,
                },
        } => {
            let token = std::fs::read_to_string(data_dir.join("admin.token")).map_err(|e| {
                anyhow::anyhow!("reading the admin token in {}: {e}", data_dir.display())
            })?;
            return call(
                &server,
                "/admin/bots",
                Some(token.trim()),
                serde_json::json!({"name": name, "owner": owner}),
            );
        }
        Command::Guild {
            action:
                GuildCommand::Create {
                    name,
                    token,
                    server,
                },
        } => {
            return call(
                &server,
                "/guilds",
                Some(&token),
                serde_json::json!({"name": name}),
            );
        }
        Command::Ring {
            action: RingCommand::Release { etcd, lease_ms },
        } => {
            return runtime()?.block_on(release_ring(&etcd, lease_ms));
        }
        Command::Sim { scenario } => scenario,
        Command::Chaos { action } => return chaos(action),
    };
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
        SimCommand::Voice {
            instances,
            guilds,
            calls,
            zipf_s,
            rpc_capacity_per_s,
            duration_s,
            common,
        } => {
            let params = voice::Params {
                instances,
                guilds,
                calls,
                zipf_s,
                rpc_capacity_per_s,
                duration_s,
                ..voice::Params::default()
            };
            emit(&voice::run(&params, common.seed, common.naive), &common)?;
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

#[cfg(test)]
mod log_filter_tests {
    use super::log_filter;

    #[test]
    fn async_nats_events_are_not_logged_one_line_each() {
        assert!(log_filter(None).to_string().contains("async_nats=warn"));
        let debug = log_filter(Some("debug".to_owned())).to_string();
        assert!(debug.contains("debug") && debug.contains("async_nats=warn"));
        // Asked for by name, it is the operator's choice.
        let named = log_filter(Some("info,async_nats=debug".to_owned())).to_string();
        assert!(!named.contains("async_nats=warn"));
    }
}
