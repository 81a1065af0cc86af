//! The voice role over the in-process bus, against a small SFU responder
//! that answers the real envelopes on the real subjects. Time is tokio's
//! paused clock: every figure is virtual and deterministic.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use bytes::Bytes;
use guildhall_cluster::{Bus, LocalBus};
use guildhall_proto::bus::{NodeEvent, NodeEventBody, gateway_events_subject};
use guildhall_proto::cluster::SfuInfo;
use guildhall_proto::voice::{
    SfuEnvelope, SfuReply, SfuRequest, VoiceEnvelope, VoiceRefusal, VoiceReply, VoiceRequest,
    decode_reply, encode_reply, sfu_control_subject, sfu_requests_subject, voice_requests_subject,
};
use guildhall_voice::{SfuInstance, SfuList, VoiceConfig, VoiceRole, token};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

const NODE: &str = "voice-1";
const GATEWAY: &str = "gw-1";

/// What a fake SFU saw.
#[derive(Default)]
struct Seen {
    allocated: Vec<(i64, u64)>,
    /// (user, token digest)
    admitted: Vec<(i64, String)>,
    evicted: Vec<(i64, i64)>,
    released: Vec<(i64, u64, Instant)>,
}

struct FakeSfu {
    node: String,
    seen: Arc<Mutex<Seen>>,
    /// While set, admissions of users ≥ 2 are never answered.
    stall_admits: Arc<AtomicBool>,
    _tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl FakeSfu {
    async fn start(bus: &LocalBus, node: &str) -> FakeSfu {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stall = Arc::new(AtomicBool::new(false));
        let mut requests = bus
            .subscribe(&sfu_requests_subject(node), None, 4_096)
            .await
            .unwrap();
        let mut control = bus
            .subscribe(&sfu_control_subject(node), None, 4_096)
            .await
            .unwrap();
        let endpoint = format!("{node}.example:443");
        let t1 = tokio::spawn({
            let (bus, seen, stall) = (bus.clone(), seen.clone(), stall.clone());
            async move {
                while let Some(m) = requests.next().await {
                    let env = SfuEnvelope::decode(&m.payload).unwrap();
                    let reply = match env.body {
                        SfuRequest::Allocate {
                            channel_id, epoch, ..
                        } => {
                            seen.lock().unwrap().allocated.push((channel_id, epoch));
                            SfuReply::Allocated {
                                endpoint: endpoint.clone(),
                            }
                        }
                        SfuRequest::Admit {
                            user_id,
                            token_sha256,
                            ..
                        } => {
                            if stall.load(Ordering::Relaxed) && user_id >= 2 {
                                continue;
                            }
                            seen.lock().unwrap().admitted.push((user_id, token_sha256));
                            SfuReply::Admitted
                        }
                        other => panic!("control on the bulk subject: {other:?}"),
                    };
                    let _ = bus.publish(
                        m.reply.as_deref().unwrap(),
                        None,
                        Bytes::from(encode_reply(&reply)),
                    );
                }
            }
        });
        let t2 = tokio::spawn({
            let seen = seen.clone();
            async move {
                while let Some(m) = control.next().await {
                    let env = SfuEnvelope::decode(&m.payload).unwrap();
                    let mut seen = seen.lock().unwrap();
                    match env.body {
                        SfuRequest::Evict {
                            channel_id,
                            user_id,
                        } => seen.evicted.push((channel_id, user_id)),
                        SfuRequest::Release { channel_id, epoch } => {
                            seen.released.push((channel_id, epoch, Instant::now()))
                        }
                        other => panic!("bulk on the control subject: {other:?}"),
                    }
                }
            }
        });
        FakeSfu {
            node: node.to_owned(),
            seen,
            stall_admits: stall,
            _tasks: vec![t1, t2],
        }
    }

    fn instance(&self, sessions: u32) -> SfuInstance {
        SfuInstance {
            node: self.node.clone(),
            info: SfuInfo {
                endpoint: format!("{}.example:443", self.node),
                sessions_max: 100_000,
                sessions,
                calls: 0,
            },
        }
    }

    fn admitted(&self, digest: &str) -> bool {
        self.seen
            .lock()
            .unwrap()
            .admitted
            .iter()
            .any(|(_, d)| d == digest)
    }
}

async fn start_role(
    bus: &LocalBus,
    limits: guildhall_limits::Limits,
    sfus: Vec<SfuInstance>,
) -> (VoiceRole, watch::Sender<SfuList>) {
    assert_eq!(limits.validate(), Ok(()));
    let (tx, rx) = watch::channel(Arc::new(sfus));
    let role = VoiceRole::start(
        VoiceConfig {
            node: NODE.into(),
            limits,
        },
        Arc::new(bus.clone()),
        rx,
        Arc::new(|_session: &str| Some(GATEWAY.to_owned())),
    )
    .await
    .unwrap();
    (role, tx)
}

async fn ask(bus: &LocalBus, request: VoiceRequest) -> VoiceReply {
    let answer = bus
        .request(
            &voice_requests_subject(NODE),
            Bytes::from(VoiceEnvelope::new(request).encode()),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    decode_reply(&answer.payload).unwrap()
}

fn join(guild_id: i64, channel_id: i64, user_id: i64) -> VoiceRequest {
    VoiceRequest::Join {
        guild_id,
        channel_id,
        user_id,
        session_id: format!("session-{user_id}"),
    }
}

fn leave(guild_id: i64, user_id: i64) -> VoiceRequest {
    VoiceRequest::Leave {
        guild_id,
        user_id,
        session_id: format!("session-{user_id}"),
    }
}

/// Waits (virtual time) until `done`, at most `max_ms`.
async fn until(max_ms: u64, mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..max_ms {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    done()
}

#[tokio::test(start_paused = true)]
async fn join_answers_a_server_whose_token_was_admitted_and_leaves_evict_then_release() {
    let bus = LocalBus::new(1 << 20);
    let sfu = FakeSfu::start(&bus, "sfu-a").await;
    let (role, _sfus) = start_role(&bus, Default::default(), vec![sfu.instance(0)]).await;

    let VoiceReply::Server { endpoint, token } = ask(&bus, join(1, 10, 1)).await else {
        panic!("no server");
    };
    assert_eq!(endpoint, "sfu-a.example:443");
    assert_eq!(token.len(), 32);
    assert!(sfu.admitted(&token::digest(&token)), "digest admitted");
    let VoiceReply::Server { token: t2, .. } = ask(&bus, join(1, 10, 2)).await else {
        panic!("no server");
    };
    assert_ne!(token, t2, "tokens are per user");
    assert_eq!(sfu.seen.lock().unwrap().allocated.len(), 1, "one call");
    let calls = role.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].participants, 2);
    assert_eq!(calls[0].sfu_node.as_deref(), Some("sfu-a"));

    assert_eq!(ask(&bus, leave(1, 1)).await, VoiceReply::Left);
    assert!(until(100, || sfu.seen.lock().unwrap().evicted == [(10, 1)]).await);
    assert!(sfu.seen.lock().unwrap().released.is_empty(), "one left");
    assert_eq!(ask(&bus, leave(1, 2)).await, VoiceReply::Left);
    assert!(until(100, || sfu.seen.lock().unwrap().released.len() == 1).await);
    let stats = role.stats();
    assert!(
        until(100, || stats.syncers_live.load(Ordering::Relaxed) == 0
            && stats.coordinators_live.load(Ordering::Relaxed) == 0)
        .await
    );
    assert!(role.calls().is_empty());
    // A drain releases every call.
    assert!(matches!(
        ask(&bus, join(1, 10, 3)).await,
        VoiceReply::Server { .. }
    ));
    assert!(matches!(
        ask(&bus, join(2, 20, 3)).await,
        VoiceReply::Server { .. }
    ));
    assert_eq!(role.release_all(), 2);
    assert!(until(100, || sfu.seen.lock().unwrap().released.len() == 3).await);
    assert!(until(100, || role.calls().is_empty()).await);
    // Leaving again, or a guild with no voice: Left.
    assert_eq!(ask(&bus, leave(1, 2)).await, VoiceReply::Left);
    assert_eq!(ask(&bus, leave(7, 2)).await, VoiceReply::Left);
}

#[tokio::test(start_paused = true)]
async fn moving_channels_evicts_from_the_old_call() {
    let bus = LocalBus::new(1 << 20);
    let sfu = FakeSfu::start(&bus, "sfu-a").await;
    let (role, _sfus) = start_role(&bus, Default::default(), vec![sfu.instance(0)]).await;
    assert!(matches!(
        ask(&bus, join(1, 10, 1)).await,
        VoiceReply::Server { .. }
    ));
    assert!(matches!(
        ask(&bus, join(1, 11, 1)).await,
        VoiceReply::Server { .. }
    ));
    assert!(until(100, || sfu.seen.lock().unwrap().released.len() == 1).await);
    assert_eq!(sfu.seen.lock().unwrap().evicted, [(10, 1)]);
    let calls = role.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].channel_id, calls[0].participants), (11, 1));
}

/// A tiny seeded generator for the callers' jitter (seed printed).
struct XorShift(u64);
impl XorShift {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_joins_spawns_at_the_budget_children_counted() {
    const RATE: u32 = 100;
    const BURST: u32 = 10;
    const GUILDS: i64 = 50;
    const CHANNELS: i64 = 4;
    const USERS_PER_CHANNEL: i64 = 5;
    let seed = 3u64;
    println!("seed {seed}");
    let limits = guildhall_limits::Limits {
        voice_spawn_rate_per_s: RATE,
        voice_spawn_burst: BURST,
        voice_spawn_guild_rate_per_s: 20,
        voice_spawn_guild_burst: 5,
        ..Default::default()
    };
    let bus = LocalBus::new(1 << 20);
    let sfu = FakeSfu::start(&bus, "sfu-a").await;
    let (role, _sfus) = start_role(&bus, limits, vec![sfu.instance(0)]).await;
    let stats = role.stats();

    // Samples the spawn count every 10 virtual ms.
    let samples = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
    let t0 = Instant::now();
    let sampler = tokio::spawn({
        let (stats, samples) = (stats.clone(), samples.clone());
        async move {
            loop {
                let spawned = stats.coordinators_spawned_total.load(Ordering::Relaxed)
                    + stats.syncers_spawned_total.load(Ordering::Relaxed);
                samples
                    .lock()
                    .unwrap()
                    .push((t0.elapsed().as_millis() as u64, spawned));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    let refused = Arc::new(AtomicU64::new(0));
    let mut callers = Vec::new();
    let mut user = 0;
    for guild in 1..=GUILDS {
        for channel in 0..CHANNELS {
            for _ in 0..USERS_PER_CHANNEL {
                user += 1;
                let (bus, refused) = (bus.clone(), refused.clone());
                let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ user as u64 | 1);
                let request = join(guild, guild * 100 + channel, user);
                callers.push(tokio::spawn(async move {
                    let started = Instant::now();
                    for _attempt in 0..1_000 {
                        match ask(&bus, request.clone()).await {
                            VoiceReply::Server { .. } => {
                                return started.elapsed().as_millis() as u64;
                            }
                            VoiceReply::Refused {
                                retry_after_ms,
                                reason,
                            } => {
                                assert!(matches!(reason, VoiceRefusal::SpawnBudget), "{reason:?}");
                                refused.fetch_add(1, Ordering::Relaxed);
                                // The refuser jitters; the caller adds a little of its own.
                                let jitter_ms = (50.0 * rng.unit()) as u64;
                                tokio::time::sleep(Duration::from_millis(
                                    retry_after_ms + jitter_ms,
                                ))
                                .await;
                            }
                            VoiceReply::Left => panic!("left"),
                        }
                    }
                    panic!("never connected");
                }));
            }
        }
    }
    let mut connected_ms = Vec::new();
    for caller in callers {
        connected_ms.push(caller.await.unwrap());
    }
    sampler.abort();
    connected_ms.sort_unstable();
    let p50 = connected_ms[connected_ms.len() / 2];
    let p99 = connected_ms[connected_ms.len() * 99 / 100];
    let max = *connected_ms.last().unwrap();

    let samples = samples.lock().unwrap().clone();
    let total = samples.last().unwrap().1;
    let expected = (GUILDS + GUILDS * CHANNELS) as u64;
    assert_eq!(
        total, expected,
        "a coordinator per guild and a syncer per channel"
    );
    assert_eq!(
        stats.syncers_spawned_total.load(Ordering::Relaxed),
        (GUILDS * CHANNELS) as u64,
        "children counted"
    );
    // Never above the budget in any window (rate × window + burst; the
    // sampling adds one 10 ms step of slack).
    for (i, (ta, na)) in samples.iter().enumerate() {
        for (tb, nb) in &samples[i..] {
            let allowed = u64::from(BURST) + u64::from(RATE) * (tb - ta + 10) / 1000;
            assert!(nb - na <= allowed, "{} spawns in [{ta}, {tb}] ms", nb - na);
        }
    }
    // The admitted rate after the burst, over the time spawning took.
    let last_spawn_ms = samples.iter().find(|(_, n)| *n == total).unwrap().0;
    let rate = (total - u64::from(BURST)) as f64 / (last_spawn_ms as f64 / 1000.0);
    println!(
        "spawns {total} in {last_spawn_ms} virtual ms: {rate:.1}/s against a budget of {RATE}/s \
         (burst {BURST}); refusals {}; time to connected p50 {p50} ms, p99 {p99} ms, max {max} ms",
        refused.load(Ordering::Relaxed)
    );
    let budget = f64::from(RATE);
    assert!(
        (rate - budget).abs() <= budget * 0.10,
        "admitted rate {rate:.1}/s not within 10 % of {budget}/s"
    );
    // 250 spawns at 100/s after a burst of 10: 2.4 s; everyone is
    // connected within 4 s of virtual time.
    assert!(max <= 4_000, "max time to connected {max} ms");
    assert!(stats.mailbox_depth_max.load(Ordering::Relaxed) as usize <= 256);
}

#[tokio::test(start_paused = true)]
async fn a_dead_sfu_s_calls_are_replaced_and_every_participant_told() {
    let bus = LocalBus::new(1 << 20);
    let a = FakeSfu::start(&bus, "sfu-a").await;
    let b = FakeSfu::start(&bus, "sfu-b").await;
    // b is busier: every call goes to a first.
    let (role, sfus) = start_role(
        &bus,
        Default::default(),
        vec![a.instance(0), b.instance(50_000)],
    )
    .await;
    let partitions = guildhall_limits::GATEWAY_EVENT_PARTITIONS;
    let mut events = Vec::new();
    for p in 0..partitions {
        events.push(
            bus.subscribe(&gateway_events_subject(GATEWAY, p), None, 64)
                .await
                .unwrap(),
        );
    }
    let mut users = BTreeMap::new();
    for channel in [10, 11, 12] {
        for n in 0..2 {
            let user = channel * 10 + n;
            let VoiceReply::Server { endpoint, .. } = ask(&bus, join(5, channel, user)).await
            else {
                panic!("no server");
            };
            assert_eq!(endpoint, "sfu-a.example:443");
            users.insert(format!("session-{user}"), user);
        }
    }
    let epochs: BTreeMap<i64, u64> = role
        .calls()
        .iter()
        .map(|c| (c.channel_id, c.epoch))
        .collect();
    // a dies: the view drops it.
    sfus.send_replace(Arc::new(vec![b.instance(50_000)]));

    let mut told = BTreeMap::new();
    for subscription in &mut events {
        while told.len() < users.len() {
            let Ok(Some(m)) =
                tokio::time::timeout(Duration::from_millis(500), subscription.next()).await
            else {
                break;
            };
            let event = NodeEvent::decode(&m.payload).unwrap();
            let NodeEventBody::Session {
                session_id,
                name,
                data,
                ..
            } = event.body
            else {
                panic!("not a session event");
            };
            assert_eq!(name, "VOICE_SERVER_UPDATE");
            let data: serde_json::Value = serde_json::from_str(data.get()).unwrap();
            assert_eq!(data["guild_id"], "5");
            assert_eq!(data["endpoint"], "sfu-b.example:443");
            let token = data["token"].as_str().unwrap();
            assert!(b.admitted(&token::digest(token)), "new token admitted on b");
            told.insert(session_id, token.to_owned());
        }
    }
    assert_eq!(told.len(), users.len(), "every participant told: {told:?}");
    let calls = role.calls();
    assert_eq!(calls.len(), 3);
    for call in &calls {
        assert_eq!(
            call.sfu_node.as_deref(),
            Some("sfu-b"),
            "no syncer on the dead SFU"
        );
        assert!(
            call.epoch > epochs[&call.channel_id],
            "epoch grew on takeover"
        );
        assert_eq!(call.participants, 2);
    }
    let stats = role.stats();
    assert_eq!(stats.replacements_total.load(Ordering::Relaxed), 3);
    assert_eq!(
        stats.server_updates_published_total.load(Ordering::Relaxed),
        6
    );
    // New joins go to b.
    let VoiceReply::Server { endpoint, .. } = ask(&bus, join(5, 13, 1)).await else {
        panic!("no server");
    };
    assert_eq!(endpoint, "sfu-b.example:443");
}

#[tokio::test(start_paused = true)]
async fn control_is_handled_while_the_bulk_mailbox_is_full() {
    let limits = guildhall_limits::Limits {
        voice_mailbox_messages_max: 4,
        ..Default::default()
    };
    let bus = LocalBus::new(1 << 20);
    let sfu = FakeSfu::start(&bus, "sfu-a").await;
    let (role, _sfus) = start_role(&bus, limits.clone(), vec![sfu.instance(0)]).await;
    assert!(matches!(
        ask(&bus, join(1, 10, 1)).await,
        VoiceReply::Server { .. }
    ));
    // The SFU stops answering admissions: the syncer waits on user 2's,
    // and the joins behind it fill its mailbox.
    sfu.stall_admits.store(true, Ordering::Relaxed);
    let mut pending = Vec::new();
    for user in 2..=12 {
        let bus = bus.clone();
        pending.push(tokio::spawn(
            async move { ask(&bus, join(1, 10, user)).await },
        ));
    }
    let stats = role.stats();
    assert!(
        until(1_000, || stats.mailbox_depth_max.load(Ordering::Relaxed)
            >= 4)
        .await,
        "the bulk mailbox filled"
    );
    let refused_full = stats.refused_total[1].load(Ordering::Relaxed);
    let released_at = Instant::now();
    assert!(role.release_call(1, 10), "control accepted");
    assert!(until(1_000, || !sfu.seen.lock().unwrap().released.is_empty()).await);
    let (_, _, at) = sfu.seen.lock().unwrap().released[0];
    let waited_ms = at.duration_since(released_at).as_millis() as u64;
    println!(
        "release handled {waited_ms} virtual ms after it was sent; {refused_full} joins refused as the mailbox was full"
    );
    assert!(
        waited_ms < limits.voice_sfu_request_timeout_ms,
        "control waited for the stalled SFU request ({waited_ms} ms)"
    );
    // Every queued join was answered, none waited for its deadline.
    for p in pending {
        let reply = p.await.unwrap();
        assert!(matches!(reply, VoiceReply::Refused { .. }), "{reply:?}");
    }
    assert!(refused_full >= 1, "the mailbox overflowed into refusals");
    assert!(role.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_sfu_whose_breaker_opens_loses_all_its_calls() {
    let bus = LocalBus::new(1 << 20);
    let a = FakeSfu::start(&bus, "sfu-a").await;
    let b = FakeSfu::start(&bus, "sfu-b").await;
    let limits = guildhall_limits::Limits::default();
    let (role, _sfus) = start_role(
        &bus,
        limits.clone(),
        vec![a.instance(0), b.instance(50_000)],
    )
    .await;
    let mut events = Vec::new();
    for p in 0..limits.gateway_event_partitions {
        events.push(
            bus.subscribe(&gateway_events_subject(GATEWAY, p), None, 64)
                .await
                .unwrap(),
        );
    }
    // Two guilds, one call each, on a.
    for guild in [1, 2] {
        assert!(matches!(
            ask(&bus, join(guild, guild * 10, 1)).await,
            VoiceReply::Server { .. }
        ));
    }
    // a stops admitting: each join of guild 1 waits out the SFU deadline.
    a.stall_admits.store(true, Ordering::Relaxed);
    for user in 2..2 + i64::from(limits.voice_sfu_breaker_failures_max) {
        let reply = ask(&bus, join(1, 10, user)).await;
        assert!(
            matches!(
                reply,
                VoiceReply::Refused {
                    reason: VoiceRefusal::SfuUnavailable,
                    ..
                }
            ),
            "{reply:?}"
        );
    }
    let stats = role.stats();
    assert_eq!(stats.breakers_opened_total.load(Ordering::Relaxed), 1);
    // Both calls move to b, guild 2's too, though its own requests never failed.
    assert!(
        until(5_000, || role
            .calls()
            .iter()
            .all(|c| c.sfu_node.as_deref() == Some("sfu-b")))
        .await,
        "{:?}",
        role.calls()
    );
    let mut told = 0;
    for subscription in &mut events {
        while let Ok(Some(_)) =
            tokio::time::timeout(Duration::from_millis(100), subscription.next()).await
        {
            told += 1;
        }
    }
    assert_eq!(told, 2, "user 1 of each guild told the new endpoint");
    assert_eq!(stats.replacements_total.load(Ordering::Relaxed), 2);
}
