//! `NatsBus` against a real nats-server (started by `guildhall-sandbox` on a
//! free loopback port, never the machine's own 4222), and the behaviour
//! both buses share checked against `LocalBus` too: one contract, two
//! implementations.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use guildhall_cluster::bus::{Bus, BusError, LocalBus, Message, Subscription};
use guildhall_cluster::nats::{NatsBus, NatsOptions};
use guildhall_sandbox::{Service, Services};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

const PAYLOAD_BYTES_MAX: usize = 16 * 1024;

/// Two handles on one bus: the publishing side and the subscribing side.
/// For NATS they are two connections (two processes, as far as the server
/// can tell); for `LocalBus` the same bus twice.
struct Pair {
    publisher: Arc<dyn Bus>,
    subscriber: Arc<dyn Bus>,
    _services: Option<Services>,
}

fn local() -> Pair {
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(PAYLOAD_BYTES_MAX));
    Pair {
        publisher: bus.clone(),
        subscriber: bus,
        _services: None,
    }
}

fn start_nats() -> Services {
    Services::start(&[Service::Nats]).unwrap_or_else(|e| panic!("{e}"))
}

fn test_options() -> NatsOptions {
    NatsOptions {
        payload_bytes_max: PAYLOAD_BYTES_MAX,
        ..NatsOptions::default()
    }
}

async fn connect(services: &Services, options: NatsOptions) -> NatsBus {
    NatsBus::connect(services.nats_url(), options)
        .await
        .unwrap()
}

async fn nats() -> Pair {
    let services = start_nats();
    Pair {
        publisher: Arc::new(connect(&services, test_options()).await),
        subscriber: Arc::new(connect(&services, test_options()).await),
        _services: Some(services),
    }
}

async fn recv(subscription: &mut Subscription, within: Duration) -> Option<Message> {
    tokio::time::timeout(within, subscription.next())
        .await
        .ok()
        .flatten()
}

/// Polls `condition` every 10 ms for at most `within`.
async fn eventually(within: Duration, mut condition: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Answers every request on `subject` with its own payload.
async fn echo(bus: Arc<dyn Bus>, subject: &str) -> tokio::task::JoinHandle<()> {
    let mut requests = bus.subscribe(subject, None, 64).await.unwrap();
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            if let Some(reply) = request.reply {
                let _ = bus.publish(&reply, None, request.payload);
            }
        }
    })
}

/// The behaviour both buses promise.
mod contract {
    use super::*;

    /// Plain subscribers each get every message, in order; a queue group
    /// gets each message once, shared among its members.
    pub async fn plain_copies_and_one_per_group(pair: Pair) {
        let bus = &pair.subscriber;
        let mut a = bus.subscribe("deliver", None, 64).await.unwrap();
        let mut b = bus.subscribe("deliver", None, 64).await.unwrap();
        let mut g1 = bus.subscribe("deliver", Some("workers"), 64).await.unwrap();
        let mut g2 = bus.subscribe("deliver", Some("workers"), 64).await.unwrap();
        for i in 0..20u8 {
            pair.publisher
                .publish("deliver", None, Bytes::from(vec![i]))
                .unwrap();
        }
        for sub in [&mut a, &mut b] {
            for i in 0..20u8 {
                let message = recv(sub, Duration::from_secs(5)).await.unwrap();
                assert_eq!(message.payload[0], i, "order kept per subject");
                assert_eq!(message.subject, "deliver");
                assert_eq!(message.reply, None);
            }
        }
        let mut group = Vec::new();
        let collected = eventually(Duration::from_secs(5), async || {
            while let Some(m) = recv(&mut g1, Duration::ZERO).await {
                group.push(m.payload[0]);
            }
            while let Some(m) = recv(&mut g2, Duration::ZERO).await {
                group.push(m.payload[0]);
            }
            group.len() >= 20
        })
        .await;
        assert!(collected, "group got {} of 20", group.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            g1.is_empty() && g2.is_empty(),
            "each message once per group"
        );
        group.sort_unstable();
        assert_eq!(group, (0..20).collect::<Vec<u8>>());
    }

    /// The server sees the caller's deadline, and sees it pass.
    pub async fn a_request_carries_its_deadline(pair: Pair) {
        let mut server = pair.subscriber.subscribe("svc", None, 4).await.unwrap();
        let caller = {
            let bus = pair.publisher.clone();
            tokio::spawn(async move {
                bus.request("svc", Bytes::from_static(b"q"), Duration::from_secs(20))
                    .await
            })
        };
        let request = recv(&mut server, Duration::from_secs(5)).await.unwrap();
        let left = request.deadline.unwrap() - Instant::now();
        assert!(
            left <= Duration::from_secs(20) && left > Duration::from_secs(15),
            "{left:?}"
        );
        assert!(!request.expired());
        assert_eq!(&request.payload[..], b"q");
        pair.subscriber
            .publish(
                request.reply.as_deref().unwrap(),
                None,
                Bytes::from_static(b"a"),
            )
            .unwrap();
        assert_eq!(&caller.await.unwrap().unwrap().payload[..], b"a");

        // A short deadline has passed by the time a slow server looks.
        let caller = {
            let bus = pair.publisher.clone();
            tokio::spawn(async move {
                bus.request("svc", Bytes::new(), Duration::from_millis(50))
                    .await
            })
        };
        let request = recv(&mut server, Duration::from_secs(5)).await.unwrap();
        assert!(request.deadline.is_some());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(request.expired());
        assert_eq!(caller.await.unwrap().unwrap_err(), BusError::Timeout);
    }

    pub async fn a_request_nobody_serves_has_no_responders(pair: Pair) {
        let started = Instant::now();
        assert_eq!(
            pair.publisher
                .request("nobody", Bytes::new(), Duration::from_secs(5))
                .await
                .unwrap_err(),
            BusError::NoResponders
        );
        assert!(started.elapsed() < Duration::from_secs(1), "fails fast");
        assert!(
            pair.publisher
                .stats()
                .no_responders_total
                .load(Ordering::Relaxed)
                >= 1
        );
    }

    pub async fn a_silent_server_times_the_request_out(pair: Pair) {
        let _silent = pair.subscriber.subscribe("silent", None, 4).await.unwrap();
        let started = Instant::now();
        assert_eq!(
            pair.publisher
                .request("silent", Bytes::new(), Duration::from_millis(100))
                .await
                .unwrap_err(),
            BusError::Timeout
        );
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(100) && waited < Duration::from_secs(1),
            "{waited:?}"
        );
        assert_eq!(
            pair.publisher
                .stats()
                .request_timeouts_total
                .load(Ordering::Relaxed),
            1
        );
    }

    /// A full subscriber loses messages, counted where it lives, and its
    /// neighbours get everything.
    pub async fn a_slow_subscriber_drops_and_counts_without_blocking_others(pair: Pair) {
        let slow = pair.subscriber.subscribe("burst", None, 2).await.unwrap();
        let mut fast = pair.subscriber.subscribe("burst", None, 16).await.unwrap();
        let dropped_before = pair
            .subscriber
            .stats()
            .dropped_full_total
            .load(Ordering::Relaxed);
        for _ in 0..5 {
            // LocalBus tells the publisher (`Full`); over NATS the
            // publisher cannot know, the subscriber's side counts.
            let result = pair
                .publisher
                .publish("burst", None, Bytes::from_static(b"x"));
            assert!(matches!(result, Ok(()) | Err(BusError::Full)), "{result:?}");
        }
        for _ in 0..5 {
            assert!(recv(&mut fast, Duration::from_secs(5)).await.is_some());
        }
        let stats = pair.subscriber.stats();
        let counted = eventually(Duration::from_secs(2), async || {
            stats.dropped_full_total.load(Ordering::Relaxed) - dropped_before == 3
        })
        .await;
        assert!(counted);
        assert_eq!(slow.len(), 2);
    }

    pub async fn subscriptions_are_bounded_in_bytes(pair: Pair) {
        let sub = pair.subscriber.subscribe("big", None, 1000).await.unwrap();
        let stats = pair.subscriber.stats();
        let dropped_before = stats.dropped_full_total.load(Ordering::Relaxed);
        for _ in 0..100 {
            let result =
                pair.publisher
                    .publish("big", None, Bytes::from(vec![0u8; PAYLOAD_BYTES_MAX]));
            assert!(matches!(result, Ok(()) | Err(BusError::Full)), "{result:?}");
        }
        // 64 × the largest payload at most, whatever the message bound.
        let counted = eventually(Duration::from_secs(5), async || {
            stats.dropped_full_total.load(Ordering::Relaxed) - dropped_before == 36
        })
        .await;
        assert!(counted);
        assert_eq!(sub.len(), 64);
    }

    pub async fn an_oversized_payload_is_refused(pair: Pair) {
        let _sub = pair.subscriber.subscribe("large", None, 4).await.unwrap();
        let too_large = Bytes::from(vec![0u8; PAYLOAD_BYTES_MAX + 1]);
        assert_eq!(
            pair.publisher.publish("large", None, too_large.clone()),
            Err(BusError::TooLarge)
        );
        assert_eq!(
            pair.publisher
                .request("large", too_large, Duration::from_secs(1))
                .await
                .unwrap_err(),
            BusError::TooLarge
        );
        assert_eq!(
            pair.publisher
                .stats()
                .too_large_total
                .load(Ordering::Relaxed),
            2
        );
        // The maximum itself passes.
        assert!(
            pair.publisher
                .publish("large", None, Bytes::from(vec![0u8; PAYLOAD_BYTES_MAX]))
                .is_ok()
        );
    }

    /// Dropping a subscription unsubscribes: the subject has no responders
    /// again (for NATS: the server itself says so).
    pub async fn dropping_a_subscription_unsubscribes(pair: Pair) {
        let sub = pair.subscriber.subscribe("gone", None, 4).await.unwrap();
        assert_eq!(
            pair.publisher
                .request("gone", Bytes::new(), Duration::from_millis(50))
                .await
                .unwrap_err(),
            BusError::Timeout,
            "subscribed: someone holds the request"
        );
        drop(sub);
        let publisher = &pair.publisher;
        let unsubscribed = eventually(Duration::from_secs(2), async || {
            publisher
                .request("gone", Bytes::new(), Duration::from_millis(50))
                .await
                .is_err_and(|e| e == BusError::NoResponders)
        })
        .await;
        assert!(unsubscribed);
    }
}

macro_rules! both_buses {
    ($($check:ident),* $(,)?) => {
        mod local_bus {
            use super::*;
            $(
                #[tokio::test]
                async fn $check() {
                    contract::$check(local()).await;
                }
            )*
        }
        mod nats_bus {
            use super::*;
            $(
                #[tokio::test]
                async fn $check() {
                    contract::$check(nats().await).await;
                }
            )*
        }
    };
}

both_buses!(
    plain_copies_and_one_per_group,
    a_request_carries_its_deadline,
    a_request_nobody_serves_has_no_responders,
    a_silent_server_times_the_request_out,
    a_slow_subscriber_drops_and_counts_without_blocking_others,
    subscriptions_are_bounded_in_bytes,
    an_oversized_payload_is_refused,
    dropping_a_subscription_unsubscribes,
);

// NATS only from here.

/// The publish queue is the bound `publish` enforces: with the publisher
/// task unable to run (this test's single thread never yields), the fifth
/// publish finds the queue full and is refused at once.
#[tokio::test]
async fn a_full_publish_queue_refuses_without_waiting() {
    let services = start_nats();
    let subscriber = connect(&services, test_options()).await;
    let mut sub = subscriber.subscribe("queued", None, 64).await.unwrap();
    let publisher = connect(
        &services,
        NatsOptions {
            publish_queue_messages_max: 4,
            ..test_options()
        },
    )
    .await;
    let started = std::time::Instant::now();
    let results: Vec<_> = (0..10u8)
        .map(|i| publisher.publish("queued", None, Bytes::from(vec![i])))
        .collect();
    assert!(started.elapsed() < Duration::from_millis(50));
    assert_eq!(results[..4], [Ok(()), Ok(()), Ok(()), Ok(())]);
    assert!(results[4..].iter().all(|r| *r == Err(BusError::Full)));
    assert_eq!(
        publisher
            .nats_stats()
            .publish_queue_full_total
            .load(Ordering::Relaxed),
        6
    );
    assert_eq!(publisher.stats().published_total.load(Ordering::Relaxed), 4);
    // The queued four arrive, in order, and the queue has room again.
    for i in 0..4u8 {
        let message = recv(&mut sub, Duration::from_secs(5)).await.unwrap();
        assert_eq!(message.payload[0], i);
    }
    assert!(recv(&mut sub, Duration::from_millis(100)).await.is_none());
    assert!(publisher.publish("queued", None, Bytes::new()).is_ok());
}

/// async-nats's own per-subscription staging channel overflows when the
/// forwarding task cannot keep up; its slow-consumer events are counted,
/// per subscription.
#[tokio::test]
async fn slow_consumer_events_are_counted_per_subscription() {
    let services = start_nats();
    let subscriber = connect(
        &services,
        NatsOptions {
            subscription_staging_messages_max: 1,
            ..test_options()
        },
    )
    .await;
    let _sub = subscriber.subscribe("flood", None, 100_000).await.unwrap();
    let _quiet = subscriber.subscribe("quiet", None, 4).await.unwrap();
    let publisher = connect(&services, test_options()).await;
    for _ in 0..5_000 {
        publisher
            .publish("flood", None, Bytes::from_static(b"x"))
            .unwrap();
        if publisher
            .nats_stats()
            .publish_queue_full_total
            .load(Ordering::Relaxed)
            > 0
        {
            break;
        }
    }
    let stats = subscriber.nats_stats();
    let reported = eventually(Duration::from_secs(5), async || {
        stats.slow_consumer_events_total.load(Ordering::Relaxed) > 0
    })
    .await;
    assert!(reported, "no slow-consumer event");
    let slow = subscriber.slow_consumers();
    assert_eq!(slow.len(), 1, "{slow:?}");
    assert_eq!(slow[0].0, "flood");
    assert!(slow[0].1 >= 1);
}

fn signal(pid: u32, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
}

/// Until the process is stopped: a signal is delivered asynchronously, so
/// for a moment after `kill` returns the server can still answer (on a
/// busy machine, a request sent then was answered). Bounded polls of
/// /proc, not a sleep.
fn wait_stopped(pid: u32) {
    for _ in 0..2_000 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command name's closing parenthesis.
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if matches!(state, Some('T' | 't')) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("process {pid} never stopped");
}

/// Resumes a stopped server even when an assertion fails first.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        signal(self.0, rustix::process::Signal::CONT);
    }
}

/// A hung server (SIGSTOP): requests time out at their deadline instead of
/// hanging, `publish` still never waits, and everything works again once
/// the server resumes.
#[tokio::test]
async fn a_stopped_server_times_requests_out_and_they_work_after_it_resumes() {
    let services = start_nats();
    let server = Arc::new(connect(&services, test_options()).await);
    let _echo = echo(server, "echo").await;
    let caller = connect(&services, test_options()).await;
    assert!(
        caller
            .request("echo", Bytes::new(), Duration::from_secs(2))
            .await
            .is_ok()
    );
    let pid = services.pid(Service::Nats).unwrap();
    signal(pid, rustix::process::Signal::STOP);
    let resume = Resume(pid);
    wait_stopped(pid);
    for _ in 0..3 {
        let started = Instant::now();
        assert_eq!(
            caller
                .request("echo", Bytes::new(), Duration::from_millis(200))
                .await
                .unwrap_err(),
            BusError::Timeout
        );
        assert!(started.elapsed() < Duration::from_millis(700));
        let started = std::time::Instant::now();
        let result = caller.publish("echo.events", None, Bytes::new());
        assert!(matches!(result, Ok(()) | Err(BusError::Full)), "{result:?}");
        assert!(started.elapsed() < Duration::from_millis(10));
    }
    drop(resume);
    let caller = &caller;
    let back = eventually(Duration::from_secs(5), async || {
        caller
            .request(
                "echo",
                Bytes::from_static(b"hi"),
                Duration::from_millis(500),
            )
            .await
            .is_ok_and(|answer| &answer.payload[..] == b"hi")
    })
    .await;
    assert!(back);
}

/// A nats-server the test starts itself, on a given port.
struct OwnServer(std::process::Child);

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A killed server (SIGKILL) makes the bus refuse fast with `Disconnected`;
/// a new server on the same port is found again, and the subscriptions made
/// before the crash serve again (async-nats subscribes them anew).
#[tokio::test]
async fn after_a_server_crash_the_bus_refuses_fast_then_reconnects_and_resubscribes() {
    let services = start_nats();
    let port: u16 = services
        .nats_url()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let server = Arc::new(connect(&services, test_options()).await);
    let _echo = echo(server.clone(), "echo").await;
    let caller = connect(&services, test_options()).await;
    assert!(
        caller
            .request("echo", Bytes::new(), Duration::from_secs(2))
            .await
            .is_ok()
    );
    signal(
        services.pid(Service::Nats).unwrap(),
        rustix::process::Signal::KILL,
    );
    let caller_ref = &caller;
    assert!(
        eventually(Duration::from_secs(5), async || !caller_ref.is_connected()).await,
        "the loss is noticed"
    );
    assert_eq!(
        caller.publish("echo", None, Bytes::new()),
        Err(BusError::Disconnected)
    );
    let started = Instant::now();
    assert_eq!(
        caller
            .request("echo", Bytes::new(), Duration::from_secs(5))
            .await
            .unwrap_err(),
        BusError::Disconnected
    );
    assert!(started.elapsed() < Duration::from_millis(50));
    assert!(
        caller
            .nats_stats()
            .disconnected_refusals_total
            .load(Ordering::Relaxed)
            >= 2
    );

    let _restarted = OwnServer(
        std::process::Command::new("nats-server")
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .or_else(|_| {
                std::process::Command::new("/usr/sbin/nats-server")
                    .args(["-a", "127.0.0.1", "-p", &port.to_string()])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
            })
            .unwrap(),
    );
    let back = eventually(Duration::from_secs(10), async || {
        caller_ref
            .request(
                "echo",
                Bytes::from_static(b"again"),
                Duration::from_millis(500),
            )
            .await
            .is_ok_and(|answer| &answer.payload[..] == b"again")
    })
    .await;
    assert!(back, "reconnected and resubscribed");
    assert!(
        caller
            .nats_stats()
            .disconnects_total
            .load(Ordering::Relaxed)
            >= 1
    );
    assert!(server.nats_stats().connects_total.load(Ordering::Relaxed) >= 2);
}

#[tokio::test]
async fn connect_fails_fast_when_nothing_listens() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let started = Instant::now();
    let result = NatsBus::connect(&format!("nats://127.0.0.1:{port}"), test_options()).await;
    assert!(result.is_err());
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn invalid_subjects_are_refused_before_anything_is_sent() {
    let services = start_nats();
    let bus = connect(&services, test_options()).await;
    assert_eq!(
        bus.publish("two words", None, Bytes::new()),
        Err(BusError::InvalidSubject)
    );
    assert_eq!(
        bus.subscribe("a..b", None, 1).await.unwrap_err(),
        BusError::InvalidSubject
    );
    assert_eq!(
        bus.subscribe("ok", Some("bad group"), 1).await.unwrap_err(),
        BusError::InvalidSubject
    );
    assert_eq!(
        bus.request("", Bytes::new(), Duration::from_secs(1))
            .await
            .unwrap_err(),
        BusError::InvalidSubject
    );
}

/// A request read late (its receiver was paused, SIGSTOP or a soft lockup,
/// and found it in the socket buffer) still says "20 s left" in its
/// time-left header; the caller's wall-clock deadline says it passed, and
/// that wins: the server sees it expired and starts nothing. A garbled
/// wall-clock header is counted and the time left still holds.
#[tokio::test]
async fn a_request_whose_wall_clock_deadline_passed_during_a_pause_is_expired() {
    use guildhall_cluster::nats::{DEADLINE_HEADER, DEADLINE_UNIX_HEADER};
    let services = start_nats();
    let server = connect(&services, test_options()).await;
    let mut requests = server.subscribe("svc", None, 8).await.unwrap();
    let raw = async_nats::connect(services.nats_url()).await.unwrap();
    let unix_now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut send = async |unix: String| {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(DEADLINE_HEADER, "20000");
        headers.insert(DEADLINE_UNIX_HEADER, unix.as_str());
        raw.publish_with_reply_and_headers("svc", "caller.inbox", headers, Bytes::new())
            .await
            .unwrap();
        raw.flush().await.unwrap();
        recv(&mut requests, Duration::from_secs(5)).await.unwrap()
    };
    // The caller gave up 5 s ago (beyond the clock-skew slack).
    let late = send((unix_now_ms - 5_000).to_string()).await;
    assert!(late.expired(), "{:?}", late.deadline);
    assert_eq!(
        server
            .nats_stats()
            .deadline_clock_expired_total
            .load(Ordering::Relaxed),
        1,
        "counted apart, since a fast clock looks the same"
    );
    // Its deadline is 20 s away on both clocks.
    let fresh = send((unix_now_ms + 20_000).to_string()).await;
    assert!(!fresh.expired());
    assert!(fresh.deadline.unwrap() > Instant::now() + Duration::from_secs(15));
    // Garbled: counted, and the 20 s left stand.
    let garbled = send("soon".to_owned()).await;
    assert!(!garbled.expired());
    assert_eq!(
        server
            .nats_stats()
            .deadline_header_invalid_total
            .load(Ordering::Relaxed),
        1
    );
}
