//! Voice in cluster mode with real processes over real NATS, etcd and
//! PostgreSQL: the voice role and two SFUs each in a process of their own
//! (`--roles voice`, `--roles sfu`), the SFUs announcing themselves with
//! their capacity. Two participants share a call and hear each other; the
//! SFU hosting the call is killed with SIGKILL mid-call; the call is
//! re-placed on the survivor, both sessions are told (a new
//! VOICE_SERVER_UPDATE), they reconnect there and hear each other again,
//! and no syncer is left on the dead SFU.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use guildhall_loadgen::voice::{GatewaySession, Mode, VoiceClient, VoiceServer};
use guildhall_sandbox::{Node, Service, Services};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// Short leases, so the killed SFU leaves the view in a few seconds.
const ENV: [(&str, &str); 4] = [
    ("GUILDHALL_LEASE_TTL_MS", "2000"),
    ("GUILDHALL_LEASE_RENEW_INTERVAL_MS", "500"),
    ("GUILDHALL_GATEWAY_ANNOUNCE_INTERVAL_MS", "200"),
    ("GUILDHALL_REST_RATE_LIMIT_PER_WINDOW", "1000000"),
];

async fn call(
    http: &reqwest::Client,
    base: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Value {
    let mut request = http.request(
        method.parse().unwrap(),
        format!("http://{base}/api/v10{path}"),
    );
    if let Some(token) = token {
        request = request.header("authorization", token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{method} {path}: {status} {body}");
    body
}

async fn metric(http: &reqwest::Client, base: &str, name: &str) -> u64 {
    let text = http
        .get(format!("http://{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("metric {name} missing on {base}"))
}

/// Sends `frames` numbered frames from `from` and checks `to` decrypts
/// every one, in order.
async fn hear(from: &mut VoiceClient, to: &VoiceClient, frames: u32, tag: &str) {
    from.speak().await.unwrap();
    for i in 0..frames {
        from.send_frame(format!("{tag}-{i:04}").as_bytes())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut got = Vec::new();
    while got.len() < frames as usize {
        match to.recv_frame(Duration::from_secs(5)).await {
            Some(Ok((ssrc, payload))) => {
                assert_eq!(ssrc, from.ssrc);
                got.push(String::from_utf8(payload).unwrap());
            }
            Some(Err(())) => panic!("a forwarded packet did not decrypt"),
            None => break,
        }
    }
    let expected: Vec<String> = (0..frames).map(|i| format!("{tag}-{i:04}")).collect();
    assert_eq!(got, expected, "{tag}: every frame, in order");
}

fn sfu(binary: &Path, services: &Services, name: &str, worker: u16) -> Node {
    Node::spawn_with_env(
        binary,
        services,
        name,
        worker,
        "sfu",
        &["--voice-udp", "127.0.0.1:0"],
        &ENV,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_sfu_s_calls_are_re_placed_and_their_clients_told() {
    let services = Services::start(&[Service::Nats, Service::Etcd, Service::Postgres])
        .unwrap_or_else(|e| panic!("{e}"));
    let binary = Path::new(env!("CARGO_BIN_EXE_guildhall"));
    let front = Node::spawn_with_env(
        binary,
        &services,
        "front",
        1,
        "gateway,api,guilds,users,presence",
        &[],
        &ENV,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let voice = Node::spawn_with_env(binary, &services, "voice-1", 2, "voice", &[], &ENV)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut sfus = vec![
        sfu(binary, &services, "sfu-1", 3),
        sfu(binary, &services, "sfu-2", 4),
    ];
    let http = reqwest::Client::new();
    let base = front.addr().to_owned();

    // Both SFUs announced with their capacity, as the front sees them.
    let started = Instant::now();
    while metric(&http, &base, "guildhall_voice_sfus_live").await < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "SFUs never announced"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let owner = call(
        &http,
        &base,
        "POST",
        "/auth/register",
        None,
        Some(json!({"username": "alice", "password": "password123"})),
    )
    .await;
    let owner_token = owner["token"].as_str().unwrap().to_owned();
    let owner_id = owner["user_id"].as_str().unwrap().to_owned();
    let guild = call(
        &http,
        &base,
        "POST",
        "/guilds",
        Some(&owner_token),
        Some(json!({"name": "Cluster voice"})),
    )
    .await;
    let guild_id = guild["id"].as_str().unwrap().to_owned();
    let general = guild["channels"][0]["id"].as_str().unwrap().to_owned();
    let channel = call(
        &http,
        &base,
        "POST",
        &format!("/guilds/{guild_id}/channels"),
        Some(&owner_token),
        Some(json!({"name": "Lounge", "type": 2})),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let invite = call(
        &http,
        &base,
        "POST",
        &format!("/channels/{general}/invites"),
        Some(&owner_token),
        Some(json!({})),
    )
    .await;
    let member = call(
        &http,
        &base,
        "POST",
        "/auth/register",
        None,
        Some(json!({"username": "bob", "password": "password123"})),
    )
    .await;
    let member_token = member["token"].as_str().unwrap().to_owned();
    let member_id = member["user_id"].as_str().unwrap().to_owned();
    call(
        &http,
        &base,
        "POST",
        &format!("/invites/{}", invite["code"].as_str().unwrap()),
        Some(&member_token),
        None,
    )
    .await;

    let mut a = GatewaySession::identify(&base, &owner_token).await.unwrap();
    let mut b = GatewaySession::identify(&base, &member_token)
        .await
        .unwrap();
    let server_a = a.join(&guild_id, &channel).await.unwrap();
    let server_b = b.join(&guild_id, &channel).await.unwrap();
    assert_eq!(server_a.endpoint, server_b.endpoint, "one call on one SFU");
    let connect = |server: VoiceServer, user: String, session: String, mode| async move {
        VoiceClient::connect(&server, &user, &session, mode)
            .await
            .unwrap()
    };
    let mut va = connect(
        server_a.clone(),
        owner_id.clone(),
        a.session_id.clone(),
        Mode::Aes256Gcm,
    )
    .await;
    let vb = connect(
        server_b.clone(),
        member_id.clone(),
        b.session_id.clone(),
        Mode::XChaCha20,
    )
    .await;
    hear(&mut va, &vb, 20, "before").await;

    // Kill the SFU hosting the call.
    let hosting = sfus
        .iter()
        .position(|s| server_a.endpoint.starts_with(s.addr()))
        .expect("the endpoint names one of the SFUs");
    let dead = sfus.remove(hosting);
    let killed_at = Instant::now();
    dead.signal("KILL");
    drop((va, vb));

    // Both sessions are told where the call went.
    let new_a = tokio::time::timeout(Duration::from_secs(30), a.next_voice_server(&guild_id))
        .await
        .expect("no new VOICE_SERVER_UPDATE for the first participant")
        .unwrap();
    let told_ms = killed_at.elapsed().as_millis();
    let new_b = tokio::time::timeout(Duration::from_secs(30), b.next_voice_server(&guild_id))
        .await
        .expect("no new VOICE_SERVER_UPDATE for the second participant")
        .unwrap();
    let survivor = sfus[0].addr().to_owned();
    assert!(
        new_a.endpoint.starts_with(&survivor) && new_b.endpoint.starts_with(&survivor),
        "re-placed on the survivor: {new_a:?} {new_b:?}"
    );
    let mut va = connect(new_a, owner_id, a.session_id.clone(), Mode::Aes256Gcm).await;
    let vb = connect(new_b, member_id, b.session_id.clone(), Mode::XChaCha20).await;
    hear(&mut va, &vb, 20, "after").await;
    assert_eq!(
        metric(&http, voice.addr(), "guildhall_voice_calls_on_dead_sfus").await,
        0,
        "no syncer points at the dead SFU"
    );
    assert!(metric(&http, voice.addr(), "guildhall_voice_replacements_total").await >= 1);
    println!("sfu killed → clients told in {told_ms} ms");
    drop(front);
}
