//! A message acknowledged with 200 survives `kill -9` of the server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// Starts `guildhall serve` on an ephemeral port; returns it and its address.
fn serve(data_dir: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_guildhall"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start guildhall serve");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("server exited before serving").unwrap();
        if let Some(rest) = line.split("addr=").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

#[tokio::test]
async fn acknowledged_message_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let (mut server, addr) = serve(dir.path());
    let base = format!("http://{addr}/api/v10");
    let user: serde_json::Value = http
        .post(format!("{base}/auth/register"))
        .json(&serde_json::json!({"username": "alice", "password": "password123"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = user["token"].as_str().unwrap().to_owned();
    let guild: serde_json::Value = http
        .post(format!("{base}/guilds"))
        .header("authorization", &token)
        .json(&serde_json::json!({"name": "Durable"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let channel = guild["channels"][0]["id"].as_str().unwrap().to_owned();
    let posted = http
        .post(format!("{base}/channels/{channel}/messages"))
        .header("authorization", &token)
        .json(&serde_json::json!({"content": "acknowledged means durable"}))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 200);
    let posted: serde_json::Value = posted.json().await.unwrap();

    server.kill().unwrap(); // SIGKILL: no drain, no flush, no goodbye
    server.wait().unwrap();

    let (mut server, addr) = serve(dir.path());
    let history: serde_json::Value = http
        .get(format!("http://{addr}/api/v10/channels/{channel}/messages"))
        .header("authorization", &token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(history[0]["id"], posted["id"]);
    assert_eq!(history[0]["content"], "acknowledged means durable");
    server.kill().unwrap();
    server.wait().unwrap();
}
