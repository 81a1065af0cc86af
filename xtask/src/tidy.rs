//! Tidy tests (in the spirit of rust-analyzer's `tidy.rs`): the layout
//! rules of ARCHITECTURE.md, checked by reading the workspace's files, so a
//! change that breaks one fails `cargo nextest run --workspace` (CI) and
//! not a reviewer's eye.
//!
//! 1. No role crate depends on another role crate, and no crate below the
//!    roles depends on one: roles meet only through the bus, over the
//!    envelopes of `guildhall-proto` and the clients of `guildhall-common`.
//! 2. `guildhall-node` holds only the wiring: no role module lives in its
//!    `src/`, and the whole of it stays under a line budget.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The role crates: each runs in processes of its own in cluster mode.
const ROLE_CRATES: &[&str] = &[
    "guildhall-gateway",
    "guildhall-api",
    "guildhall-guilds",
    "guildhall-presence",
    "guildhall-users",
    "guildhall-voice",
    "guildhall-sfu",
];

/// Crates below the roles: every role may use them, so none of them may
/// use a role.
const BELOW_ROLES: &[&str] = &[
    "guildhall-common",
    "guildhall-proto",
    "guildhall-cluster",
    "guildhall-store",
    "guildhall-limits",
    "guildhall-ring",
    "guildhall-control",
    "guildhall-session",
];

/// The files of `guildhall-node/src`: the wiring (which roles a process
/// runs, over which transports, and `/metrics`), the HTTP edge every role
/// of a process is served through, and the snowflake worker id. A role's
/// module belongs in its role crate; one added here fails.
const NODE_WIRING: &[&str] = &["http.rs", "lib.rs", "worker_id.rs"];

/// Lines of `guildhall-node/src` in all: wiring stays small (it was 21k
/// lines while the roles were its modules).
const NODE_SRC_LINES_MAX: usize = 3_000;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Every `guildhall-*` crate a manifest depends on, in any dependency
/// table (normal, dev, build, and their target-specific forms).
fn guildhall_dependencies(manifest: &Path) -> BTreeSet<String> {
    let text =
        std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let doc: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let mut tables: Vec<&toml::Table> = Vec::new();
    let kinds = ["dependencies", "dev-dependencies", "build-dependencies"];
    for kind in kinds {
        if let Some(table) = doc.get(kind).and_then(toml::Value::as_table) {
            tables.push(table);
        }
    }
    if let Some(targets) = doc.get("target").and_then(toml::Value::as_table) {
        for target in targets.values().filter_map(toml::Value::as_table) {
            for kind in kinds {
                if let Some(table) = target.get(kind).and_then(toml::Value::as_table) {
                    tables.push(table);
                }
            }
        }
    }
    tables
        .into_iter()
        .flat_map(|table| table.keys())
        .filter(|name| name.starts_with("guildhall-"))
        .cloned()
        .collect()
}

#[test]
fn no_role_crate_depends_on_another_role() {
    let root = workspace_root();
    let mut broken = Vec::new();
    // Every crate listed must exist: guildhall_dependencies fails on a
    // missing manifest.
    for krate in ROLE_CRATES.iter().chain(BELOW_ROLES) {
        let manifest = root.join("crates").join(krate).join("Cargo.toml");
        for dependency in guildhall_dependencies(&manifest) {
            if dependency != *krate && ROLE_CRATES.contains(&dependency.as_str()) {
                broken.push(format!("{krate} depends on the role crate {dependency}"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "roles meet only through the bus:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_node_holds_only_the_wiring() {
    let src = workspace_root().join("crates/guildhall-node/src");
    let mut strays = Vec::new();
    let mut lines = 0;
    let entries = std::fs::read_dir(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !NODE_WIRING.contains(&name.as_str()) {
            strays.push(name);
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        lines += text.lines().count();
    }
    assert!(
        strays.is_empty(),
        "guildhall-node is the wiring; move these to their role crate (or below the roles): {strays:?}"
    );
    assert!(
        lines <= NODE_SRC_LINES_MAX,
        "guildhall-node/src has {lines} lines, over {NODE_SRC_LINES_MAX}: wiring only"
    );
}
