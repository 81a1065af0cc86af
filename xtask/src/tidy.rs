//! Tidy tests (in the spirit of rust-analyzer's `tidy.rs`): the layout
//! rules of ARCHITECTURE.md, checked by reading the workspace's files, so a
//! change that breaks one fails `cargo nextest run --workspace` (CI) and
//! not a reviewer's eye.
//!
//! 1. No role crate depends on another role crate, and no crate below the
//!    roles depends on one: roles meet only through the bus, over the
//!    envelopes of `guildhall-proto` and the clients of `guildhall-common`.
//! 2. While role modules still live in `guildhall-node`, a role module
//!    names another role's module (or the node's wiring, `crate::Node`)
//!    only where [`CROSS_ROLE_ALLOWED`] says so. The list may only shrink:
//!    an entry that no longer occurs fails too, so each step that cuts an
//!    edge also deletes its line.

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

/// The role of each module still inside `guildhall-node/src`, or
/// re-exported there from its role crate while the modules left name it
/// by its old path (a missing file is skipped; its uses still count).
const NODE_MODULE_ROLES: &[(&str, &str)] = &[
    ("gateway", "gateway"),
    ("hub", "gateway"),
    ("takeover", "gateway"),
    ("events", "gateway"),
    ("compress", "gateway"),
    ("subscriptions", "gateway"),
    ("api", "api"),
    ("commands", "api"),
    ("interactions", "api"),
    ("webhooks", "api"),
    ("interaction_forward", "api"),
    ("ratelimit", "api"),
    ("http", "api"),
];

/// Names under `crate::` in `guildhall-node` that are shared below the
/// roles (re-exports of `guildhall-common`): any role may name them.
const NODE_SHARED: &[&str] = &[
    "auth",
    "cluster",
    "histogram",
    "log",
    "outbox",
    "state",
    "throttled",
];

/// `module -> name`: a role module of `guildhall-node` that still names
/// another role's module, or the node's wiring (`Node`: every role's state
/// at once). Today's edges; each step of the role split removes some.
const CROSS_ROLE_ALLOWED: &[(&str, &str)] = &[];

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
    let mut seen = 0;
    for krate in ROLE_CRATES.iter().chain(BELOW_ROLES) {
        let manifest = root.join("crates").join(krate).join("Cargo.toml");
        if !manifest.exists() {
            // A role crate the split has not created yet.
            continue;
        }
        seen += 1;
        for dependency in guildhall_dependencies(&manifest) {
            if dependency != *krate && ROLE_CRATES.contains(&dependency.as_str()) {
                broken.push(format!("{krate} depends on the role crate {dependency}"));
            }
        }
    }
    assert!(
        seen >= BELOW_ROLES.len(),
        "manifests not found under {}",
        root.display()
    );
    assert!(
        broken.is_empty(),
        "roles meet only through the bus:\n{}",
        broken.join("\n")
    );
}

/// `(module, name)` for every `crate::name` in a role module of
/// `guildhall-node` that names another role's module or the wiring.
fn node_cross_role_edges() -> BTreeSet<(String, String)> {
    let src = workspace_root().join("crates/guildhall-node/src");
    let role_of = |module: &str| {
        NODE_MODULE_ROLES
            .iter()
            .find(|(m, _)| *m == module)
            .map(|(_, role)| *role)
    };
    let mut edges = BTreeSet::new();
    for (module, role) in NODE_MODULE_ROLES {
        let path = src.join(format!("{module}.rs"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            // Moved to its role crate.
            continue;
        };
        for (at, _) in text.match_indices("crate::") {
            let name: String = text[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() || NODE_SHARED.contains(&name.as_str()) {
                continue;
            }
            if role_of(&name) == Some(role) {
                continue;
            }
            edges.insert(((*module).to_owned(), name));
        }
    }
    edges
}

#[test]
fn cross_role_imports_inside_the_node_only_shrink() {
    let found = node_cross_role_edges();
    let allowed: BTreeSet<(String, String)> = CROSS_ROLE_ALLOWED
        .iter()
        .map(|(m, n)| ((*m).to_owned(), (*n).to_owned()))
        .collect();
    let new: Vec<String> = found
        .difference(&allowed)
        .map(|(m, n)| format!("{m} -> crate::{n}"))
        .collect();
    let gone: Vec<String> = allowed
        .difference(&found)
        .map(|(m, n)| format!("(\"{m}\", \"{n}\")"))
        .collect();
    assert!(
        new.is_empty(),
        "new cross-role imports in guildhall-node (go through the bus or guildhall-common):\n{}",
        new.join("\n")
    );
    assert!(
        gone.is_empty(),
        "these edges are gone: delete them from CROSS_ROLE_ALLOWED so they cannot come back:\n{}",
        gone.join("\n")
    );
}
