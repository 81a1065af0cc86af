//! The I/O half of the fault harness: a real cluster (NATS, etcd and
//! PostgreSQL through `scripts/services.sh`, `guildhall serve` processes
//! started from this very binary), a workload over the public APIs that
//! records into a history, and a sampler of every process's `/metrics`,
//! RSS, CPU time, open files and log lines. The scenarios (`scenarios`)
//! are written on top of it; what they measure is judged and drawn by the
//! pure modules (`history`, `report`).
//!
//! Everything it starts it stops, by PID, on every path: services and
//! processes are owned values whose drop kills them.

use crate::catalog::Scale;
use crate::history::Entry;
use futures_util::{SinkExt, StreamExt};
use guildhall_sandbox::{Node, Service, Services};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// How often the sampler reads every process.
pub const SAMPLE_INTERVAL_MS: u64 = 500;
/// A `/metrics` read slower than this is a missed sample (a stopped or
/// overloaded process), not a stalled sampler.
const SAMPLE_TIMEOUT_MS: u64 = 400;
/// Samples kept per (process, series): a run longer than this many
/// intervals keeps its first ones (an hour at 500 ms).
const SAMPLES_PER_SERIES_MAX: usize = 7_200;
/// A request with no answer in this long is indeterminate.
pub const REQUEST_TIMEOUT_MS: u64 = 5_000;
/// Polls (100 ms apart) of a condition while setting up, before the run
/// gives up.
const SETUP_POLLS_MAX: u32 = 1_200;
/// IDENTIFYs in flight at once while opening sessions.
const IDENTIFY_CONCURRENCY: usize = 32;
/// History entries kept; the recording stops growing there (and the run
/// says so) rather than filling memory.
const HISTORY_ENTRIES_MAX: usize = 2_000_000;

/// What a replay needs beside its scenario.
#[derive(Clone, Debug)]
pub struct Options {
    /// Its scale.
    pub scale: Scale,
    /// Its seed (its random choices: which process, when).
    pub seed: u64,
    /// The `guildhall` binary to start the processes from.
    pub binary: PathBuf,
    /// Where the report and the logs go.
    pub out: PathBuf,
}

/// Milliseconds since the run's start (its one clock).
#[derive(Clone, Copy, Debug)]
pub struct Clock(Instant);

impl Clock {
    /// Starts now.
    pub fn start() -> Self {
        Self(Instant::now())
    }

    /// Now, in ms since the start.
    pub fn ms(self) -> u64 {
        u64::try_from(self.0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Now, in µs since the start (the history's unit).
    pub fn us(self) -> u64 {
        u64::try_from(self.0.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

/// A process the sampler reads.
#[derive(Clone, Debug)]
struct Watched {
    label: String,
    pid: u32,
    addr: String,
    log: PathBuf,
    alive: bool,
}

/// What the sampler read: (process, series) → (ms, value).
pub type Samples = BTreeMap<(String, String), Vec<(u64, f64)>>;

/// The cluster of one run: its services and processes.
pub struct Cluster {
    binary: PathBuf,
    /// The services (public for their PIDs: a scenario may stop them).
    pub services: Services,
    nodes: BTreeMap<String, Node>,
    env: Vec<(String, String)>,
    watched: Arc<Mutex<Vec<Watched>>>,
    http: reqwest::Client,
    /// Processes that exited without being told to (name, status).
    pub unexpected_exits: Vec<(String, String)>,
    expected_exits: std::collections::BTreeSet<String>,
}

impl Cluster {
    /// Starts NATS, etcd and PostgreSQL.
    ///
    /// # Errors
    /// The services script's output when they cannot start.
    pub fn start(binary: &Path, env: &[(String, String)]) -> Result<Self, String> {
        let services = Services::start(&[Service::Nats, Service::Etcd, Service::Postgres])?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(REQUEST_TIMEOUT_MS))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            binary: binary.to_owned(),
            services,
            nodes: BTreeMap::new(),
            env: env.to_vec(),
            watched: Arc::default(),
            http,
            unexpected_exits: Vec::new(),
            expected_exits: Default::default(),
        })
    }

    /// Starts `guildhall serve` as `name` running `roles`, and waits until
    /// it serves.
    ///
    /// # Errors
    /// Its log when it exits or does not serve in time.
    pub fn spawn(&mut self, name: &str, worker_id: u16, roles: &str) -> Result<(), String> {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let node = Node::spawn_with_env(
            &self.binary,
            &self.services,
            name,
            worker_id,
            roles,
            &[],
            &env,
        )?;
        lock(&self.watched).push(Watched {
            label: name.to_owned(),
            pid: node.pid(),
            addr: node.addr().to_owned(),
            log: node.log_path().to_owned(),
            alive: true,
        });
        self.nodes.insert(name.to_owned(), node);
        Ok(())
    }

    /// The replays' layout: `fronts` gateway+api processes (`front-N`, the
    /// first also running users and presence) and `guilds` guilds
    /// processes (`guilds-N`), each started and serving. Returns their
    /// names.
    ///
    /// # Errors
    /// The log of a process that did not start.
    pub fn spawn_layout(
        &mut self,
        fronts: usize,
        guilds: usize,
    ) -> Result<(Vec<String>, Vec<String>), String> {
        let front_names: Vec<String> = (1..=fronts).map(|i| format!("front-{i}")).collect();
        for (i, name) in front_names.iter().enumerate() {
            let roles = if i == 0 {
                "gateway,api,users,presence"
            } else {
                "gateway,api"
            };
            self.spawn(name, u16::try_from(i + 1).unwrap_or(1), roles)?;
        }
        let guilds_names: Vec<String> = (1..=guilds).map(|i| format!("guilds-{i}")).collect();
        for (i, name) in guilds_names.iter().enumerate() {
            self.spawn(name, u16::try_from(100 + i).unwrap_or(100), "guilds")?;
        }
        Ok((front_names, guilds_names))
    }

    /// `HOST:PORT` of a process.
    pub fn addr(&self, name: &str) -> String {
        self.nodes
            .get(name)
            .map(|n| n.addr().to_owned())
            .unwrap_or_default()
    }

    /// The PID of a process.
    pub fn pid(&self, name: &str) -> u32 {
        self.nodes.get(name).map_or(0, Node::pid)
    }

    /// `kill -SIGNAL` a process; `KILL` also forgets it (and the sampler
    /// stops reading it).
    pub fn signal(&mut self, name: &str, signal: &str) {
        if let Some(node) = self.nodes.get(name) {
            node.signal(signal);
        }
        if signal == "KILL" {
            if let Some(mut node) = self.nodes.remove(name) {
                node.wait();
            }
            for w in lock(&self.watched).iter_mut() {
                if w.label == name {
                    w.alive = false;
                }
            }
        }
    }

    /// `name` is about to be told to exit (SIGTERM): its exit is no crash.
    pub fn expect_exit(&mut self, name: &str) {
        self.expected_exits.insert(name.to_owned());
    }

    /// Records processes that exited by themselves (a crash).
    pub fn check_exits(&mut self) {
        for (name, node) in &mut self.nodes {
            if let Some(status) = node.exited()
                && !self.expected_exits.contains(name)
                && !self.unexpected_exits.iter().any(|(n, _)| n == name)
            {
                self.unexpected_exits
                    .push((name.clone(), status.to_string()));
            }
        }
    }

    /// One metric of a process (a line without labels), 0 when absent or
    /// unreadable.
    pub async fn metric(&self, name: &str, metric: &str) -> f64 {
        self.metrics(name).await.get(metric).copied().unwrap_or(0.0)
    }

    /// Every metric line of a process (empty when unreadable).
    pub async fn metrics(&self, name: &str) -> BTreeMap<String, f64> {
        let Ok(answer) = self
            .http
            .get(format!("http://{}/metrics", self.addr(name)))
            .send()
            .await
        else {
            return BTreeMap::new();
        };
        parse_metrics(&answer.text().await.unwrap_or_default())
    }

    /// Waits for `done`, polling every 100 ms.
    ///
    /// # Errors
    /// `what` when it does not hold in time.
    pub async fn wait_for(
        &self,
        what: &str,
        mut done: impl AsyncFnMut() -> bool,
    ) -> Result<(), String> {
        for _ in 0..SETUP_POLLS_MAX {
            if done().await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("timed out waiting for {what}"))
    }

    /// Starts the sampler; it reads every live process every
    /// [`SAMPLE_INTERVAL_MS`] until `stop` is set, and returns what it read.
    pub fn sample(
        &self,
        clock: Clock,
        metrics: &'static [&'static str],
        stop: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<Samples> {
        let (watched, http) = (self.watched.clone(), self.http.clone());
        tokio::spawn(async move {
            let mut samples = Samples::new();
            let mut push = |label: &str, series: &str, at_ms: u64, value: f64| {
                let points = samples
                    .entry((label.to_owned(), series.to_owned()))
                    .or_default();
                if points.len() < SAMPLES_PER_SERIES_MAX {
                    points.push((at_ms, value));
                }
            };
            let mut tick = tokio::time::interval(Duration::from_millis(SAMPLE_INTERVAL_MS));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let now: Vec<Watched> =
                    lock(&watched).iter().filter(|w| w.alive).cloned().collect();
                for w in now {
                    let at_ms = clock.ms();
                    if let Some(stats) = proc_stats(w.pid) {
                        push(&w.label, "rss_mib", at_ms, stats.rss_kib as f64 / 1_024.0);
                        push(&w.label, "cpu_ticks", at_ms, stats.cpu_ticks as f64);
                        push(&w.label, "open_files", at_ms, stats.open_files as f64);
                    }
                    let lines = std::fs::read(&w.log)
                        .map(|b| b.iter().filter(|&&c| c == b'\n').count())
                        .unwrap_or(0);
                    push(&w.label, "log_lines", at_ms, lines as f64);
                    let read = http
                        .get(format!("http://{}/metrics", w.addr))
                        .timeout(Duration::from_millis(SAMPLE_TIMEOUT_MS))
                        .send()
                        .await;
                    if let Ok(answer) = read
                        && let Ok(text) = answer.text().await
                    {
                        let parsed = parse_metrics(&text);
                        for name in metrics {
                            if let Some(v) = parsed.get(*name) {
                                push(&w.label, name, at_ms, *v);
                            }
                        }
                    }
                }
            }
            samples
        })
    }

    /// Copies every process's log into `dir` (the report links them).
    pub fn keep_logs(&self, dir: &Path) {
        let _ = std::fs::create_dir_all(dir);
        for w in lock(&self.watched).iter() {
            let _ = std::fs::copy(&w.log, dir.join(format!("{}.log", w.label)));
        }
    }

    /// The HTTP client (its timeout is [`REQUEST_TIMEOUT_MS`]).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Prometheus text → (name with its labels as written, value).
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// A process's resources, from `/proc`.
#[derive(Clone, Copy, Debug)]
struct ProcStats {
    rss_kib: u64,
    /// User and system time, in clock ticks.
    cpu_ticks: u64,
    open_files: u64,
}

fn proc_stats(pid: u32) -> Option<ProcStats> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): utime and
    // stime are the 14th and 15th of the whole line.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let cpu_ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let open_files = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    Some(ProcStats {
        rss_kib,
        cpu_ticks,
        open_files,
    })
}

/// The run's history, shared by every recording client.
#[derive(Clone, Default)]
pub struct History(Arc<Mutex<(Vec<Entry>, bool)>>);

impl History {
    /// Records `entry` (dropped, and the history marked cut, past
    /// [`HISTORY_ENTRIES_MAX`]).
    pub fn push(&self, entry: Entry) {
        let mut h = lock(&self.0);
        if h.0.len() < HISTORY_ENTRIES_MAX {
            h.0.push(entry);
        } else {
            h.1 = true;
        }
    }

    /// Everything recorded, and whether the recording was cut.
    pub fn snapshot(&self) -> (Vec<Entry>, bool) {
        let h = lock(&self.0);
        (h.0.clone(), h.1)
    }
}

/// A registered user.
#[derive(Clone, Debug)]
pub struct User {
    /// Its token.
    pub token: String,
    /// Its id.
    pub id: i64,
}

/// Registers a user through `api` (`HOST:PORT`).
///
/// # Errors
/// The answer when it is not a user.
pub async fn register(http: &reqwest::Client, api: &str, username: &str) -> Result<User, String> {
    let user: Value = http
        .post(format!("http://{api}/api/v10/auth/register"))
        .json(&json!({"username": username, "password": "chaos-password-1"}))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    Ok(User {
        token: user["token"]
            .as_str()
            .ok_or(format!("register: {user}"))?
            .to_owned(),
        id: user["user_id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or(format!("register: {user}"))?,
    })
}

/// Creates a guild; returns its id and its first text channel's id.
///
/// # Errors
/// The answer when it is not a guild.
pub async fn create_guild(
    http: &reqwest::Client,
    api: &str,
    user: &User,
    name: &str,
) -> Result<(i64, String), String> {
    let guild: Value = http
        .post(format!("http://{api}/api/v10/guilds"))
        .header("authorization", &user.token)
        .json(&json!({ "name": name }))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let id = guild["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or(format!("create guild: {guild}"))?;
    let channel = guild["channels"][0]["id"]
        .as_str()
        .ok_or(format!("create guild: {guild}"))?
        .to_owned();
    Ok((id, channel))
}

/// Creates an invite to `channel` that never expires.
///
/// # Errors
/// The answer when it is not an invite.
pub async fn create_invite(
    http: &reqwest::Client,
    api: &str,
    owner: &User,
    channel: &str,
) -> Result<String, String> {
    let invite: Value = http
        .post(format!("http://{api}/api/v10/channels/{channel}/invites"))
        .header("authorization", &owner.token)
        .json(&json!({"max_age": 0, "max_uses": 0}))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    Ok(invite["code"]
        .as_str()
        .ok_or(format!("create invite: {invite}"))?
        .to_owned())
}

/// `user` joins through invite `code`.
///
/// # Errors
/// The status and body when the join is refused.
pub async fn join(
    http: &reqwest::Client,
    api: &str,
    user: &User,
    code: &str,
) -> Result<(), String> {
    let answer = http
        .post(format!("http://{api}/api/v10/invites/{code}"))
        .header("authorization", &user.token)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(format!(
            "join {code}: {} {}",
            answer.status(),
            answer.text().await.unwrap_or_default()
        ))
    }
}

/// One post's outcome, for the charts.
#[derive(Clone, Copy, Debug)]
pub struct Post {
    /// Index of its guild in the run's list.
    pub guild: usize,
    /// When it was sent (ms).
    pub sent_ms: u64,
    /// When it was answered or gave up (ms).
    pub done_ms: u64,
    /// 2xx.
    pub ok: bool,
}

/// Gateway sessions of one user: opened, heartbeating, the recording ones
/// writing every READY, GUILD_CREATE and MESSAGE_CREATE into the history.
pub struct Sessions {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Ids of the recording sessions (for their end in the history).
    pub recording: Vec<String>,
    /// Sessions that got their READY.
    pub ready: usize,
    /// Deliveries to recording sessions: (ms) of each MESSAGE_CREATE.
    pub deliveries: Arc<Mutex<Vec<u64>>>,
}

impl Sessions {
    /// Opens `count` sessions of `users` in turn, round robin over
    /// `gateways`; the first `recording` record.
    ///
    /// # Errors
    /// The first session that could not be opened.
    pub async fn open(
        gateways: &[String],
        users: &[User],
        count: usize,
        recording: usize,
        history: &History,
        clock: Clock,
    ) -> Result<Self, String> {
        let deliveries: Arc<Mutex<Vec<u64>>> = Arc::default();
        let limit = Arc::new(tokio::sync::Semaphore::new(IDENTIFY_CONCURRENCY));
        let mut opening = Vec::new();
        for i in 0..count {
            let url = format!("ws://{}/?v=10&encoding=json", gateways[i % gateways.len()]);
            let (limit, user, history, deliveries) = (
                limit.clone(),
                users[i % users.len()].clone(),
                history.clone(),
                deliveries.clone(),
            );
            let records = i < recording;
            opening.push(tokio::spawn(async move {
                let _permit = limit.acquire_owned().await.map_err(|e| e.to_string())?;
                open_one(&url, &user, records, history, deliveries, clock).await
            }));
        }
        let mut sessions = Self {
            tasks: Vec::new(),
            recording: Vec::new(),
            ready: 0,
            deliveries,
        };
        for (i, task) in opening.into_iter().enumerate() {
            let (session, task) = task.await.map_err(|e| e.to_string())??;
            if i < recording {
                sessions.recording.push(session);
            }
            sessions.ready += 1;
            sessions.tasks.push(task);
        }
        Ok(sessions)
    }

    /// Closes every session (their tasks end).
    pub fn close(self) {
        for task in self.tasks {
            task.abort();
        }
    }
}

async fn open_one(
    url: &str,
    user: &User,
    records: bool,
    history: History,
    deliveries: Arc<Mutex<Vec<u64>>>,
    clock: Clock,
) -> Result<(String, tokio::task::JoinHandle<()>), String> {
    let (mut ws, _) = tokio::time::timeout(
        Duration::from_millis(REQUEST_TIMEOUT_MS),
        tokio_tungstenite::connect_async(url),
    )
    .await
    .map_err(|_| format!("{url}: no connection in time"))?
    .map_err(|e| format!("{url}: {e}"))?;
    let hello = ws
        .next()
        .await
        .ok_or("closed before HELLO")?
        .map_err(|e| e.to_string())?;
    let hello: Value =
        serde_json::from_str(hello.to_text().unwrap_or_default()).unwrap_or_default();
    let heartbeat_ms = hello["d"]["heartbeat_interval"].as_u64().unwrap_or(41_250);
    let identify = json!({"op": 2, "d": {"token": user.token, "intents": 1 | 512 | 32768,
        "properties": {"os": "linux", "browser": "guildhall-chaos", "device": "guildhall-chaos"}}});
    ws.send(Message::Text(identify.to_string().into()))
        .await
        .map_err(|e| e.to_string())?;
    let session = loop {
        let frame = tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS * 4), ws.next())
            .await
            .map_err(|_| "no READY in time")?
            .ok_or("closed before READY")?
            .map_err(|e| e.to_string())?;
        let text = match frame {
            Message::Text(text) => text,
            Message::Close(close) => return Err(format!("closed before READY: {close:?}")),
            _ => continue,
        };
        let frame: Value = serde_json::from_str(&text).unwrap_or_default();
        if frame["t"] == "READY" {
            break frame["d"]["session_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
        }
    };
    if records {
        history.push(Entry::SessionStart {
            at_us: clock.us(),
            session: session.clone(),
            user: user.id,
        });
    }
    let id = session.clone();
    let task = tokio::spawn(async move {
        let mut seq: Option<u64> = None;
        let mut beat = tokio::time::interval(Duration::from_millis(heartbeat_ms));
        beat.tick().await;
        loop {
            tokio::select! {
                _ = beat.tick() => {
                    let beat = json!({"op": 1, "d": seq});
                    if ws.send(Message::Text(beat.to_string().into())).await.is_err() {
                        break;
                    }
                }
                frame = ws.next() => {
                    let Some(Ok(frame)) = frame else { break };
                    let Message::Text(text) = frame else { continue };
                    if !records {
                        // A reader that only keeps the sequence number: the
                        // load, not the record.
                        if let Some(s) = text.split("\"s\":").nth(1)
                            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                            .and_then(|d| d.parse().ok())
                        {
                            seq = Some(s);
                        }
                        continue;
                    }
                    let frame: Value = serde_json::from_str(&text).unwrap_or_default();
                    if let Some(s) = frame["s"].as_u64() {
                        seq = Some(s);
                    }
                    let at_us = clock.us();
                    let guild = |v: &Value| v.as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
                    match frame["t"].as_str() {
                        Some("GUILD_CREATE") => history.push(Entry::Resync {
                            at_us,
                            session: id.clone(),
                            guild: guild(&frame["d"]["id"]),
                        }),
                        Some("MESSAGE_CREATE") => {
                            lock(&deliveries).push(at_us / 1_000);
                            history.push(Entry::Deliver {
                                at_us,
                                session: id.clone(),
                                guild: guild(&frame["d"]["guild_id"]),
                                key: frame["d"]["content"].as_str().unwrap_or_default().to_owned(),
                                seq: frame["s"].as_u64().unwrap_or(0),
                            });
                        }
                        _ => {}
                    }
                    if frame["op"] == 9 {
                        break;
                    }
                }
            }
        }
        // Closed for good or told to identify anew: what it misses from
        // now on is not owed to it.
        if records {
            history.push(Entry::SessionEnd {
                at_us: clock.us(),
                session: id,
            });
        }
    });
    Ok((session, task))
}
