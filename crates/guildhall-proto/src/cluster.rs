//! What a node announces in the registry (etcd in cluster mode, in-process
//! in embedded mode), and how an observer validates it.
//!
//! Seed 002: a connection reset mid-request stored an empty value under a
//! service key; every watcher failed to parse it and crash-looped. Here an
//! announcement is validated field by field; a bad one is rejected with a
//! reason (the watcher counts it and keeps the key's last good value), never
//! a panic.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// Current schema of [`Announcement`].
pub const ANNOUNCEMENT_SCHEMA: u32 = 1;

/// Largest announcement accepted, in bytes.
pub const ANNOUNCEMENT_BYTES_MAX: usize = 4096;

/// Longest gateway URL an announcement may carry, in bytes (a
/// `ws[s]://host:port/path` fits many times over; more is corruption).
pub const GATEWAY_URL_BYTES_MAX: usize = 256;

/// Prefix of instance keys: `/guildhall/instances/{node}`.
pub const INSTANCE_PREFIX: &str = "/guildhall/instances/";

/// An operator's release of a self-preservation freeze: while this key
/// lives (its writer puts it under a short lease), every node whose removals
/// are frozen removes every member that is down, once per distinct value
/// (`guildhall ring release` writes a unique one). Nodes read it only while
/// frozen.
pub const RING_RELEASE_KEY: &str = "/guildhall/control/ring-release";

/// A role a node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// WebSocket sessions.
    Gateway,
    /// REST.
    Api,
    /// Guild owners.
    Guilds,
    /// Presence.
    Presence,
    /// Users router and shards.
    Users,
    /// Voice coordinators and syncers (they allocate calls on SFUs).
    Voice,
    /// A selective forwarding unit: the voice gateway and its UDP media.
    Sfu,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 7] = [
        Role::Gateway,
        Role::Api,
        Role::Guilds,
        Role::Presence,
        Role::Users,
        Role::Voice,
        Role::Sfu,
    ];

    /// Its name, as `--roles` and announcements spell it.
    pub fn label(self) -> &'static str {
        match self {
            Role::Gateway => "gateway",
            Role::Api => "api",
            Role::Guilds => "guilds",
            Role::Presence => "presence",
            Role::Users => "users",
            Role::Voice => "voice",
            Role::Sfu => "sfu",
        }
    }
}

/// Longest SFU endpoint an announcement may carry, in bytes
/// (`host:port[/path]`, what VOICE_SERVER_UPDATE's `endpoint` holds).
pub const SFU_ENDPOINT_BYTES_MAX: usize = 256;

/// What an SFU node announces besides the common fields: where voice
/// clients reach it and how full it is, so syncers choose by capacity
/// and load (seed 003: placement that ignores load drowns the few).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SfuInfo {
    /// The voice gateway as clients are told it (`host:port[/path]`, no
    /// scheme: the libraries prepend `wss://`), at most
    /// [`SFU_ENDPOINT_BYTES_MAX`] printable bytes.
    pub endpoint: String,
    /// Voice sessions it admits at most (at least 1).
    pub sessions_max: u32,
    /// Voice sessions (admitted or connected) as of its last refresh.
    pub sessions: u32,
    /// Calls (channels) allocated on it as of its last refresh.
    pub calls: u32,
}

/// One node's announcement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Announcement {
    /// [`ANNOUNCEMENT_SCHEMA`].
    pub schema: u32,
    /// Stable node name (`[a-z0-9._-]`, 1–64 bytes).
    pub node: String,
    /// Roles it runs (at least one).
    pub roles: Vec<Role>,
    /// Where its peers reach it.
    pub addr: String,
    /// When it started, Unix ms.
    pub started_ms: u64,
    /// A gateway node: where clients connect to it (`ws://` or `wss://`,
    /// at most [`GATEWAY_URL_BYTES_MAX`] bytes, no whitespace or control
    /// characters). Absent for nodes without the gateway role and in
    /// announcements of nodes that predate the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_url: Option<String>,
    /// Sessions the node holds (attached or resumable), as of its last
    /// refresh: `GET /gateway` sends new clients to the least loaded.
    #[serde(default)]
    pub sessions: u64,
    /// The node is draining (SIGTERM): route no new session to it.
    #[serde(default)]
    pub draining: bool,
    /// An SFU node: its endpoint and load. Absent for other nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sfu: Option<SfuInfo>,
}

/// Why an entry was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rejection {
    /// No bytes at all (seed 002's exact failure).
    Empty,
    /// Over [`ANNOUNCEMENT_BYTES_MAX`].
    Oversized,
    /// Not UTF-8.
    NotUtf8,
    /// Not JSON of the right shape (truncated, wrong types, unknown fields).
    Malformed,
    /// A schema this node does not understand.
    WrongSchema,
    /// Name, roles or address invalid.
    InvalidField,
    /// The key does not match the announced node.
    KeyMismatch,
}

impl Rejection {
    /// A stable label (metrics, logs).
    pub fn label(self) -> &'static str {
        match self {
            Rejection::Empty => "empty",
            Rejection::Oversized => "oversized",
            Rejection::NotUtf8 => "not_utf8",
            Rejection::Malformed => "malformed",
            Rejection::WrongSchema => "wrong_schema",
            Rejection::InvalidField => "invalid_field",
            Rejection::KeyMismatch => "key_mismatch",
        }
    }
}

/// Longest node name, bytes.
pub const NODE_NAME_BYTES_MAX: usize = 64;

/// Whether `name` can name a node: 1 to [`NODE_NAME_BYTES_MAX`] bytes of
/// lower-case ASCII letters, digits, `.`, `_` and `-`. It is a registry
/// key's last segment, a bus subject's token and a stream's key, so
/// peers refuse any other announcement; a node checks its own name at
/// start with this same function rather than run unseen by its peers.
pub fn node_name_ok(name: &str) -> bool {
    (1..=NODE_NAME_BYTES_MAX).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

/// The key an announcement of `node` lives under.
pub fn instance_key(node: &str) -> String {
    format!("{INSTANCE_PREFIX}{node}")
}

impl Announcement {
    /// Encodes for the registry (after validating, so a node never writes
    /// what its peers would reject).
    pub fn encode(&self) -> Result<Vec<u8>, Rejection> {
        self.check()?;
        serde_json::to_vec(self).map_err(|_| Rejection::Malformed)
    }

    fn check(&self) -> Result<(), Rejection> {
        if self.schema != ANNOUNCEMENT_SCHEMA {
            return Err(Rejection::WrongSchema);
        }
        if !node_name_ok(&self.node)
            || self.roles.is_empty()
            || self.addr.parse::<SocketAddr>().is_err()
        {
            return Err(Rejection::InvalidField);
        }
        if let Some(url) = &self.gateway_url {
            let scheme_ok = url.starts_with("ws://") || url.starts_with("wss://");
            let chars_ok = url.bytes().all(|b| b.is_ascii_graphic());
            if !scheme_ok || !chars_ok || url.len() > GATEWAY_URL_BYTES_MAX {
                return Err(Rejection::InvalidField);
            }
        }
        if let Some(sfu) = &self.sfu {
            let endpoint_ok = !sfu.endpoint.is_empty()
                && sfu.endpoint.len() <= SFU_ENDPOINT_BYTES_MAX
                && sfu.endpoint.bytes().all(|b| b.is_ascii_graphic())
                && !sfu.endpoint.contains("://");
            if !endpoint_ok || sfu.sessions_max == 0 || !self.roles.contains(&Role::Sfu) {
                return Err(Rejection::InvalidField);
            }
        }
        Ok(())
    }

    /// Validates the raw value stored under `key`.
    ///
    /// ```
    /// use guildhall_proto::cluster::{Announcement, Rejection, Role, instance_key};
    /// let a = Announcement { schema: 1, node: "gw-1".into(), roles: vec![Role::Gateway], addr: "10.0.0.1:8080".into(), started_ms: 1, gateway_url: Some("ws://10.0.0.1:8080".into()), sessions: 3, draining: false, sfu: None };
    /// let bytes = a.encode().unwrap();
    /// assert_eq!(Announcement::decode(&instance_key("gw-1"), &bytes), Ok(a));
    /// assert_eq!(Announcement::decode(&instance_key("gw-1"), b""), Err(Rejection::Empty));
    /// assert_eq!(Announcement::decode(&instance_key("gw-1"), &bytes[..10]), Err(Rejection::Malformed));
    /// ```
    pub fn decode(key: &str, raw: &[u8]) -> Result<Announcement, Rejection> {
        if raw.is_empty() {
            return Err(Rejection::Empty);
        }
        if raw.len() > ANNOUNCEMENT_BYTES_MAX {
            return Err(Rejection::Oversized);
        }
        let text = std::str::from_utf8(raw).map_err(|_| Rejection::NotUtf8)?;
        // Read the schema first, so a newer schema is reported as such
        // rather than as malformed.
        let schema = serde_json::from_str::<serde_json::Value>(text)
            .map_err(|_| Rejection::Malformed)?
            .get("schema")
            .and_then(serde_json::Value::as_u64);
        if schema != Some(u64::from(ANNOUNCEMENT_SCHEMA)) {
            return Err(if schema.is_some() {
                Rejection::WrongSchema
            } else {
                Rejection::Malformed
            });
        }
        let announcement: Announcement =
            serde_json::from_str(text).map_err(|_| Rejection::Malformed)?;
        announcement.check()?;
        if key != instance_key(&announcement.node) {
            return Err(Rejection::KeyMismatch);
        }
        Ok(announcement)
    }
}

/// One live SFU, as a node's registry view provides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SfuInstance {
    /// The SFU's node name (its subjects are named after it).
    pub node: String,
    /// What it announces.
    pub info: SfuInfo,
}

/// The live SFUs; the view replaces the list whenever it changes.
pub type SfuList = std::sync::Arc<Vec<SfuInstance>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Announcement {
        Announcement {
            schema: 1,
            node: "node-1".into(),
            roles: vec![Role::Guilds],
            addr: "127.0.0.1:1".into(),
            started_ms: 5,
            gateway_url: None,
            sessions: 0,
            draining: false,
            sfu: None,
        }
    }

    /// Every corruption seed 002's resilience criterion names, and its reason.
    #[test]
    fn corrupt_entries_are_rejected_with_a_reason() {
        let key = instance_key("node-1");
        let bytes = good().encode().unwrap();
        let cases: Vec<(&str, Vec<u8>, Rejection)> = vec![
            ("empty", vec![], Rejection::Empty),
            ("truncated", bytes[..bytes.len() / 2].to_vec(), Rejection::Malformed),
            ("non-UTF-8", vec![0xff, 0xfe, b'{'], Rejection::NotUtf8),
            ("oversized", vec![b' '; ANNOUNCEMENT_BYTES_MAX + 1], Rejection::Oversized),
            ("wrong schema", br#"{"schema":2,"node":"node-1"}"#.to_vec(), Rejection::WrongSchema),
            ("no schema", br#"{"node":"node-1"}"#.to_vec(), Rejection::Malformed),
            ("unknown field", br#"{"schema":1,"node":"node-1","roles":["guilds"],"addr":"127.0.0.1:1","started_ms":5,"x":1}"#.to_vec(), Rejection::Malformed),
            ("bad address", br#"{"schema":1,"node":"node-1","roles":["guilds"],"addr":"nowhere","started_ms":5}"#.to_vec(), Rejection::InvalidField),
            ("no roles", br#"{"schema":1,"node":"node-1","roles":[],"addr":"127.0.0.1:1","started_ms":5}"#.to_vec(), Rejection::InvalidField),
            ("bad name", br#"{"schema":1,"node":"Node 1","roles":["api"],"addr":"127.0.0.1:1","started_ms":5}"#.to_vec(), Rejection::InvalidField),
        ];
        for (name, raw, reason) in cases {
            assert_eq!(Announcement::decode(&key, &raw), Err(reason), "{name}");
        }
        assert_eq!(
            Announcement::decode(&instance_key("other"), &bytes),
            Err(Rejection::KeyMismatch)
        );
        assert_eq!(Announcement::decode(&key, &bytes), Ok(good()));
    }

    #[test]
    fn gateway_fields_are_validated_and_optional() {
        let key = instance_key("node-1");
        let gateway = Announcement {
            gateway_url: Some("ws://127.0.0.1:9".into()),
            sessions: 12,
            draining: true,
            ..good()
        };
        let bytes = gateway.encode().unwrap();
        assert_eq!(Announcement::decode(&key, &bytes), Ok(gateway.clone()));
        let long = format!("ws://{}", "a".repeat(GATEWAY_URL_BYTES_MAX));
        for url in ["http://x:1", "ws://a b", "ws://a\u{0}", long.as_str()] {
            let bad = Announcement {
                gateway_url: Some(url.to_owned()),
                ..gateway.clone()
            };
            assert_eq!(bad.encode(), Err(Rejection::InvalidField), "{url}");
            let raw = serde_json::to_vec(&bad).unwrap();
            assert_eq!(
                Announcement::decode(&key, &raw),
                Err(Rejection::InvalidField)
            );
        }
        let wrong_type = br#"{"schema":1,"node":"node-1","roles":["gateway"],"addr":"127.0.0.1:1","started_ms":5,"sessions":-1}"#;
        assert_eq!(
            Announcement::decode(&key, wrong_type),
            Err(Rejection::Malformed)
        );
        let sfu = Announcement {
            roles: vec![Role::Sfu],
            sfu: Some(SfuInfo {
                endpoint: "127.0.0.1:9/voice".into(),
                sessions_max: 10,
                sessions: 2,
                calls: 1,
            }),
            ..good()
        };
        let bytes = sfu.encode().unwrap();
        assert_eq!(Announcement::decode(&key, &bytes), Ok(sfu.clone()));
        for (endpoint, max, roles) in [
            ("", 10, vec![Role::Sfu]),
            ("wss://h:1", 10, vec![Role::Sfu]),
            ("h :1", 10, vec![Role::Sfu]),
            ("h:1", 0, vec![Role::Sfu]),
            ("h:1", 10, vec![Role::Guilds]),
        ] {
            let bad = Announcement {
                roles,
                sfu: Some(SfuInfo {
                    endpoint: endpoint.into(),
                    sessions_max: max,
                    sessions: 0,
                    calls: 0,
                }),
                ..good()
            };
            assert_eq!(bad.encode(), Err(Rejection::InvalidField), "{endpoint}");
        }
        // An announcement from before the gateway fields still decodes.
        let old = br#"{"schema":1,"node":"node-1","roles":["guilds"],"addr":"127.0.0.1:1","started_ms":5}"#;
        assert_eq!(Announcement::decode(&key, old), Ok(good()));
    }
}
