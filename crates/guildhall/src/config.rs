//! The configuration: a TOML file, then the environment, then flags.
//!
//! ```toml
//! listen = "0.0.0.0:8080"
//! data_dir = "/var/lib/guildhall"
//!
//! [limits]
//! session_queue_messages_max = 4096
//! handshake_rate_per_s = 1000
//! ```
//!
//! Cluster mode adds where the real services are and which roles this
//! process runs:
//!
//! ```toml
//! roles = ["gateway", "api"]
//! nats = "nats://10.0.0.5:4222"
//! etcd = "http://10.0.0.6:2379"
//! database_url = "postgres://guildhall@10.0.0.7/guildhall"
//! node_name = "gw-1"
//! worker_id = 7
//! public_gateway_url = "wss://gateway.example.org"
//! ```
//!
//! Files (attachments): where their bytes are kept, and the base of the
//! URLs they are served at (the api role serves them at Discord's CDN
//! paths; a CDN or load balancer in front is named here):
//!
//! ```toml
//! blob_dir = "/var/lib/guildhall/blobs"    # [default: DATA_DIR/blobs]
//! public_cdn_url = "https://cdn.example.org"  # [default: http://LISTEN]
//! cdn_signing_key = "a long random secret"  # [default: made once, kept in the database]
//! ```
//!
//! Voice (the `sfu` role): where the SFU takes media and where voice
//! clients reach its voice gateway. The libraries connect only to
//! `wss://{endpoint}`, so either give the SFU a certificate (its own TLS
//! listener) or put a TLS proxy in front of `{listen}/voice` and say so in
//! `voice_endpoint`:
//!
//! ```toml
//! voice_udp = "0.0.0.0:50000"          # media (RTP) [default: listen's IP, any port]
//! voice_public_ip = "203.0.113.5"      # what clients send media to [default: voice_udp's IP]
//! voice_listen = "0.0.0.0:8443"        # the voice gateway over TLS
//! voice_tls_cert = "/etc/guildhall/voice.pem"
//! voice_tls_key = "/etc/guildhall/voice.key"
//! voice_endpoint = "voice.example.org:8443"  # VOICE_SERVER_UPDATE's endpoint
//! voice_ws_path = "/voice"             # the voice gateway on `listen` [default: /voice]
//! ```
//!
//! The clients of the real services have bounds of their own (timeouts,
//! queues, pings; the defaults are the `NATS_*` and `ETCD_*` constants of
//! `guildhall-cluster`):
//!
//! ```toml
//! [nats_client]
//! request_timeout_cap_ms = 10000
//! deadline_clock_skew_ms = 100
//!
//! [etcd_client]
//! call_timeout_ms = 1000
//! ```
//!
//! Every top-level key and every field of `[limits]` can also be set as
//! `GUILDHALL_<KEY>` (upper case), for example `GUILDHALL_NATS=nats://...`,
//! `GUILDHALL_ROLES=gateway,api` or `GUILDHALL_HANDSHAKE_RATE_PER_S=1000`;
//! the clients' as `GUILDHALL_NATS_CLIENT_<FIELD>` and
//! `GUILDHALL_ETCD_CLIENT_<FIELD>`.
//! Unknown keys are errors; so are values that break a relation between
//! limits (all reported at once).

use anyhow::{Context, Result, bail};
use guildhall_limits::Limits;
use guildhall_proto::cluster::Role;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file's shape.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigFile {
    /// Address to listen on.
    pub listen: Option<String>,
    /// Data directory.
    pub data_dir: Option<PathBuf>,
    /// Roles this process runs (default: all, embedded mode).
    pub roles: Option<Vec<String>>,
    /// NATS server URL (cluster mode's bus).
    pub nats: Option<String>,
    /// etcd endpoint(s), comma separated (cluster mode's registry).
    pub etcd: Option<String>,
    /// PostgreSQL URL (cluster mode's store).
    pub database_url: Option<String>,
    /// This process's name in the registry (unique in the cluster).
    pub node_name: Option<String>,
    /// Snowflake worker id, 0-1023 (unique in the cluster).
    pub worker_id: Option<u16>,
    /// The gateway URL clients are given (a load balancer's).
    pub public_gateway_url: Option<String>,
    /// The directory files are kept in.
    pub blob_dir: Option<PathBuf>,
    /// The base of the URLs files are served at.
    pub public_cdn_url: Option<String>,
    /// The key attachment URLs are signed with.
    pub cdn_signing_key: Option<String>,
    /// The SFU's UDP media address.
    pub voice_udp: Option<String>,
    /// The IP voice clients send media to (READY's `ip`).
    pub voice_public_ip: Option<String>,
    /// The SFU's own TLS listener for the voice gateway.
    pub voice_listen: Option<String>,
    /// Its certificate chain (PEM).
    pub voice_tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub voice_tls_key: Option<PathBuf>,
    /// The endpoint voice clients are given (`host:port[/path]`, no scheme).
    pub voice_endpoint: Option<String>,
    /// The voice gateway's path on the node's own listener.
    pub voice_ws_path: Option<String>,
    /// Overrides of any bound.
    pub limits: Limits,
    /// The NATS client's bounds (cluster mode).
    pub nats_client: guildhall_cluster::NatsOptions,
    /// The etcd client's bounds (cluster mode).
    pub etcd_client: guildhall_cluster::EtcdOptions,
}

/// Top-level keys that the environment may set (`GUILDHALL_<KEY>`).
const TOP_LEVEL_KEYS: [&str; 19] = [
    "listen",
    "data_dir",
    "roles",
    "nats",
    "etcd",
    "database_url",
    "node_name",
    "worker_id",
    "public_gateway_url",
    "blob_dir",
    "public_cdn_url",
    "cdn_signing_key",
    "voice_udp",
    "voice_public_ip",
    "voice_listen",
    "voice_tls_cert",
    "voice_tls_key",
    "voice_endpoint",
    "voice_ws_path",
];

/// Reads `path` (if any), applies `GUILDHALL_*` from `env`, validates.
pub fn load(
    path: Option<&Path>,
    env: impl Iterator<Item = (String, String)>,
) -> Result<ConfigFile> {
    let mut config = match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            toml::from_str::<ConfigFile>(&text)
                .with_context(|| format!("parsing {}", path.display()))?
        }
        None => ConfigFile::default(),
    };
    // Apply environment overrides through the serialized form, so every
    // field of Limits is covered without listing them again here.
    let mut limits = toml::Table::try_from(&config.limits)?;
    let mut nats_client = toml::Table::try_from(&config.nats_client)?;
    let mut etcd_client = toml::Table::try_from(config.etcd_client)?;
    for (key, value) in env {
        let Some(field) = key.strip_prefix("GUILDHALL_") else {
            continue;
        };
        let field = field.to_ascii_lowercase();
        if TOP_LEVEL_KEYS.contains(&field.as_str()) {
            set_top_level(&mut config, &field, &value).with_context(|| format!("{key}={value}"))?;
            continue;
        }
        let (table, field) = if let Some(f) = field.strip_prefix("nats_client_") {
            (&mut nats_client, f.to_owned())
        } else if let Some(f) = field.strip_prefix("etcd_client_") {
            (&mut etcd_client, f.to_owned())
        } else {
            (&mut limits, field)
        };
        if !table.contains_key(&field) {
            bail!("{key}: no such limit");
        }
        let number: i64 = value
            .trim()
            .parse()
            .with_context(|| format!("{key}={value}: not an integer"))?;
        table.insert(field, toml::Value::Integer(number));
    }
    config.limits = limits.try_into().context("environment overrides")?;
    config.nats_client = nats_client.try_into().context("environment overrides")?;
    config.etcd_client = etcd_client.try_into().context("environment overrides")?;
    // The NATS payload bound is the limits' (see `NatsOptions`): validate
    // the client's queues against the one it will run with.
    config.nats_client.payload_bytes_max = config.limits.bus_payload_bytes_max;
    let mut lines: Vec<String> = match config.limits.validate() {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(|e| format!("  {e}")).collect(),
    };
    lines.extend(
        config
            .nats_client
            .validate()
            .into_iter()
            .map(|e| format!("  nats_client: {e}")),
    );
    lines.extend(
        config
            .etcd_client
            .validate()
            .into_iter()
            .map(|e| format!("  etcd_client: {e}")),
    );
    if !lines.is_empty() {
        bail!("invalid limits:\n{}", lines.join("\n"));
    }
    Ok(config)
}

fn set_top_level(config: &mut ConfigFile, key: &str, value: &str) -> Result<()> {
    let text = Some(value.to_owned());
    match key {
        "listen" => config.listen = text,
        "data_dir" => config.data_dir = Some(value.into()),
        "roles" => config.roles = Some(value.split(',').map(|r| r.trim().to_owned()).collect()),
        "nats" => config.nats = text,
        "etcd" => config.etcd = text,
        "database_url" => config.database_url = text,
        "node_name" => config.node_name = text,
        "worker_id" => config.worker_id = Some(value.trim().parse().context("not a worker id")?),
        "public_gateway_url" => config.public_gateway_url = text,
        "blob_dir" => config.blob_dir = Some(value.into()),
        "public_cdn_url" => config.public_cdn_url = text,
        "cdn_signing_key" => config.cdn_signing_key = text,
        "voice_udp" => config.voice_udp = text,
        "voice_public_ip" => config.voice_public_ip = text,
        "voice_listen" => config.voice_listen = text,
        "voice_tls_cert" => config.voice_tls_cert = Some(value.into()),
        "voice_tls_key" => config.voice_tls_key = Some(value.into()),
        "voice_endpoint" => config.voice_endpoint = text,
        "voice_ws_path" => config.voice_ws_path = text,
        _ => bail!("no such key"),
    }
    Ok(())
}

/// Cluster mode's settings as given (flags over environment over file).
#[derive(Debug, Default)]
pub struct Cluster {
    /// `--roles`.
    pub roles: Option<Vec<String>>,
    /// `--nats`.
    pub nats: Option<String>,
    /// `--etcd`.
    pub etcd: Option<String>,
    /// `--database-url`.
    pub database_url: Option<String>,
    /// `--node-name`.
    pub node_name: Option<String>,
    /// `--worker-id`.
    pub worker_id: Option<u16>,
    /// `--public-gateway-url`.
    pub public_gateway_url: Option<String>,
}

/// Where cluster mode's real services are, and who this process is.
#[derive(Debug)]
pub struct Services {
    /// NATS URL.
    pub nats: String,
    /// etcd endpoints, comma separated.
    pub etcd: String,
    /// PostgreSQL URL.
    pub database_url: String,
    /// Unique name in the registry.
    pub node_name: String,
    /// Unique snowflake worker id (None: picked at start).
    pub worker_id: Option<u16>,
}

/// What `serve` runs.
#[derive(Debug)]
pub struct Resolved {
    /// The roles of this process.
    pub roles: Vec<Role>,
    /// `None`: embedded mode.
    pub services: Option<Services>,
    /// The gateway URL clients are given.
    pub public_gateway_url: Option<String>,
}

impl Cluster {
    /// Checks the combination: embedded mode runs every role; cluster mode
    /// needs all three services and a unique name, valid as peers read it
    /// (two processes sharing one would take each other's place on the
    /// ring); a worker id given must fit a snowflake (without one the node
    /// picks a free one).
    pub fn resolve(self) -> Result<Resolved> {
        let roles = match &self.roles {
            None => guildhall_node::ROLES_ALL.to_vec(),
            Some(names) => {
                let mut roles = Vec::new();
                for name in names.iter().filter(|n| !n.is_empty()) {
                    let role = match name.as_str() {
                        "gateway" => Role::Gateway,
                        "api" => Role::Api,
                        "guilds" => Role::Guilds,
                        "users" => Role::Users,
                        "presence" => Role::Presence,
                        "voice" => Role::Voice,
                        "sfu" => Role::Sfu,
                        other => bail!(
                            "unknown role {other:?} (roles: gateway, api, guilds, users, presence, voice, sfu)"
                        ),
                    };
                    if !roles.contains(&role) {
                        roles.push(role);
                    }
                }
                if roles.is_empty() {
                    bail!("--roles names no role");
                }
                roles
            }
        };
        if let Some(url) = &self.public_gateway_url {
            check_url("--public-gateway-url", url, &["ws://", "wss://"])?;
            if url.len() > guildhall_proto::cluster::GATEWAY_URL_BYTES_MAX {
                bail!(
                    "--public-gateway-url {url:?}: at most {} bytes",
                    guildhall_proto::cluster::GATEWAY_URL_BYTES_MAX
                );
            }
        }
        if let Some(url) = &self.nats {
            check_url("--nats", url, &["nats://", "tls://", "ws://", "wss://"])?;
        }
        if let Some(endpoints) = &self.etcd {
            for endpoint in endpoints.split(',').map(str::trim) {
                check_url("--etcd", endpoint, &["http://", "https://"])?;
            }
        }
        if let Some(url) = &self.database_url {
            check_url("--database-url", url, &["postgres://", "postgresql://"])?;
        }
        let given = [&self.nats, &self.etcd, &self.database_url]
            .iter()
            .filter(|s| s.is_some())
            .count();
        let services = match (given, self.nats, self.etcd, self.database_url) {
            (0, ..) => {
                // Embedded mode names itself and holds worker id 1: a
                // name or id given for it would be silently unused.
                if let Some(name) = &self.node_name {
                    bail!(
                        "--node-name {name:?}: only cluster mode (--nats, --etcd, --database-url) takes a node name"
                    );
                }
                if let Some(id) = self.worker_id {
                    bail!(
                        "--worker-id {id}: only cluster mode (--nats, --etcd, --database-url) takes a worker id"
                    );
                }
                if roles.len() != guildhall_node::ROLES_ALL.len() {
                    bail!(
                        "running only some roles needs cluster mode (--nats, --etcd, --database-url): other processes must run the rest"
                    );
                }
                None
            }
            (3, Some(nats), Some(etcd), Some(database_url)) => {
                let node_name = self
                    .node_name
                    .context("cluster mode needs --node-name (unique in the cluster)")?;
                if !guildhall_proto::cluster::node_name_ok(&node_name) {
                    bail!(
                        "--node-name {node_name:?}: 1 to {} characters of a-z, 0-9, '.', '_' and '-' (peers ignore any other name)",
                        guildhall_proto::cluster::NODE_NAME_BYTES_MAX
                    );
                }
                let worker_id = self.worker_id;
                if let Some(id) = worker_id
                    && id > 1023
                {
                    bail!("--worker-id {id}: at most 1023 (10 bits of a snowflake)");
                }
                Some(Services {
                    nats,
                    etcd,
                    database_url,
                    node_name,
                    worker_id,
                })
            }
            _ => bail!("cluster mode needs all of --nats, --etcd and --database-url"),
        };
        Ok(Resolved {
            roles,
            services,
            public_gateway_url: self.public_gateway_url,
        })
    }
}

/// A URL setting `key` with one of the `schemes` and a host after it, and
/// no whitespace or control characters: refused at start in one line,
/// rather than found at the first connection (or, for a URL peers read,
/// never).
pub fn check_url(key: &str, url: &str, schemes: &[&str]) -> Result<()> {
    let rest = schemes.iter().find_map(|scheme| url.strip_prefix(scheme));
    let clean = url.bytes().all(|b| b.is_ascii_graphic());
    match rest {
        Some(rest) if clean && !rest.is_empty() && !rest.starts_with('/') => Ok(()),
        _ => bail!(
            "{key} {url:?}: a URL starting {} with a host",
            schemes.join(" or ")
        ),
    }
}

/// The SFU's addresses from what was given: the UDP and TLS addresses
/// must parse, a TLS listener needs both its certificate and its key (and
/// they need it), and an endpoint has no scheme (the libraries prepend
/// `wss://`).
pub fn voice_settings(
    udp: Option<String>,
    public_ip: Option<String>,
    listen: Option<String>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    endpoint: Option<String>,
    ws_path: Option<String>,
) -> Result<guildhall_node::VoiceSettings> {
    let parse = |what: &str, value: Option<String>| -> Result<Option<std::net::SocketAddr>> {
        value
            .map(|v| {
                v.parse()
                    .with_context(|| format!("{what} {v:?}: not an address (ip:port)"))
            })
            .transpose()
    };
    let udp = parse("voice_udp", udp)?;
    let listen = parse("voice_listen", listen)?;
    let tls = match (listen, cert, key) {
        (None, None, None) => None,
        (Some(listen), Some(cert), Some(key)) => {
            Some(guildhall_node::VoiceTls { listen, cert, key })
        }
        _ => bail!(
            "a voice TLS listener needs all of voice_listen, voice_tls_cert and voice_tls_key"
        ),
    };
    if let Some(ip) = &public_ip {
        ip.parse::<std::net::IpAddr>()
            .with_context(|| format!("voice_public_ip {ip:?}: not an IP address"))?;
    }
    if let Some(endpoint) = &endpoint
        && (endpoint.contains("://")
            || endpoint.is_empty()
            || !endpoint.bytes().all(|b| b.is_ascii_graphic()))
    {
        bail!("voice_endpoint {endpoint:?}: host:port[/path], without a scheme");
    }
    if let Some(path) = &ws_path {
        let chars_ok = path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/_-.".contains(&b));
        if !path.starts_with('/') || path.len() < 2 || path.len() > 64 || !chars_ok {
            bail!("voice_ws_path {path:?}: a path such as /voice (not /: the gateway is there)");
        }
    }
    Ok(guildhall_node::VoiceSettings {
        udp,
        public_ip,
        tls,
        endpoint,
        ws_path,
    })
}

/// The effective limits as `name = value` lines (what `config check` prints).
pub fn render(limits: &Limits) -> Result<String> {
    let table = toml::Table::try_from(limits)?;
    Ok(format!("[limits]\n{}", toml::to_string(&table)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn file_then_environment() {
        let file = write(
            "listen = \"0.0.0.0:9000\"\n[limits]\nhandshake_rate_per_s = 500\nsession_queue_messages_max = 16\n",
        );
        let env = vec![
            (
                "GUILDHALL_HANDSHAKE_RATE_PER_S".to_owned(),
                "700".to_owned(),
            ),
            ("PATH".into(), "/bin".into()),
        ];
        let config = load(Some(file.path()), env.into_iter()).unwrap();
        assert_eq!(config.listen.as_deref(), Some("0.0.0.0:9000"));
        assert_eq!(
            config.limits.handshake_rate_per_s, 700,
            "environment wins over the file"
        );
        assert_eq!(config.limits.session_queue_messages_max, 16);
        assert_eq!(
            config.limits.heartbeat_interval_ms,
            guildhall_limits::HEARTBEAT_INTERVAL_MS,
            "defaults fill the rest"
        );
    }

    #[test]
    fn mistakes_are_errors_not_ignored() {
        let typo = write("[limits]\nsession_queue_mesages_max = 16\n");
        assert!(
            format!(
                "{:#}",
                load(Some(typo.path()), std::iter::empty()).unwrap_err()
            )
            .contains("unknown field")
        );
        let broken = write("[limits]\nheartbeat_timeout_ms = 10\ndrain_margin_ms = 99999\n");
        let error = format!(
            "{:#}",
            load(Some(broken.path()), std::iter::empty()).unwrap_err()
        );
        assert!(
            error.contains("heartbeat_timeout_ms") && error.contains("drain_margin_ms"),
            "{error}"
        );
        let env = vec![("GUILDHALL_NO_SUCH_LIMIT".to_owned(), "1".to_owned())];
        assert!(load(None, env.into_iter()).is_err());
    }

    #[test]
    fn the_service_clients_bounds_come_from_the_file_and_the_environment() {
        let file = write(
            "nats = \"nats://a:1\"\n[nats_client]\nping_interval_ms = 700\n[etcd_client]\nwatches_max = 9\n",
        );
        let env = vec![
            (
                "GUILDHALL_NATS_CLIENT_DEADLINE_CLOCK_SKEW_MS".to_owned(),
                "40".to_owned(),
            ),
            (
                "GUILDHALL_ETCD_CLIENT_CALL_TIMEOUT_MS".to_owned(),
                "900".to_owned(),
            ),
        ];
        let config = load(Some(file.path()), env.into_iter()).unwrap();
        assert_eq!(config.nats.as_deref(), Some("nats://a:1"));
        assert_eq!(config.nats_client.ping_interval_ms, 700);
        assert_eq!(config.nats_client.deadline_clock_skew_ms, 40);
        assert_eq!(
            config.nats_client.request_timeout_cap_ms,
            guildhall_cluster::nats::NATS_REQUEST_TIMEOUT_CAP_MS
        );
        assert_eq!(config.etcd_client.watches_max, 9);
        assert_eq!(config.etcd_client.call_timeout_ms, 900);
        // The payload bound is the limits' (shared with the in-process bus).
        let payload = write("[nats_client]\npayload_bytes_max = 5\n");
        assert!(load(Some(payload.path()), std::iter::empty()).is_err());
        let zero = vec![(
            "GUILDHALL_ETCD_CLIENT_KEEPERS_MAX".to_owned(),
            "0".to_owned(),
        )];
        let error = format!("{:#}", load(None, zero.into_iter()).unwrap_err());
        assert!(error.contains("etcd_client: keepers_max"), "{error}");
        let unknown = vec![("GUILDHALL_NATS_CLIENT_NO_SUCH".to_owned(), "1".to_owned())];
        assert!(load(None, unknown.into_iter()).is_err());
    }

    #[test]
    fn cluster_keys_come_from_the_file_and_the_environment() {
        let file = write("roles = [\"guilds\"]\nnats = \"nats://a:1\"\nworker_id = 3\n");
        let env = vec![
            ("GUILDHALL_ROLES".to_owned(), "gateway, api".to_owned()),
            ("GUILDHALL_ETCD".to_owned(), "http://b:2".to_owned()),
        ];
        let config = load(Some(file.path()), env.into_iter()).unwrap();
        assert_eq!(config.roles.unwrap(), ["gateway", "api"]);
        assert_eq!(config.nats.as_deref(), Some("nats://a:1"));
        assert_eq!(config.etcd.as_deref(), Some("http://b:2"));
        assert_eq!(config.worker_id, Some(3));
        let bad = vec![("GUILDHALL_WORKER_ID".to_owned(), "x".to_owned())];
        assert!(load(None, bad.into_iter()).is_err());
    }

    #[test]
    fn cluster_settings_are_checked_together() {
        let embedded = Cluster::default().resolve().unwrap();
        assert!(embedded.services.is_none());
        assert_eq!(embedded.roles.len(), guildhall_node::ROLES_ALL.len());
        let some_roles = Cluster {
            roles: Some(vec!["gateway".into()]),
            ..Cluster::default()
        };
        assert!(some_roles.resolve().is_err(), "a lone gateway needs peers");
        let partial = Cluster {
            nats: Some("nats://a".into()),
            ..Cluster::default()
        };
        assert!(partial.resolve().is_err());
        let full = || Cluster {
            roles: Some(vec!["gateway".into(), "api".into(), "api".into()]),
            nats: Some("nats://a".into()),
            etcd: Some("http://b".into()),
            database_url: Some("postgres://c/d".into()),
            node_name: Some("gw-1".into()),
            worker_id: Some(7),
            public_gateway_url: None,
        };
        let resolved = full().resolve().unwrap();
        assert_eq!(resolved.roles, [Role::Gateway, Role::Api]);
        assert_eq!(resolved.services.unwrap().worker_id, Some(7));
        // Without one, the node picks a free id at start.
        let picked = Cluster {
            worker_id: None,
            ..full()
        }
        .resolve()
        .unwrap();
        assert_eq!(picked.services.unwrap().worker_id, None);
        for bad in [
            Cluster {
                node_name: Some("GW-1".into()),
                ..full()
            },
            Cluster {
                nats: Some("10.0.0.5:4222".into()),
                ..full()
            },
            Cluster {
                etcd: Some("http://b, etcd:2379".into()),
                ..full()
            },
            Cluster {
                database_url: Some("mysql://c/d".into()),
                ..full()
            },
            Cluster {
                public_gateway_url: Some("https://gateway.example.org".into()),
                ..full()
            },
        ] {
            let error = bad.resolve().unwrap_err().to_string();
            assert!(error.starts_with("--"), "names the flag: {error}");
        }
        assert!(
            Cluster {
                worker_id: Some(1024),
                ..full()
            }
            .resolve()
            .is_err()
        );
        assert!(
            Cluster {
                roles: Some(vec!["mixer".into()]),
                ..full()
            }
            .resolve()
            .is_err()
        );
    }

    #[test]
    fn rendered_limits_parse_back() {
        let text = render(&Limits::default()).unwrap();
        let file = write(&text);
        assert_eq!(
            load(Some(file.path()), std::iter::empty()).unwrap().limits,
            Limits::default()
        );
    }

    #[test]
    fn voice_settings_are_checked_together() {
        let ok = voice_settings(
            Some("127.0.0.1:0".into()),
            Some("203.0.113.5".into()),
            Some("127.0.0.1:0".into()),
            Some("c.pem".into()),
            Some("k.pem".into()),
            Some("voice.example.org:8443".into()),
            Some("/rtc".into()),
        )
        .unwrap();
        assert_eq!(ok.ws_path.as_deref(), Some("/rtc"));
        assert!(ok.tls.is_some());
        let none = voice_settings(None, None, None, None, None, None, None).unwrap();
        assert!(none.tls.is_none() && none.udp.is_none());
        for (udp, ip, listen, cert, endpoint, path) in [
            (Some("nowhere"), None, None, None, None, None),
            (None, Some("not-an-ip"), None, None, None, None),
            (None, None, Some("127.0.0.1:0"), None, None, None),
            (None, None, None, Some("c.pem"), None, None),
            (None, None, None, None, Some("wss://h:1"), None),
            (None, None, None, None, None, Some("/")),
            (None, None, None, None, None, Some("voice")),
            (None, None, None, None, None, Some("/a b")),
        ] {
            assert!(
                voice_settings(
                    udp.map(Into::into),
                    ip.map(Into::into),
                    listen.map(Into::into),
                    cert.map(Into::into),
                    None,
                    endpoint.map(Into::into),
                    path.map(Into::into),
                )
                .is_err(),
                "{udp:?} {ip:?} {listen:?} {cert:?} {endpoint:?} {path:?}"
            );
        }
    }
}
