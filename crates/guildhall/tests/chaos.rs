//! `guildhall chaos` as an operator runs it: the list of replays, and each
//! replayable scenario at CI's small scale, on a real cluster it starts and
//! stops itself, judged by the criteria it writes to `summary.json`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

fn guildhall(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_guildhall"))
        .args(args)
        .env_remove("GUILDHALL_TEST_SEED")
        .output()
        .expect("run guildhall")
}

#[test]
fn chaos_list_names_one_replay_per_incident_report() {
    let out = guildhall(&["chaos", "list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for (name, report) in [
        ("users-flood", "000"),
        ("presence-herd", "001"),
        ("poisoned-discovery", "002"),
        ("syncer-ring", "003"),
        ("resize-drain", "004"),
        ("guilds-node-loss", "000"),
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(name) && l.contains(&format!("report {report}"))),
            "{name} (report {report}) in:\n{text}"
        );
    }
    let unknown = guildhall(&["chaos", "run", "nope"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("chaos list"));
}

/// Runs one replay at small scale and returns its summary; prints its
/// output and the criteria when it fails.
fn replay(name: &str, seed: &str) -> (serde_json::Value, String) {
    let out_dir = tempfile::tempdir().unwrap();
    let out = guildhall(&[
        "chaos",
        "run",
        name,
        "--scale",
        "small",
        "--seed",
        seed,
        "--out",
        out_dir.path().to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let summary = std::fs::read_to_string(out_dir.path().join("summary.json"))
        .unwrap_or_else(|e| panic!("no summary.json ({e}):\n{stdout}\n{stderr}"));
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    let html = std::fs::read_to_string(out_dir.path().join("report.html")).unwrap();
    assert!(
        out.status.success() && summary["passed"] == true,
        "{name} failed:\n{stdout}\n{stderr}\n{summary:#}"
    );
    (summary, html)
}

#[test]
fn guilds_node_loss_is_survived_at_small_scale() {
    let (summary, html) = replay("guilds-node-loss", "1");
    assert_eq!(summary["scenario"], "guilds-node-loss");
    let criteria = summary["criteria"].as_array().unwrap();
    assert_eq!(criteria.len(), 5);
    let recovery = &criteria[0];
    // Small scale's leases: 2 s TTL, 0.6 s permanent-down, + 5 s.
    assert!(recovery["measured"].as_f64().unwrap() <= 7.6, "{recovery}");
    // A graceful leave waits for no lease.
    let leave = &criteria[2];
    assert!(leave["name"].as_str().unwrap().contains("graceful leave"));
    assert!(leave["measured"].as_f64().unwrap() <= 5.0, "{leave}");
    let phases: Vec<&str> = summary["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["label"].as_str().unwrap())
        .collect();
    assert_eq!(phases.len(), 4, "{phases:?}");
    assert!(phases[0].starts_with("baseline"));
    assert_eq!(phases[1..], ["trigger", "trigger removed", "recovery"]);
    // Every chart drawn, the kill on the timeline.
    assert_eq!(html.matches("<svg").count(), 10);
    assert!(html.contains("kill -9 guilds-2"));
    assert!(html.contains("SIGTERM guilds-1"));
}

#[test]
fn poisoned_discovery_is_survived_at_small_scale() {
    let (summary, html) = replay("poisoned-discovery", "1");
    assert_eq!(summary["scenario"], "poisoned-discovery");
    assert_eq!(summary["seed_report"], "002");
    let criteria = summary["criteria"].as_array().unwrap();
    assert_eq!(criteria.len(), 9, "{criteria:#?}");
    assert!(html.contains("corrupt values under"));
}
