//! `voice-bench`: the voice figures of issue 8, each against a baseline
//! measured in the same run.
//!
//! 1. **Op 4 → VOICE_SERVER_UPDATE**: `joins` times, 150 ms apart (under
//!    the per-guild spawn budget), a participant joins an
//!    empty voice channel (a syncer spawned under the budget, the call
//!    allocated on an SFU, the user admitted with a new token) and leaves
//!    again; p50 and p99 of the time from op 4 sent to VOICE_SERVER_UPDATE
//!    received. Baseline: the same session's op 1 → op 11 round trip
//!    (heartbeat → ack), so the figure reads as "this many gateway round
//!    trips".
//! 2. **Forwarding**: `participants` join one call; each sends 20 ms Opus
//!    frames at `pps` for `seconds`; every other participant receives
//!    them (a sample decrypted, to check). Figure: packets forwarded per
//!    CPU-second of the server process (`/proc/PID/stat`), against a raw
//!    UDP relay (this binary's `udp-relay`: receive, send to every other
//!    peer, no crypto, no protocol) driven by the same participants at
//!    the same rate, measured the same way. Reported as the ratio.
//!
//! Bounded: every wait has a timeout, the run ends by itself.

use crate::probe::cpu_ticks;
use crate::{percentile_ms, post};
use anyhow::{Context, Result, bail};
use guildhall_loadgen::voice::{GatewaySession, Mode, VoiceClient};
use serde_json::json;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;

/// Arguments.
#[derive(clap::Args)]
pub struct VoiceBenchArgs {
    /// host:port of the server (embedded mode: the SFU at `/voice`).
    #[arg(long, default_value = "127.0.0.1:8080")]
    base: String,
    /// The server's PID (its CPU time is read from /proc).
    #[arg(long)]
    server_pid: u32,
    /// Cold joins to time (150 ms apart).
    #[arg(long, default_value_t = 100)]
    joins: usize,
    /// Participants of the forwarding call.
    #[arg(long, default_value_t = 8)]
    participants: usize,
    /// Frames per second each participant sends (Opus: 50).
    #[arg(long, default_value_t = 50)]
    pps: u32,
    /// Seconds each forwarding run lasts.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

/// `voice-bench`.
pub fn run(args: VoiceBenchArgs) -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench(args))
}

/// `udp-relay ADDR`: the raw baseline. Every datagram goes to every other
/// address heard from (at most 64 peers); nothing is parsed.
pub fn relay(listen: &str) -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let socket = UdpSocket::bind(listen).await?;
            {
                let mut out = std::io::stdout().lock();
                writeln!(out, "relay {}", socket.local_addr()?)?;
                out.flush()?;
            }
            let mut peers: Vec<std::net::SocketAddr> = Vec::new();
            let mut buf = [0u8; 2048];
            loop {
                let (n, from) = socket.recv_from(&mut buf).await?;
                if !peers.contains(&from) && peers.len() < 64 {
                    peers.push(from);
                }
                for peer in peers.iter().filter(|p| **p != from) {
                    let _ = socket.send_to(&buf[..n], peer).await;
                }
            }
        })
}

/// Between two cold joins of one guild: 2 spawns each, so 13 spawns/s,
/// under the default `voice_spawn_guild_rate_per_s` of 20.
const JOIN_INTERVAL_MS: u64 = 150;

struct Account {
    token: String,
    user_id: String,
}

async fn bench(args: VoiceBenchArgs) -> Result<()> {
    let http = reqwest::Client::new();
    let rest = format!("http://{}/api/v10", args.base);
    let suffix = std::process::id();
    let mut accounts = Vec::new();
    for i in 0..args.participants.max(2) {
        let user = post(
            &http,
            format!("{rest}/auth/register"),
            "",
            json!({"username": format!("voice{suffix}x{i}"), "password": "loadgen-password"}),
        )
        .await?;
        accounts.push(Account {
            token: user["token"].as_str().context("token")?.to_owned(),
            user_id: user["user_id"].as_str().context("user_id")?.to_owned(),
        });
    }
    let owner = &accounts[0].token;
    let guild = post(
        &http,
        format!("{rest}/guilds"),
        owner,
        json!({"name": "Voice bench"}),
    )
    .await?;
    let guild_id = guild["id"].as_str().context("guild")?.to_owned();
    let general = guild["channels"][0]["id"]
        .as_str()
        .context("channel")?
        .to_owned();
    let channel = post(
        &http,
        format!("{rest}/guilds/{guild_id}/channels"),
        owner,
        json!({"name": "Bench", "type": 2}),
    )
    .await?["id"]
        .as_str()
        .context("voice channel")?
        .to_owned();
    let invite = post(
        &http,
        format!("{rest}/channels/{general}/invites"),
        owner,
        json!({}),
    )
    .await?;
    let code = invite["code"].as_str().context("invite")?;
    for account in &accounts[1..] {
        post(
            &http,
            format!("{rest}/invites/{code}"),
            &account.token,
            json!({}),
        )
        .await?;
    }

    // 1. Op 4 → VOICE_SERVER_UPDATE, cold (the channel empty each time).
    let mut session = GatewaySession::identify(&args.base, owner).await?;
    let mut joins = Vec::with_capacity(args.joins);
    let mut round_trips = Vec::with_capacity(args.joins);
    for _ in 0..args.joins {
        round_trips.push(session.round_trip().await?);
        let sent = Instant::now();
        session.join(&guild_id, &channel).await?;
        joins.push(sent.elapsed());
        session.leave(&guild_id).await?;
        // Paced under the per-guild spawn budget (a cold join spawns a
        // coordinator and a syncer): faster, joins are refused by design
        // and the client would have to retry.
        session
            .pump(Duration::from_millis(JOIN_INTERVAL_MS))
            .await?;
    }
    let (join_p50, join_p99) = (
        percentile_ms(&mut joins, 50.0),
        percentile_ms(&mut joins, 99.0),
    );
    let (rt_p50, rt_p99) = (
        percentile_ms(&mut round_trips, 50.0),
        percentile_ms(&mut round_trips, 99.0),
    );
    drop(session);

    // 2. Forwarding through the SFU.
    let mut sessions = Vec::new();
    let mut clients = Vec::new();
    for (i, account) in accounts.iter().enumerate() {
        let mut s = GatewaySession::identify(&args.base, &account.token).await?;
        let server = s.join(&guild_id, &channel).await?;
        let mode = if i % 2 == 0 {
            Mode::Aes256Gcm
        } else {
            Mode::XChaCha20
        };
        let client = VoiceClient::connect(&server, &account.user_id, &s.session_id, mode).await?;
        client.speak().await?;
        sessions.push(s);
        clients.push(client);
    }
    let sfu = forward(&args, clients, Some(args.server_pid)).await?;
    drop(sessions);

    // 3. The same load through the raw relay.
    let exe = std::env::current_exe()?;
    let mut child = std::process::Command::new(exe)
        .args(["udp-relay", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let line = std::io::BufReader::new(child.stdout.take().context("relay stdout")?)
        .lines()
        .next()
        .context("relay said nothing")??;
    let relay_addr: std::net::SocketAddr = line
        .strip_prefix("relay ")
        .context("relay address")?
        .parse()?;
    let raw = forward_raw(&args, relay_addr, child.id()).await;
    let _ = child.kill();
    let _ = child.wait();
    let raw = raw?;

    let ratio = if raw.per_cpu_s > 0.0 {
        sfu.per_cpu_s / raw.per_cpu_s
    } else {
        0.0
    };
    writeln!(
        std::io::stdout().lock(),
        "{}",
        json!({
            "op4_to_voice_server_ms": {"p50": join_p50, "p99": join_p99, "samples": joins.len()},
            "gateway_round_trip_ms": {"p50": rt_p50, "p99": rt_p99},
            "op4_to_voice_server_in_round_trips": {"p50": join_p50 / rt_p50.max(0.001), "p99": join_p99 / rt_p99.max(0.001)},
            "sfu": {"forwarded": sfu.forwarded, "expected": sfu.expected, "cpu_s": sfu.cpu_s, "forwarded_per_cpu_s": sfu.per_cpu_s, "forwarded_per_s": sfu.per_s, "decrypt_failures": sfu.failures},
            "raw_relay": {"forwarded": raw.forwarded, "expected": raw.expected, "cpu_s": raw.cpu_s, "forwarded_per_cpu_s": raw.per_cpu_s, "forwarded_per_s": raw.per_s},
            "sfu_per_core_vs_raw": ratio,
        })
    )?;
    Ok(())
}

struct Forwarded {
    forwarded: u64,
    expected: u64,
    cpu_s: f64,
    per_cpu_s: f64,
    per_s: f64,
    failures: u64,
}

fn figures(
    forwarded: u64,
    expected: u64,
    ticks: u64,
    elapsed: Duration,
    failures: u64,
) -> Forwarded {
    let cpu_s = ticks as f64 / 100.0;
    Forwarded {
        forwarded,
        expected,
        cpu_s,
        per_cpu_s: if cpu_s > 0.0 {
            forwarded as f64 / cpu_s
        } else {
            0.0
        },
        per_s: forwarded as f64 / elapsed.as_secs_f64().max(0.001),
        failures,
    }
}

/// Every participant sends `pps` frames for `seconds`; counts what the
/// others receive (one packet in 64 decrypted, to check it is media).
async fn forward(
    args: &VoiceBenchArgs,
    clients: Vec<VoiceClient>,
    pid: Option<u32>,
) -> Result<Forwarded> {
    let frames = args.pps as u64 * args.seconds;
    let mut prepared = Vec::new();
    let mut clients_out = Vec::new();
    for mut client in clients {
        let packets: Vec<Vec<u8>> = (0..frames)
            .map(|i| client.seal_frame(format!("bench-{i:08}").as_bytes()))
            .collect::<Result<_>>()?;
        prepared.push(packets);
        clients_out.push(Arc::new(client));
    }
    let received = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let stop_at = Instant::now() + Duration::from_secs(args.seconds + 3);
    let before = pid.and_then(cpu_ticks).unwrap_or(0);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in &clients_out {
        let (client, received, failures) = (client.clone(), received.clone(), failures.clone());
        tasks.push(tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            let mut n_seen = 0u64;
            while Instant::now() < stop_at {
                let Ok(Ok(n)) =
                    tokio::time::timeout(Duration::from_millis(200), client.udp().recv(&mut buf))
                        .await
                else {
                    continue;
                };
                if n == 8 {
                    continue;
                }
                n_seen += 1;
                received.fetch_add(1, Ordering::Relaxed);
                if n_seen % 64 == 1 && !matches!(client.open(&buf[..n]), Some(Ok(_))) {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let interval = Duration::from_secs_f64(1.0 / f64::from(args.pps.max(1)));
    let mut senders = Vec::new();
    for (client, packets) in clients_out.iter().zip(prepared) {
        let client = client.clone();
        senders.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            for packet in packets {
                tick.tick().await;
                let _ = client.udp().send(&packet).await;
            }
        }));
    }
    for sender in senders {
        let _ = sender.await;
    }
    let after = pid.and_then(cpu_ticks).unwrap_or(0);
    let elapsed = started.elapsed();
    for task in tasks {
        let _ = task.await;
    }
    let n = clients_out.len() as u64;
    Ok(figures(
        received.load(Ordering::Relaxed),
        frames * n * (n - 1),
        after.saturating_sub(before),
        elapsed,
        failures.load(Ordering::Relaxed),
    ))
}

/// The same shape of load through the raw relay: plain datagrams of the
/// same size.
async fn forward_raw(
    args: &VoiceBenchArgs,
    relay: std::net::SocketAddr,
    pid: u32,
) -> Result<Forwarded> {
    let n = args.participants.max(2);
    let frames = args.pps as u64 * args.seconds;
    let mut sockets = Vec::new();
    for _ in 0..n {
        let socket = UdpSocket::bind("127.0.0.1:0").await?;
        socket.connect(relay).await?;
        // Register with the relay before the clock starts.
        socket.send(&[0u8; 8]).await?;
        sockets.push(Arc::new(socket));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for socket in &sockets {
        let mut buf = [0u8; 64];
        while let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_millis(50), socket.recv(&mut buf)).await
        {}
    }
    let received = Arc::new(AtomicU64::new(0));
    let stop_at = Instant::now() + Duration::from_secs(args.seconds + 3);
    let before = cpu_ticks(pid).unwrap_or(0);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for socket in &sockets {
        let (socket, received) = (socket.clone(), received.clone());
        tasks.push(tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            while Instant::now() < stop_at {
                if let Ok(Ok(_)) =
                    tokio::time::timeout(Duration::from_millis(200), socket.recv(&mut buf)).await
                {
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // 12-byte header + 14-byte payload + 16-byte tag + 4-byte nonce: what
    // the SFU's senders send.
    let packet = vec![0x80u8; 46];
    let interval = Duration::from_secs_f64(1.0 / f64::from(args.pps.max(1)));
    let mut senders = Vec::new();
    for socket in &sockets {
        let (socket, packet) = (socket.clone(), packet.clone());
        senders.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            for _ in 0..frames {
                tick.tick().await;
                let _ = socket.send(&packet).await;
            }
        }));
    }
    for sender in senders {
        let _ = sender.await;
    }
    let after = cpu_ticks(pid).unwrap_or(0);
    let elapsed = started.elapsed();
    for task in tasks {
        let _ = task.await;
    }
    if received.load(Ordering::Relaxed) == 0 {
        bail!("the relay forwarded nothing");
    }
    let n = n as u64;
    Ok(figures(
        received.load(Ordering::Relaxed),
        frames * n * (n - 1),
        after.saturating_sub(before),
        elapsed,
        0,
    ))
}
