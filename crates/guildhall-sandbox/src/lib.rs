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
