//! The replays' workload, over the public APIs: a user who owns the guilds
//! and posts, member users each in a few guilds (joined through invites)
//! with gateway sessions that heartbeat (a few record every dispatch into
//! the history), one poster per guild at a steady pace, and after a fault
//! a probe of every guild not served again yet, every `PROBE_INTERVAL_MS`,
//! so the time until each guild is served again is measured to that
//! precision.

use crate::harness::{self, Clock, Cluster, History, Post, Sessions, User};
use crate::history::{self, Entry, Report};
use crate::report::{self, Chart, Series};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The pause of a poster whose guild is not served again yet: recovery is
/// measured to this precision, whatever the baseline pace.
const PROBE_INTERVAL_MS: u64 = 200;
/// Probes of one guild in flight at once while it is not served again.
/// While each waits out a dead owner's reply timeout (5 s), a new one
/// starts every timeout / this (0.6 s): the measure's precision then. More
/// would make the harness a retry storm of its own (a medium replay's 45
/// unserved guilds at 32 each held 1,440 requests open at the api).
const PROBES_IN_FLIGHT_MAX: usize = 8;
/// After the posters stop, how long the history checker is retried while
/// the outboxes make good what a fault cut.
const SETTLE_MS_MAX: u64 = 20_000;

/// How large the workload is.
#[derive(Clone, Debug)]
pub struct Size {
    /// Guilds, one poster each.
    pub guilds: usize,
    /// Users with sessions.
    pub users: usize,
    /// Guilds each of those users joined.
    pub guilds_per_user: usize,
    /// Gateway sessions, over the fronts and the users in turn.
    pub sessions: usize,
    /// Of those, the sessions that record every dispatch.
    pub recording_sessions: usize,
    /// Pause between two posts of one guild's poster.
    pub post_interval_ms: u64,
}

/// Users and guilds, made before the run's clock starts.
pub struct Setup {
    owner: User,
    members: Vec<User>,
    /// (guild id, its first text channel).
    pub guilds: Vec<(i64, String)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Registers the users, creates the guilds and their invites, joins every
/// member to its guilds through `api` (`HOST:PORT`), and waits until
/// `front` places every guild.
///
/// # Errors
/// The first call that failed, or placement not reached in time.
pub async fn setup(cluster: &Cluster, front: &str, size: &Size) -> Result<Setup, String> {
    let api = cluster.addr(front);
    let http = cluster.http();
    let owner = harness::register(http, &api, "chaos").await?;
    let mut guilds = Vec::new();
    for i in 0..size.guilds {
        guilds.push(harness::create_guild(http, &api, &owner, &format!("replay {i}")).await?);
    }
    let mut invites = Vec::new();
    for (_, channel) in &guilds {
        invites.push(harness::create_invite(http, &api, &owner, channel).await?);
    }
    let mut members = Vec::new();
    for u in 0..size.users {
        let member = harness::register(http, &api, &format!("member{u}")).await?;
        for k in 0..size.guilds_per_user {
            let code = &invites[(u * size.guilds_per_user + k) % invites.len()];
            harness::join(http, &api, &member, code).await?;
        }
        members.push(member);
    }
    let placed = size.guilds as f64;
    cluster
        .wait_for("every guild placed", async || {
            cluster.metric(front, "guildhall_placement_guilds").await == placed
        })
        .await?;
    Ok(Setup {
        owner,
        members,
        guilds,
    })
}

/// The running workload.
pub struct Workload {
    /// Every send, answer and dispatch of the recording sessions.
    pub history: History,
    /// The sessions.
    pub sessions: Sessions,
    /// Every post's outcome.
    pub posts: Arc<Mutex<Vec<Post>>>,
    /// (guild id, channel).
    pub guilds: Vec<(i64, String)>,
    stop: Arc<AtomicBool>,
    fault_at: Arc<AtomicU64>,
    served_again: Arc<Mutex<Vec<Option<u64>>>>,
    posters: Vec<tokio::task::JoinHandle<()>>,
    clock: Clock,
}

impl Workload {
    /// Opens the sessions over `fronts` and starts the posters (each
    /// posting through the fronts in turn, the first posts spread over one
    /// interval by `seed`).
    ///
    /// # Errors
    /// A session that could not be opened.
    pub async fn start(
        cluster: &Cluster,
        fronts: &[String],
        setup: Setup,
        size: &Size,
        seed: u64,
        clock: Clock,
    ) -> Result<Self, String> {
        let Setup {
            owner,
            members,
            guilds,
        } = setup;
        let history = History::default();
        for (u, member) in members.iter().enumerate() {
            for k in 0..size.guilds_per_user {
                history.push(Entry::Membership {
                    at_us: 0,
                    user: member.id,
                    guild: guilds[(u * size.guilds_per_user + k) % guilds.len()].0,
                    member: true,
                });
            }
        }
        let gateways: Vec<String> = fronts.iter().map(|f| cluster.addr(f)).collect();
        let sessions = Sessions::open(
            &gateways,
            &members,
            size.sessions,
            size.recording_sessions,
            &history,
            clock,
        )
        .await?;
        let mut workload = Self {
            history,
            sessions,
            posts: Arc::default(),
            stop: Arc::default(),
            fault_at: Arc::default(),
            served_again: Arc::new(Mutex::new(vec![None; guilds.len()])),
            posters: Vec::new(),
            guilds: guilds.clone(),
            clock,
        };
        for (g, (guild, channel)) in guilds.iter().enumerate() {
            let via = fronts[g % fronts.len()].clone();
            let url = format!(
                "http://{}/api/v10/channels/{channel}/messages",
                cluster.addr(&via)
            );
            let poster = Poster {
                g,
                guild: *guild,
                via,
                url,
                http: cluster.http().clone(),
                token: owner.token.clone(),
                stop: workload.stop.clone(),
                fault_at: workload.fault_at.clone(),
                served_again: workload.served_again.clone(),
                posts: workload.posts.clone(),
                history: workload.history.clone(),
                clock,
            };
            let offset_ms = seed.wrapping_add(g as u64 * 7_919) % size.post_interval_ms.max(1);
            let interval_ms = size.post_interval_ms;
            workload
                .posters
                .push(tokio::spawn(poster.run(offset_ms, interval_ms)));
        }
        Ok(workload)
    }

    /// A fault happens now: from here every guild is probed until a post
    /// sent after it is acknowledged. Returns its time (ms).
    pub fn fault(&self) -> u64 {
        lock(&self.served_again).iter_mut().for_each(|s| *s = None);
        let at_ms = self.clock.ms().max(1);
        self.fault_at.store(at_ms, Ordering::Relaxed);
        at_ms
    }

    /// When every guild was served again after the fault at `fault_ms`
    /// (the last guild's first acknowledged post), or `None` if not within
    /// `wait_ms_max`.
    pub async fn served_again(&self, fault_ms: u64, wait_ms_max: u64) -> Option<u64> {
        loop {
            let served = lock(&self.served_again).clone();
            if served.iter().all(Option::is_some) {
                return served.iter().flatten().max().copied();
            }
            if self.clock.ms() > fault_ms + wait_ms_max {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the posters (their probes in flight finish) and judges the
    /// history, again while it still finds breaches, for at most
    /// `SETTLE_MS_MAX`. Returns the report and whether the recording was
    /// cut at its bound.
    pub async fn stop_and_check(&mut self) -> (Report, bool) {
        self.stop.store(true, Ordering::Relaxed);
        for poster in self.posters.drain(..) {
            let _ = poster.await;
        }
        let posting_ended_ms = self.clock.ms();
        let (mut checked, mut cut) = self.check();
        let mut pause_ms = 100;
        while checked.breaches_total() > 0 && self.clock.ms() < posting_ended_ms + SETTLE_MS_MAX {
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            pause_ms = (pause_ms * 2).min(2_000);
            (checked, cut) = self.check();
        }
        (checked, cut)
    }

    /// Closes the sessions; returns every post and the recording
    /// sessions' deliveries (ms).
    pub fn finish(self) -> (Vec<Post>, Vec<u64>) {
        let posts = lock(&self.posts).clone();
        let deliveries = lock(&self.sessions.deliveries).clone();
        self.sessions.close();
        (posts, deliveries)
    }

    fn check(&self) -> (Report, bool) {
        let (mut entries, cut) = self.history.snapshot();
        let ended: BTreeSet<String> = entries
            .iter()
            .filter_map(|e| match e {
                Entry::SessionEnd { session, .. } => Some(session.clone()),
                _ => None,
            })
            .collect();
        let at_us = self.clock.us();
        for session in &self.sessions.recording {
            if !ended.contains(session) {
                entries.push(Entry::SessionEnd {
                    at_us,
                    session: session.clone(),
                });
            }
        }
        (history::check(&entries, 0), cut)
    }
}

/// One guild's poster.
struct Poster {
    g: usize,
    guild: i64,
    via: String,
    url: String,
    http: reqwest::Client,
    token: String,
    stop: Arc<AtomicBool>,
    fault_at: Arc<AtomicU64>,
    served_again: Arc<Mutex<Vec<Option<u64>>>>,
    posts: Arc<Mutex<Vec<Post>>>,
    history: History,
    clock: Clock,
}

impl Poster {
    async fn run(self, offset_ms: u64, interval_ms: u64) {
        let poster = Arc::new(self);
        tokio::time::sleep(Duration::from_millis(offset_ms)).await;
        let probes = Arc::new(tokio::sync::Semaphore::new(PROBES_IN_FLIGHT_MAX));
        let mut in_flight = Vec::new();
        let mut n = 0u64;
        let (clock, g) = (poster.clock, poster.g);
        while !poster.stop.load(Ordering::Relaxed) {
            let key = format!("g{g}-{n}");
            n += 1;
            let sent_ms = clock.ms();
            let fault_ms = poster.fault_at.load(Ordering::Relaxed);
            if fault_ms > 0 && lock(&poster.served_again)[g].is_none() {
                // Not served again yet: a probe every PROBE_INTERVAL_MS,
                // each in its own task, so one waiting out a dead owner's
                // reply timeout does not blur the measure.
                let Ok(permit) = probes.clone().acquire_owned().await else {
                    break;
                };
                let poster = poster.clone();
                in_flight.push(tokio::spawn(async move {
                    poster.post(key, sent_ms, fault_ms).await;
                    drop(permit);
                }));
                tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)).await;
                continue;
            }
            poster.post(key, sent_ms, fault_ms).await;
            // The baseline's pace, cut short by a fault (the probes start
            // at once).
            let due_ms = clock.ms() + interval_ms;
            while clock.ms() < due_ms
                && !poster.stop.load(Ordering::Relaxed)
                && poster.fault_at.load(Ordering::Relaxed) <= sent_ms
            {
                tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)).await;
            }
        }
        for probe in in_flight {
            let _ = probe.await;
        }
    }

    /// One post, recorded; `fault_ms` is the latest fault when it was sent.
    async fn post(&self, key: String, sent_ms: u64, fault_ms: u64) {
        let clock = self.clock;
        self.history.push(Entry::Invoke {
            at_us: clock.us(),
            guild: self.guild,
            key: key.clone(),
            via: self.via.clone(),
        });
        let answer = self
            .http
            .post(&self.url)
            .header("authorization", &self.token)
            .json(&json!({ "content": key }))
            .send()
            .await;
        let status = answer.as_ref().map(|a| a.status().as_u16()).unwrap_or(0);
        let ok = (200..300).contains(&status);
        // A 5xx or no answer leaves the send indeterminate.
        if (200..500).contains(&status) {
            self.history.push(Entry::Complete {
                at_us: clock.us(),
                key,
                ok,
            });
        }
        let done_ms = clock.ms();
        lock(&self.posts).push(Post {
            guild: self.g,
            sent_ms,
            done_ms,
            ok,
        });
        // Sent after the latest fault: its guild is served.
        if ok && fault_ms > 0 && self.fault_at.load(Ordering::Relaxed) == fault_ms {
            let mut served = lock(&self.served_again);
            if served[self.g].is_none() {
                served[self.g] = Some(done_ms);
            }
        }
    }
}

/// Chart buckets.
const BUCKET_MS: u64 = 1_000;

/// One series per process of a sampled metric (processes whose name
/// starts with `prefix`).
pub fn per_process(samples: &harness::Samples, metric: &str, prefix: &str) -> Vec<Series> {
    samples
        .iter()
        .filter(|((label, m), _)| m == metric && label.starts_with(prefix))
        .map(|((label, _), points)| Series {
            label: label.clone(),
            points: points.clone(),
        })
        .collect()
}

/// Per-second rates of sampled counters. CPU time is in clock ticks, 100
/// per second of one core: its rate is the % of one core.
pub fn rates(series: Vec<Series>) -> Vec<Series> {
    series
        .into_iter()
        .map(|s| Series {
            label: s.label,
            points: report::counter_rate(&s.points),
        })
        .collect()
}

/// The workload's charts: posts answered, their latency, deliveries.
pub fn workload_charts(posts: &[Post], deliveries: &[u64], end_ms: u64) -> Vec<Chart> {
    let done = |ok: bool| -> Vec<u64> {
        posts
            .iter()
            .filter(|p| p.ok == ok)
            .map(|p| p.done_ms)
            .collect()
    };
    let latency: Vec<(u64, f64)> = posts
        .iter()
        .filter(|p| p.ok)
        .map(|p| (p.done_ms, (p.done_ms - p.sent_ms) as f64))
        .collect();
    vec![
        Chart {
            title: "Posts answered".to_owned(),
            unit: "per s".to_owned(),
            series: vec![
                Series {
                    label: "acknowledged (2xx)".to_owned(),
                    points: report::rate_per_s(&done(true), BUCKET_MS, end_ms),
                },
                Series {
                    label: "failed or no answer".to_owned(),
                    points: report::rate_per_s(&done(false), BUCKET_MS, end_ms),
                },
            ],
        },
        Chart {
            title: "Post latency, acknowledged posts".to_owned(),
            unit: "ms".to_owned(),
            series: vec![
                Series {
                    label: "p50".to_owned(),
                    points: report::percentile_per_bucket(&latency, BUCKET_MS, 50.0),
                },
                Series {
                    label: "p99".to_owned(),
                    points: report::percentile_per_bucket(&latency, BUCKET_MS, 99.0),
                },
            ],
        },
        Chart {
            title: "Messages delivered to the recording sessions".to_owned(),
            unit: "per s".to_owned(),
            series: vec![Series {
                label: "MESSAGE_CREATE".to_owned(),
                points: report::rate_per_s(deliveries, BUCKET_MS, end_ms),
            }],
        },
    ]
}

/// Every process's resources: RSS, CPU, log lines, open files.
pub fn process_charts(samples: &harness::Samples) -> Vec<Chart> {
    vec![
        Chart {
            title: "Resident memory per process".to_owned(),
            unit: "MiB".to_owned(),
            series: per_process(samples, "rss_mib", ""),
        },
        Chart {
            title: "CPU per process".to_owned(),
            unit: "% of one core".to_owned(),
            series: rates(per_process(samples, "cpu_ticks", "")),
        },
        Chart {
            title: "Log lines per process".to_owned(),
            unit: "per s".to_owned(),
            series: rates(per_process(samples, "log_lines", "")),
        },
        Chart {
            title: "Open file descriptors per process".to_owned(),
            unit: "files".to_owned(),
            series: per_process(samples, "open_files", ""),
        },
    ]
}
