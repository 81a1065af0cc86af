//! A node on 127.0.0.1:0 in a temp dir, a REST helper and a gateway client.

// Test helpers: a panic is the failure report, and not every test uses every helper.
#![allow(
    dead_code,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use futures_util::{SinkExt, StreamExt};
use guildhall_limits::Limits;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub struct TestNode {
    pub base: String,
    pub ws: String,
    pub http: reqwest::Client,
    /// The data directory (shared by the members of a test cluster).
    pub data_dir: std::path::PathBuf,
    dir: Option<tempfile::TempDir>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestNode {
    pub async fn start() -> Self {
        Self::with_limits(Limits::default()).await
    }

    pub async fn with_limits(limits: Limits) -> Self {
        Self::with(limits, None).await
    }

    pub async fn with(
        limits: Limits,
        registry: Option<std::sync::Arc<dyn guildhall_cluster::Registry>>,
    ) -> Self {
        Self::with_bus(limits, registry, None).await
    }

    pub async fn with_bus(
        limits: Limits,
        registry: Option<std::sync::Arc<dyn guildhall_cluster::Registry>>,
        bus: Option<std::sync::Arc<dyn guildhall_cluster::Bus>>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = guildhall_node::NodeConfig {
            data_dir: dir.path().to_owned(),
            limits,
            worker_id: Some(1),
            node_name: "test-node".to_owned(),
            registry,
            bus,
            ..guildhall_node::NodeConfig::embedded(dir.path().to_owned())
        };
        let mut node = Self::from_config(config).await;
        node.dir = Some(dir);
        node
    }

    /// A node of a test cluster: its own name and worker id, the data
    /// directory (one database) and the registry and bus of its peers.
    pub async fn member(
        name: &str,
        worker_id: u16,
        data_dir: &std::path::Path,
        registry: std::sync::Arc<dyn guildhall_cluster::Registry>,
        bus: std::sync::Arc<dyn guildhall_cluster::Bus>,
    ) -> Self {
        let limits = Limits {
            rest_rate_limit_per_window: 1_000_000,
            ..Limits::default()
        };
        Self::member_with(name, worker_id, data_dir, registry, bus, limits).await
    }

    pub async fn member_with(
        name: &str,
        worker_id: u16,
        data_dir: &std::path::Path,
        registry: std::sync::Arc<dyn guildhall_cluster::Registry>,
        bus: std::sync::Arc<dyn guildhall_cluster::Bus>,
        limits: Limits,
    ) -> Self {
        Self::from_config(guildhall_node::NodeConfig {
            data_dir: data_dir.to_owned(),
            limits,
            worker_id: Some(worker_id),
            node_name: name.to_owned(),
            registry: Some(registry),
            bus: Some(bus),
            ..guildhall_node::NodeConfig::embedded(data_dir.to_owned())
        })
        .await
    }

    /// A node of a test cluster running only `roles`.
    #[allow(dead_code)]
    pub async fn member_roles(
        name: &str,
        worker_id: u16,
        data_dir: &std::path::Path,
        registry: std::sync::Arc<dyn guildhall_cluster::Registry>,
        bus: std::sync::Arc<dyn guildhall_cluster::Bus>,
        roles: &[guildhall_proto::cluster::Role],
    ) -> Self {
        Self::from_config(guildhall_node::NodeConfig {
            data_dir: data_dir.to_owned(),
            limits: Limits {
                rest_rate_limit_per_window: 1_000_000,
                ..Limits::default()
            },
            worker_id: Some(worker_id),
            node_name: name.to_owned(),
            registry: Some(registry),
            bus: Some(bus),
            roles: roles.to_vec(),
            ..guildhall_node::NodeConfig::embedded(data_dir.to_owned())
        })
        .await
    }

    /// A node of a test cluster running only `roles`, with `limits` and,
    /// when given, the cluster state the test holds (to watch placement or
    /// cut the node off from the registry).
    #[allow(dead_code, clippy::too_many_arguments)]
    pub async fn member_roles_with(
        name: &str,
        worker_id: u16,
        data_dir: &std::path::Path,
        registry: std::sync::Arc<dyn guildhall_cluster::Registry>,
        bus: std::sync::Arc<dyn guildhall_cluster::Bus>,
        roles: &[guildhall_proto::cluster::Role],
        limits: Limits,
        cluster_state: Option<std::sync::Arc<guildhall_common::cluster::ClusterState>>,
    ) -> Self {
        Self::from_config(guildhall_node::NodeConfig {
            data_dir: data_dir.to_owned(),
            limits,
            worker_id: Some(worker_id),
            node_name: name.to_owned(),
            registry: Some(registry),
            bus: Some(bus),
            roles: roles.to_vec(),
            cluster_state,
            ..guildhall_node::NodeConfig::embedded(data_dir.to_owned())
        })
        .await
    }

    pub async fn from_config(mut config: guildhall_node::NodeConfig) -> Self {
        // Tests identify one bot many times in a row, faster than any
        // library would (libraries pace IDENTIFYs by `max_concurrency`):
        // the 5 s bucket would turn most of them into INVALID_SESSION. A
        // test of the buckets asks for a window of its own.
        if config.limits.identify_concurrency_window_ms
            == guildhall_limits::IDENTIFY_CONCURRENCY_WINDOW_MS
        {
            config.limits.identify_concurrency_window_ms = 1;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let data_dir = config.data_dir.clone();
        let task = tokio::spawn(async move {
            guildhall_node::run(config, listener, async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Self {
            base: format!("http://{addr}/api/v10"),
            ws: format!("ws://{addr}"),
            http: reqwest::Client::new(),
            data_dir,
            dir: None,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// A node running in another process (cluster-mode tests), at `addr`.
    pub fn remote(addr: &str) -> Self {
        Self {
            base: format!("http://{addr}/api/v10"),
            ws: format!("ws://{addr}"),
            http: reqwest::Client::new(),
            data_dir: std::path::PathBuf::new(),
            dir: None,
            stop: None,
            task: None,
        }
    }

    /// The whole `/metrics` page.
    pub async fn metrics_text(&self) -> String {
        self.http
            .get(self.base.replace("/api/v10", "/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The value of an unlabelled metric.
    pub async fn metric(&self, name: &str) -> u64 {
        self.metrics_text()
            .await
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("metric {name} missing"))
    }

    /// Starts the node's shutdown (SIGTERM: the drain) without waiting.
    pub fn begin_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Waits for a node whose shutdown began to finish (bounded).
    pub async fn stopped(mut self) {
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(60), task).await;
        }
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }

    /// (status, body) of a request.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        self.call_with(method, path, token, body, &[]).await
    }

    /// (status, body) of a request with extra `headers`.
    pub async fn call_with(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(token) = token {
            request = request.header("authorization", format!("Bot {token}"));
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// POST /channels/{channel}/messages with `body`: (status, body).
    pub async fn post_message(&self, token: &str, channel: &str, body: Value) -> (u16, Value) {
        self.call(
            "POST",
            &format!("/channels/{channel}/messages"),
            Some(token),
            Some(body),
        )
        .await
    }

    /// The channel's newest messages (GET /channels/{channel}/messages,
    /// which must answer 200), newest first.
    pub async fn history(&self, token: &str, channel: &str) -> Vec<Value> {
        let (status, messages) = self
            .call(
                "GET",
                &format!("/channels/{channel}/messages"),
                Some(token),
                None,
            )
            .await;
        assert_eq!(status, 200, "{messages}");
        messages.as_array().unwrap().clone()
    }

    pub async fn register(&self, name: &str) -> (String, String) {
        let (status, body) = self
            .call(
                "POST",
                "/auth/register",
                None,
                Some(json!({"username": name, "password": "password123"})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        (
            body["token"].as_str().unwrap().to_owned(),
            body["user_id"].as_str().unwrap().to_owned(),
        )
    }

    /// A guild owned by `token`: (guild id, general channel id).
    pub async fn guild(&self, token: &str, name: &str) -> (String, String) {
        let (status, body) = self
            .call("POST", "/guilds", Some(token), Some(json!({"name": name})))
            .await;
        assert_eq!(status, 200, "{body}");
        (
            body["id"].as_str().unwrap().to_owned(),
            body["channels"][0]["id"].as_str().unwrap().to_owned(),
        )
    }

    /// An invite code to `channel_id`, created by `token`.
    pub async fn invite(&self, token: &str, channel_id: &str) -> String {
        let (status, invite) = self
            .call(
                "POST",
                &format!("/channels/{channel_id}/invites"),
                Some(token),
                Some(json!({})),
            )
            .await;
        assert_eq!(status, 200, "{invite}");
        invite["code"].as_str().unwrap().to_owned()
    }

    /// Registers `names` and has each join through invite `code`.
    pub async fn join_all(&self, code: &str, names: &[&str]) {
        for name in names {
            let (token, _) = self.register(name).await;
            let (status, body) = self
                .call("POST", &format!("/invites/{code}"), Some(&token), None)
                .await;
            assert_eq!(status, 200, "{body}");
        }
    }

    /// A bot of `owner_token` added to `guild_id`: (app id, bot token).
    pub async fn bot_in(&self, owner_token: &str, guild_id: &str) -> (String, String) {
        let (status, app) = self
            .call(
                "POST",
                "/applications",
                Some(owner_token),
                Some(json!({"name": "testbot"})),
            )
            .await;
        assert_eq!(status, 200, "{app}");
        let app_id = app["id"].as_str().unwrap().to_owned();
        let (status, reset) = self
            .call(
                "POST",
                &format!("/applications/{app_id}/bot/reset"),
                Some(owner_token),
                None,
            )
            .await;
        assert_eq!(status, 200, "{reset}");
        let (status, body) = self
            .call(
                "POST",
                &format!("/oauth2/authorize?client_id={app_id}&scope=bot"),
                Some(owner_token),
                Some(json!({"guild_id": guild_id, "permissions": "0", "authorize": true})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        (app_id, reset["token"].as_str().unwrap().to_owned())
    }
}

pub struct Client {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Client {
    pub async fn connect(url: &str) -> Self {
        let (ws, _) = tokio_tungstenite::connect_async(format!("{url}/?v=10&encoding=json"))
            .await
            .unwrap();
        Self { ws }
    }

    pub async fn send(&mut self, value: Value) {
        self.ws
            .send(Message::Text(value.to_string().into()))
            .await
            .unwrap();
    }

    pub async fn send_raw(&mut self, text: &str) {
        self.ws
            .send(Message::Text(text.to_owned().into()))
            .await
            .unwrap();
    }

    /// The next text frame as JSON, or the close code.
    pub async fn next(&mut self) -> Result<Value, Option<u16>> {
        self.next_within().await.expect("gateway answered")
    }

    /// [`Self::next`], or None when nothing came for 10 s.
    async fn next_within(&mut self) -> Option<Result<Value, Option<u16>>> {
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(10), self.ws.next())
                .await
                .ok()?;
            return Some(match frame {
                Some(Ok(Message::Text(text))) => Ok(serde_json::from_str(&text).unwrap()),
                Some(Ok(Message::Close(frame))) => Err(frame.map(|f| u16::from(f.code))),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => Err(None),
            });
        }
    }

    /// The next dispatch named `t` (skipping others; a wait that ends
    /// says which frames it skipped, e.g. an INVALID_SESSION).
    pub async fn dispatch(&mut self, t: &str) -> Value {
        let mut skipped: Vec<String> = vec![];
        loop {
            let Some(frame) = self.next_within().await else {
                panic!("nothing for 10 s waiting for {t}; skipped (op, t): {skipped:?}");
            };
            let frame = frame.unwrap_or_else(|code| panic!("closed with {code:?} waiting for {t}"));
            if frame["t"] == t {
                return frame;
            }
            skipped.push(format!("({}, {})", frame["op"], frame["t"]));
        }
    }

    /// A new connection that IDENTIFYs until READY, as a library does:
    /// an INVALID_SESSION (op 9, the server's "try again", e.g. while a
    /// lookup it needs is overloaded on a loaded machine) is answered by
    /// identifying again on a new connection a second later, at most
    /// `attempts` times. Returns the client and READY.
    pub async fn ready_with_retries(
        url: &str,
        token: &str,
        intents: u64,
        attempts: u32,
    ) -> (Self, Value) {
        for attempt in 1..=attempts {
            let mut client = Self::connect(url).await;
            let hello = client.next().await.unwrap();
            assert_eq!(hello["op"], 10);
            client
                .send(
                    json!({"op": 2, "d": {"token": format!("Bot {token}"), "intents": intents,
                "properties": {"os": "linux", "browser": "test", "device": "test"}}}),
                )
                .await;
            loop {
                let frame = client
                    .next()
                    .await
                    .unwrap_or_else(|code| panic!("closed with {code:?} waiting for READY"));
                if frame["t"] == "READY" {
                    return (client, frame);
                }
                if frame["op"] == 9 {
                    break;
                }
            }
            assert!(attempt < attempts, "INVALID_SESSION {attempts} times");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        unreachable!("attempts is at least 1")
    }

    /// HELLO then IDENTIFY with `intents`; returns READY.
    pub async fn identify(&mut self, token: &str, intents: u64) -> Value {
        let hello = self.next().await.unwrap();
        assert_eq!(hello["op"], 10);
        assert_eq!(hello["d"]["heartbeat_interval"], 41_250);
        self.send(
            json!({"op": 2, "d": {"token": format!("Bot {token}"), "intents": intents,
            "properties": {"os": "linux", "browser": "test", "device": "test"}}}),
        )
        .await;
        self.dispatch("READY").await
    }

    pub async fn close_code(&mut self) -> Option<u16> {
        loop {
            match self.next().await {
                Ok(_) => continue,
                Err(code) => return code,
            }
        }
    }
}

/// The seed of a seeded test: `GUILDHALL_TEST_SEED` if set (to rerun a
/// failure), else the clock. Tests print it first.
pub fn seed() -> u64 {
    std::env::var("GUILDHALL_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

/// Polls `check` every 100 ms, at most `polls_max` times, and panics with
/// `what` if it never holds: a bound on the wait, not a timed assertion.
pub async fn until(what: &str, polls_max: u32, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..polls_max {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}
