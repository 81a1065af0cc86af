//! The cluster sandbox: real NATS, etcd and PostgreSQL servers, each a
//! child of `scripts/services.sh` on a free loopback port with a temporary
//! data directory, for the tests that need them. Never the services a
//! machine happens to run on the default ports.
//!
//! [`Services`] stops exactly what it started when dropped (the script
//! keeps the PIDs it launched). A test that cannot start its services
//! fails with the script's output: CI installs them first
//! (`scripts/services.sh install`), and so can a developer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A real service the sandbox can start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// nats-server (the bus).
    Nats,
    /// etcd (leases, discovery).
    Etcd,
    /// PostgreSQL (the store).
    Postgres,
}

impl Service {
    fn arg(self) -> &'static str {
        match self {
            Self::Nats => "nats",
            Self::Etcd => "etcd",
            Self::Postgres => "pg",
        }
    }
}

/// The repository's root (where `scripts/` is).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Running services; dropping this stops them.
#[derive(Debug)]
pub struct Services {
    dir: tempfile::TempDir,
    env: BTreeMap<String, String>,
}

impl Services {
    /// Starts `services` and returns once each one answers.
    ///
    /// # Errors
    /// The script's output when a service cannot be started (not
    /// installed, no free port).
    pub fn start(services: &[Service]) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("guildhall-services-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let script = repo_root().join("scripts/services.sh");
        let output = Command::new("bash")
            .arg(&script)
            .arg("up")
            .arg(dir.path())
            .args(services.iter().map(|s| s.arg()))
            .output()
            .map_err(|e| format!("{}: {e}", script.display()))?;
        let started = Self {
            env: read_env(&dir.path().join("env")),
            dir,
        };
        if !output.status.success() {
            return Err(format!(
                "scripts/services.sh up failed (run `scripts/services.sh install`?):\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(started)
    }

    /// A variable the script wrote (`NATS_URL`, `NATS_MONITOR_URL`,
    /// `ETCD_ENDPOINTS`, `DATABASE_URL`).
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str)
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn nats_url(&self) -> &str {
        self.var("NATS_URL").unwrap_or_default()
    }

    /// `http://127.0.0.1:PORT` of nats-server's monitoring endpoint.
    pub fn nats_monitor_url(&self) -> &str {
        self.var("NATS_MONITOR_URL").unwrap_or_default()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn etcd_endpoint(&self) -> &str {
        self.var("ETCD_ENDPOINTS").unwrap_or_default()
    }

    /// `postgres://postgres@127.0.0.1:PORT/guildhall`.
    pub fn database_url(&self) -> &str {
        self.var("DATABASE_URL").unwrap_or_default()
    }

    /// The PID of a started service (for `kill -9` and SIGSTOP in fault
    /// tests); `None` for PostgreSQL, which `pg_ctl` owns.
    pub fn pid(&self, service: Service) -> Option<u32> {
        let pids = std::fs::read_to_string(self.dir.path().join("pids")).ok()?;
        pids.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(service.arg()))
                .then(|| words.next()?.parse().ok())
                .flatten()
        })
    }

    /// `kill -9` etcd and start it again on the same ports and data: every
    /// client connection and watch breaks, and clients must reconnect and
    /// list again.
    ///
    /// # Errors
    /// The script's output when etcd does not come back.
    pub fn restart_etcd(&self) -> Result<(), String> {
        let output = Command::new("bash")
            .arg(repo_root().join("scripts/services.sh"))
            .arg("restart-etcd")
            .arg(self.dir.path())
            .output()
            .map_err(|e| format!("services.sh: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    /// The directory the services keep their data and logs in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("scripts/services.sh"))
            .arg("down")
            .arg(self.dir.path())
            .status();
    }
}

/// Polls of a starting process's log for its address (every 50 ms).
const NODE_START_POLLS_MAX: u32 = 600;

/// A `guildhall serve` process of a test cluster, over `services`. Killed
/// (SIGKILL) when dropped, unless it already exited.
#[derive(Debug)]
pub struct Node {
    child: std::process::Child,
    name: String,
    addr: String,
    log: PathBuf,
}

impl Node {
    /// Starts `binary serve` with `roles` (comma separated) as `name` with
    /// snowflake worker `worker_id`, its log under the services' directory,
    /// and returns once it serves.
    ///
    /// # Errors
    /// The process's log when it exits or does not serve in time.
    pub fn spawn(
        binary: &Path,
        services: &Services,
        name: &str,
        worker_id: u16,
        roles: &str,
        extra_args: &[&str],
    ) -> Result<Self, String> {
        Self::spawn_with_env(binary, services, name, worker_id, roles, extra_args, &[])
    }

    /// As [`Node::spawn`], with environment variables (`GUILDHALL_<LIMIT>`
    /// overrides) set for the process.
    pub fn spawn_with_env(
        binary: &Path,
        services: &Services,
        name: &str,
        worker_id: u16,
        roles: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self, String> {
        let dir = services.dir().join("nodes").join(name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = dir.join("log");
        let log_file =
            std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut command = Command::new(binary);
        // The tests' own knobs (`GUILDHALL_TEST_SEED`, sizes) are not the
        // server's: it refuses a `GUILDHALL_*` variable that is no setting.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("GUILDHALL_TEST_") {
                command.env_remove(key);
            }
        }
        let child = command
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&dir)
            .args(["--roles", roles, "--node-name", name, "--worker-id"])
            .arg(worker_id.to_string())
            .args([
                "--nats",
                services.nats_url(),
                "--etcd",
                services.etcd_endpoint(),
            ])
            .args(["--database-url", services.database_url()])
            .args(extra_args)
            .envs(env.iter().copied())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("{}: {e}", binary.display()))?;
        let mut node = Self {
            child,
            name: name.to_owned(),
            addr: String::new(),
            log,
        };
        for _ in 0..NODE_START_POLLS_MAX {
            let text = node.log_text();
            if let Some(addr) = text
                .split("guildhall serving addr=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
            {
                node.addr = addr.to_owned();
                return Ok(node);
            }
            if let Ok(Some(status)) = node.child.try_wait() {
                return Err(format!("{name} exited ({status}):\n{text}"));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Err(format!(
            "{name} did not serve in time:\n{}",
            node.log_text()
        ))
    }

    /// `HOST:PORT` it serves on.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Its name in the registry.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its PID (for signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`KILL`, `TERM`, `STOP`, `CONT`) with kill(1).
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status();
    }

    /// Whether it has exited (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits for it to exit.
    pub fn wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.wait().ok()
    }

    /// The file its log (stderr) is written to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// What it logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.exited().is_none() {
            // A SIGSTOPped process must still die.
            self.signal("CONT");
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read_env(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_start_answer_and_stop() {
        let services = match Services::start(&[Service::Nats, Service::Etcd]) {
            Ok(services) => services,
            Err(e) => panic!("{e}"),
        };
        assert!(services.nats_url().starts_with("nats://127.0.0.1:"));
        assert!(services.etcd_endpoint().starts_with("http://127.0.0.1:"));
        let nats = services.pid(Service::Nats).unwrap_or_default();
        assert!(nats > 0);
        drop(services);
        let alive = Path::new(&format!("/proc/{nats}")).exists()
            && !std::fs::read_to_string(format!("/proc/{nats}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        assert!(!alive, "nats-server {nats} still runs after drop");
    }
}
