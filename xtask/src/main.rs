//! Project automation, in Rust instead of shell scripts (rust-analyzer's
//! `xtask` pattern): `cargo xtask ci` is the one command CI and developers
//! run to check everything.

#[cfg(test)]
mod tidy;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// Library versions the conformance stage installs (pinned: a new release
/// must not change what CI tests without a commit saying so).
const DISCORD_PY: &str = "discord.py==2.7.1";
const DISCORD_JS: &str = "discord.js@14.28.1";
const HIKARI: &str = "hikari==2.7.0";
/// With zstandard installed discord.py asks for `compress=zstd-stream`
/// (hikari 2.7.0 only looks for `backports.zstd`, so it stays on
/// zlib-stream): the stage covers both transport compressions.
const ZSTANDARD: &str = "zstandard==0.25.0";
/// discord.py's `voice` extra (PyNaCl for xchacha20-poly1305, davey for
/// DAVE, which the SFU declines), and `cryptography` for the listener's
/// aes-256-gcm.
const PYNACL: &str = "PyNaCl==1.5.0";
const DAVEY: &str = "davey==0.1.7";
const CRYPTOGRAPHY: &str = "cryptography==46.0.3";
/// discord.js's voice library (aes-256-gcm through Node's crypto).
const DISCORDJS_VOICE: &str = "@discordjs/voice@0.19.2";

fn run(program: &str, args: &[&str], envs: &[(&str, &str)]) -> bool {
    eprintln!("xtask: $ {program} {}", args.join(" "));
    match Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .status()
    {
        Ok(status) => status.success(),
        Err(error) => {
            eprintln!("xtask: cannot start {program}: {error}");
            false
        }
    }
}

fn ensure_libraries(dir: &Path) -> bool {
    let venv = dir.join("venv");
    let python = venv.join("bin/python");
    let marker = dir.join("installed");
    let wanted = format!(
        "{DISCORD_PY} {DISCORD_JS} {HIKARI} {ZSTANDARD} {PYNACL} {DAVEY} {CRYPTOGRAPHY} {DISCORDJS_VOICE}"
    );
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) {
        return true;
    }
    let node = dir.join("node");
    let ok = run("python3", &["-m", "venv", &venv.to_string_lossy()], &[])
        && run(
            &python.to_string_lossy(),
            &[
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                DISCORD_PY,
                HIKARI,
                ZSTANDARD,
                PYNACL,
                DAVEY,
                CRYPTOGRAPHY,
            ],
            &[],
        )
        && std::fs::create_dir_all(&node).is_ok()
        && run(
            "npm",
            &[
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "--prefix",
                &node.to_string_lossy(),
                DISCORD_JS,
                DISCORDJS_VOICE,
            ],
            &[],
        );
    ok && std::fs::write(&marker, wanted).is_ok()
}

/// Where cargo puts what it builds: `CARGO_TARGET_DIR` when set (relative
/// to the working directory, as cargo reads it), else the workspace's
/// `target`.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => root.join("target"),
    }
}

/// discord.py, discord.js and hikari against a real server (see
/// conformance/).
fn conformance(build: bool) -> bool {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = target_dir(&root);
    let dir = target.join("conformance");
    if std::fs::create_dir_all(&dir).is_err() || !ensure_libraries(&dir) {
        eprintln!("xtask: installing the conformance libraries failed");
        return false;
    }
    // In `ci` the tests have just built the binary (the CLI tests run it);
    // building it again alone would resolve other features and rebuild
    // half the dependencies.
    if build
        && !run(
            "cargo",
            &["build", "--quiet", "--locked", "-p", "guildhall"],
            &CI_ENV,
        )
    {
        return false;
    }
    let data = std::env::temp_dir().join(format!("guildhall-conformance-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let binary = target.join("debug/guildhall");
    // The voice gateway is wss:// only (the libraries accept nothing
    // else): a throwaway certificate for 127.0.0.1, which the scripts
    // trust through SSL_CERT_FILE and NODE_EXTRA_CA_CERTS.
    let _ = std::fs::create_dir_all(&data);
    let (cert, key) = (data.join("voice-cert.pem"), data.join("voice-key.pem"));
    if !run(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            &key.to_string_lossy(),
            "-out",
            &cert.to_string_lossy(),
        ],
        &[],
    ) {
        return false;
    }
    let mut server = match Command::new(&binary)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .args([
            "--voice-listen",
            "127.0.0.1:0",
            "--voice-udp",
            "127.0.0.1:0",
        ])
        .arg("--voice-tls-cert")
        .arg(&cert)
        .arg("--voice-tls-key")
        .arg(&key)
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(server) => server,
        Err(error) => {
            eprintln!("xtask: cannot start {}: {error}", binary.display());
            return false;
        }
    };
    let Some(stderr) = server.stderr.take() else {
        return false;
    };
    let mut lines = BufReader::new(stderr).lines();
    let addr = lines.by_ref().map_while(Result::ok).find_map(|line| {
        line.split("addr=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
    });
    // The server's log goes on to a file (so it never blocks on a full
    // pipe), whose tail a failed run prints.
    let log_path = dir.join("server.log");
    keep_log(lines, &log_path);
    let ok = match addr {
        Some(addr) => run(
            &dir.join("venv/bin/python").to_string_lossy(),
            &[
                &root.join("conformance/run.py").to_string_lossy(),
                &addr,
                &data.to_string_lossy(),
                &binary.to_string_lossy(),
                &dir.join("node/node_modules").to_string_lossy(),
            ],
            &[("GUILDHALL_VOICE_CA", &cert.to_string_lossy())],
        ),
        None => {
            eprintln!("xtask: the server exited before serving");
            false
        }
    };
    let _ = server.kill();
    let _ = server.wait();
    if !ok {
        print_tail(&log_path, SERVER_LOG_TAIL_LINES);
    }
    let _ = std::fs::remove_dir_all(&data);
    ok
}

/// Lines of the server's log a failed conformance run prints.
const SERVER_LOG_TAIL_LINES: usize = 200;

/// Writes what is left of `lines` to `path`, from a thread of its own.
fn keep_log(lines: std::io::Lines<BufReader<std::process::ChildStderr>>, path: &Path) {
    let file = std::fs::File::create(path);
    std::thread::spawn(move || {
        let mut file = file.ok();
        for line in lines.map_while(Result::ok) {
            if let Some(f) = file.as_mut() {
                use std::io::Write as _;
                let _ = writeln!(f, "{line}");
            }
        }
    });
}

/// The last `count` lines of the file at `path`, to stderr.
fn print_tail(path: &Path, count: usize) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let lines: Vec<&str> = text.lines().collect();
    eprintln!(
        "xtask: the server's log ({}), last {count} lines:",
        path.display()
    );
    for line in &lines[lines.len().saturating_sub(count)..] {
        eprintln!("{line}");
    }
}

/// The layout of the cluster stage: two gateway+api nodes (one bot on
/// each), an api-only node (where the owner posts), and the back roles in
/// processes of their own.
const CLUSTER_STAGE_LAYOUT: &str = "gateway,api*2 api guilds*2 users presence";

/// Starts `scripts/cluster.sh` and returns it with the nodes it printed
/// (name → address), once every node serves.
fn start_cluster(
    root: &Path,
    binary: &Path,
    layout: &str,
    dir: &Path,
) -> Option<(std::process::Child, Vec<(String, String)>)> {
    let mut cluster = Command::new("bash")
        .arg(root.join("scripts/cluster.sh"))
        .args(["up", "--layout", layout, "--binary"])
        .arg(binary)
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|error| eprintln!("xtask: cannot start scripts/cluster.sh: {error}"))
        .ok()?;
    let stdout = cluster.stdout.take()?;
    let mut nodes = Vec::new();
    let mut lines = BufReader::new(stdout).lines();
    let mut up = false;
    for line in lines.by_ref().map_while(Result::ok) {
        eprintln!("xtask: {line}");
        // "NAME (pid PID, roles ROLES) on ADDR"
        if let (Some((name, _)), Some((_, addr))) =
            (line.split_once(" (pid "), line.rsplit_once(" on "))
        {
            nodes.push((name.to_owned(), addr.to_owned()));
        }
        if line.contains("Ctrl-C stops everything") {
            up = true;
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    if !up {
        eprintln!("xtask: the cluster did not come up");
        let _ = cluster.wait();
        return None;
    }
    Some((cluster, nodes))
}

/// Stops what `scripts/cluster.sh` started (its trap stops every process
/// by PID, then the services).
fn stop_cluster(mut cluster: std::process::Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(cluster.id().to_string())
        .status();
    let _ = cluster.wait();
}

/// Unmodified discord.py and discord.js bots on two gateway nodes of a
/// real cluster (NATS, etcd, PostgreSQL, one process per role group)
/// exchange messages; the owner posts through an api-only node.
fn conformance_cluster(build: bool) -> bool {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = target_dir(&root);
    let dir = target.join("conformance");
    if std::fs::create_dir_all(&dir).is_err() || !ensure_libraries(&dir) {
        eprintln!("xtask: installing the conformance libraries failed");
        return false;
    }
    if build
        && !run(
            "cargo",
            &["build", "--quiet", "--locked", "-p", "guildhall"],
            &CI_ENV,
        )
    {
        return false;
    }
    let binary = target.join("debug/guildhall");
    let data = std::env::temp_dir().join(format!("guildhall-cluster-stage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let Some((cluster, nodes)) = start_cluster(&root, &binary, CLUSTER_STAGE_LAYOUT, &data) else {
        return false;
    };
    let addr = |name: &str| {
        nodes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.clone())
            .unwrap_or_default()
    };
    let ok = run(
        &dir.join("venv/bin/python").to_string_lossy(),
        &[
            &root.join("conformance/cluster.py").to_string_lossy(),
            &addr("api-1"),
            &addr("gateway-api-1"),
            &addr("gateway-api-2"),
            &data.join("nodes/api-1").to_string_lossy(),
            &binary.to_string_lossy(),
            &dir.join("node/node_modules").to_string_lossy(),
        ],
        &[],
    );
    stop_cluster(cluster);
    let _ = std::fs::remove_dir_all(&data);
    ok
}

/// `cargo xtask cluster up [--layout L]`: builds the binary and runs
/// `scripts/cluster.sh up` in the foreground (Ctrl-C stops everything).
fn cluster(args: &[String]) -> bool {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    if args.first().map(String::as_str) != Some("up") {
        eprintln!("usage: cargo xtask cluster up [--layout LAYOUT] [--dir DIR]");
        return false;
    }
    if !run("cargo", &["build", "--quiet", "-p", "guildhall"], &[])
        || !run(
            "bash",
            &[
                &root.join("scripts/services.sh").to_string_lossy(),
                "install",
            ],
            &[],
        )
    {
        return false;
    }
    let binary = target_dir(&root).join("debug/guildhall");
    let mut command = Command::new("bash");
    command
        .arg(root.join("scripts/cluster.sh"))
        .arg("up")
        .arg("--binary")
        .arg(binary)
        .args(&args[1..]);
    matches!(command.status(), Ok(status) if status.success())
}

/// Warnings are errors in CI; every cargo step uses the same flags, so
/// no step invalidates another's build. A CI build is cold and built once,
/// so incremental state would only take disk (gigabytes over the test
/// binaries; one run died of ENOSPC while linking).
const CI_ENV: [(&str, &str); 3] = [
    ("RUSTFLAGS", "-D warnings"),
    ("RUSTDOCFLAGS", "-D warnings"),
    ("CARGO_INCREMENTAL", "0"),
];

/// fmt, clippy with warnings denied, nextest, doc tests, library
/// conformance; stops at the first
/// failure so the log ends with the cause.
fn ci() -> bool {
    let deny = CI_ENV;
    run("cargo", &["fmt", "--all", "--check"], &[])
        && run(
            "cargo",
            &["clippy", "--workspace", "--all-targets", "--locked"],
            &deny,
        )
        && run(
            "cargo",
            &[
                "nextest",
                "run",
                "--workspace",
                "--locked",
                "--no-fail-fast",
                "--cargo-profile",
                "test",
            ],
            &deny,
        )
        && run(
            "cargo",
            &["test", "--workspace", "--doc", "--locked"],
            &deny,
        )
        && conformance(false)
        && conformance_cluster(false)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let task = args.first().cloned().unwrap_or_default();
    let ok = match task.as_str() {
        "ci" => ci(),
        "conformance" => conformance(true) && conformance_cluster(false),
        "conformance-cluster" => conformance_cluster(true),
        "cluster" => cluster(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask ci | conformance | conformance-cluster | cluster up [--layout LAYOUT]"
            );
            false
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
