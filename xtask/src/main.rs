//! Project automation, in Rust instead of shell scripts (rust-analyzer's
//! `xtask` pattern): `cargo xtask ci` is the one command CI and developers
//! run to check everything.

use std::process::{Command, ExitCode};

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

/// fmt, clippy with warnings denied, nextest, doc tests; stops at the first
/// failure so the log ends with the cause.
fn ci() -> bool {
    let deny = [
        ("RUSTFLAGS", "-D warnings"),
        ("RUSTDOCFLAGS", "-D warnings"),
    ];
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
}

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let ok = match task.as_str() {
        "ci" => ci(),
        _ => {
            eprintln!("usage: cargo xtask ci");
            false
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
