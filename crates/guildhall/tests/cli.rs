//! The binary as a user runs it: real processes, real output.

// A failed spawn is itself the test failure.
#![allow(clippy::expect_used)]

use std::process::Command;

fn guildhall(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_guildhall"))
        .args(args)
        .output()
        .expect("run guildhall");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn sim_prints_one_json_object_and_replays_exactly() {
    let args = [
        "sim",
        "membership",
        "--members",
        "10",
        "--seed",
        "5",
        "--json",
    ];
    let (ok, first, stderr) = guildhall(&args);
    assert!(ok, "{stderr}");
    assert_eq!(first.lines().count(), 1, "--json is one line: {first}");
    let value: serde_json::Value = serde_json::from_str(&first).expect("valid JSON");
    assert_eq!(value["scenario"], "membership");
    assert_eq!(value["mode"], "hardened");
    assert_eq!(value["seed"], 5);
    let (_, second, _) = guildhall(&args);
    assert_eq!(first, second, "same seed, same bytes across processes");
}

#[test]
fn naive_flag_selects_the_incident_configuration() {
    let (ok, out, stderr) = guildhall(&["sim", "ring", "--json", "--naive"]);
    assert!(ok, "{stderr}");
    let value: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(value["mode"], "naive");
    assert_eq!(value["vnodes_per_node"], 1);
}

#[test]
fn bad_cluster_settings_are_refused_at_start_in_one_line() {
    // Refused before any service is dialled: nothing listens on port 1.
    let cluster = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--nats",
        "nats://127.0.0.1:1",
        "--etcd",
        "http://127.0.0.1:1",
        "--database-url",
        "postgres://127.0.0.1:1/none",
    ];
    let cases: [(&[&str], &str); 4] = [
        (&["--worker-id", "1"], "--node-name"),
        (
            &["--node-name", "A", "--worker-id", "1"],
            "--node-name \"A\"",
        ),
        (
            &["--node-name", "a b", "--worker-id", "1"],
            "--node-name \"a b\"",
        ),
        (
            &["--node-name", "gw-1", "--worker-id", "2000"],
            "--worker-id 2000",
        ),
    ];
    for (extra, named) in cases {
        let args: Vec<&str> = cluster.iter().chain(extra).copied().collect();
        let (ok, _, stderr) = guildhall(&args);
        assert!(!ok, "{args:?}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!stderr.contains("backtrace"), "{stderr}");
        assert!(!stderr.contains("connecting"), "dialled first: {stderr}");
    }
    // Embedded mode takes neither (they would be silently unused).
    for extra in [["--node-name", "gw-1"], ["--worker-id", "3"]] {
        let args: Vec<&str> = ["serve", "--listen", "127.0.0.1:0"]
            .iter()
            .chain(&extra)
            .copied()
            .collect();
        let (ok, _, stderr) = guildhall(&args);
        assert!(!ok, "{args:?}");
        assert!(stderr.contains("only cluster mode"), "{stderr}");
    }
}

#[test]
fn bad_arguments_fail_with_usage_not_a_panic() {
    let (ok, _, stderr) = guildhall(&["sim", "ring", "--nodes", "many"]);
    assert!(!ok);
    assert!(stderr.contains("invalid value"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let (ok, _, _) = guildhall(&["sim", "no-such-scenario"]);
    assert!(!ok);
}
