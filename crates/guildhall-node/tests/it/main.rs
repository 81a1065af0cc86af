//! guildhall-node's integration tests, one binary: every file here was a
//! test binary of its own, and each linked the whole server (about thirty
//! links of the same graph per cold build). As modules of one binary they
//! link once; nextest still runs every test in a process of its own, so a
//! test sees no state another left behind. Run one file's tests with
//! `cargo nextest run -p guildhall-node -E 'test(/^server::/)'`.

mod adversarial;
mod bus_faults;
mod cluster;
mod commands;
mod common;
mod embeds;
mod event_tasks;
mod files;
mod gateway_compression;
mod guild_loads;
mod handshake_admission;
mod hardening_api;
mod hardening_gateway;
mod hardening_http;
mod interactions;
mod limit_overrides;
mod mentions;
mod owners;
mod presences;
mod reactions_pins;
mod ready_subscribe;
mod replies;
mod resume_anywhere;
mod serenity;
mod server;
mod shards;
mod startup_routes;
mod twilight;
mod voice;
mod webhooks;
