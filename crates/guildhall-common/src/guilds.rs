//! The guilds role's client: how any role reaches a guild's owner without
//! the role's code. The owner is the node that bounded-load placement puts
//! the guild on ([`ClusterState::owner_of`]); a request is one
//! `GuildRequest` envelope on that node's subject, and an answer one
//! `GuildReply`.
//!
//! A request to a node whose lease has ended (still on the ring until
//! membership removes it) is refused at once with `Overloaded` and
//! counted: nobody would answer, and the caller should not wait
//! `guild_reply_timeout_ms` to learn it.

use crate::cluster::ClusterState;
use guildhall_cluster::Bus;
use guildhall_proto::guilds::{
    GuildAnswer, GuildCall, GuildError, GuildReply, GuildRequest, guild_requests_subject,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The client's counters, read by `/metrics`.
#[derive(Debug, Default)]
pub struct GuildsClientCounters {
    /// Requests refused at once because their owner's node is still on the
    /// ring but no longer announced (its lease ended).
    pub owner_gone_total: AtomicU64,
}

/// Reaches guild owners over the bus.
pub struct GuildsClient {
    bus: Arc<dyn Bus>,
    cluster: Arc<ClusterState>,
    node_name: String,
    reply_timeout: Duration,
    /// Counters.
    pub counters: GuildsClientCounters,
}

/// `call` for the owner of `guild_id`, encoded once (a publish is held and
/// resent as these same bytes).
pub fn request_bytes(guild_id: i64, call: GuildCall) -> Result<bytes::Bytes, GuildError> {
    let request = GuildRequest {
        v: guildhall_proto::bus::ENVELOPE_VERSION,
        guild_id,
        call,
        hops: 0,
    };
    serde_json::to_vec(&request)
        .map(Into::into)
        .map_err(|_| GuildError::Overloaded)
}

impl GuildsClient {
    /// A client for node `node_name` (the owner of every guild until the
    /// first registry view arrives), waiting at most `reply_timeout_ms`
    /// (`guild_reply_timeout_ms`) for an answer.
    pub fn new(
        bus: Arc<dyn Bus>,
        cluster: Arc<ClusterState>,
        node_name: String,
        reply_timeout_ms: u64,
    ) -> Self {
        Self {
            bus,
            cluster,
            node_name,
            reply_timeout: Duration::from_millis(reply_timeout_ms),
            counters: GuildsClientCounters::default(),
        }
    }

    /// The node whose guilds role owns `guild_id`: its place on the ring
    /// (this node until the first view of the registry arrives).
    pub fn owner_node(&self, guild_id: i64) -> String {
        self.cluster
            .owner_of(guild_id)
            .unwrap_or_else(|| self.node_name.clone())
    }

    /// [`GuildsClient::owner_node`], refused at once (`Overloaded`) when
    /// that node's lease has ended but membership has not removed it yet.
    fn live_owner_node(&self, guild_id: i64) -> Result<String, GuildError> {
        let node = self.owner_node(guild_id);
        if self.cluster.guild_node_live(&node) {
            Ok(node)
        } else {
            self.counters
                .owner_gone_total
                .fetch_add(1, Ordering::Relaxed);
            Err(GuildError::Overloaded)
        }
    }

    /// Sends `call` to the owner of `guild_id` without waiting for an
    /// answer; refused at once when the owner's node cannot take it.
    pub fn cast(&self, guild_id: i64, call: GuildCall) -> Result<(), GuildError> {
        let subject = guild_requests_subject(&self.live_owner_node(guild_id)?);
        let bytes = request_bytes(guild_id, call)?;
        self.bus
            .publish(&subject, None, bytes)
            .map_err(|_| GuildError::Overloaded)
    }

    /// Sends `call` to the owner of `guild_id` and waits at most
    /// `guild_reply_timeout_ms` for its answer.
    pub async fn call(&self, guild_id: i64, call: GuildCall) -> Result<GuildAnswer, GuildError> {
        let bytes = request_bytes(guild_id, call)?;
        self.call_bytes(guild_id, bytes).await
    }

    /// [`GuildsClient::call`] with the request encoded already.
    pub async fn call_bytes(
        &self,
        guild_id: i64,
        bytes: bytes::Bytes,
    ) -> Result<GuildAnswer, GuildError> {
        let subject = guild_requests_subject(&self.live_owner_node(guild_id)?);
        let message = self
            .bus
            .request(&subject, bytes, self.reply_timeout)
            .await
            .map_err(|_| GuildError::Overloaded)?;
        match serde_json::from_slice::<GuildReply>(&message.payload) {
            Ok(reply) if reply.v == guildhall_proto::bus::ENVELOPE_VERSION => reply.result,
            _ => {
                crate::throttled!(
                    warn,
                    "guilds.bad_reply",
                    guild_id,
                    "undecodable guild reply"
                );
                Err(GuildError::Overloaded)
            }
        }
    }
}
