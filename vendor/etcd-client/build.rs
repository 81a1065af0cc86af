//! etcd-client's build script, with Guildhall's one change: when `PROTOC`
//! is not set, protoc and the well-known `.proto` files come from the
//! `protoc-bin-vendored` registry package, so a machine with only a Rust
//! toolchain builds the etcd client.
//!
//! Why a vendored protoc rather than generated code kept in the repo: the
//! generated code would be ~10k lines that must be regenerated (with a
//! protoc anyway) and checked for staleness on every etcd-client upgrade,
//! while this keeps upstream's build unchanged and the upgrade a copy.
//! A `PROTOC` set by the caller still wins, as in upstream.

#[cfg(feature = "build-server")]
fn should_build_server() -> bool {
    true
}

#[cfg(not(feature = "build-server"))]
fn should_build_server() -> bool {
    false
}

fn main() {
    let proto_root = "proto";
    println!("cargo:rerun-if-changed={proto_root}");
    println!("cargo:rerun-if-env-changed=PROTOC");

    let mut includes = vec![std::path::PathBuf::from(proto_root)];
    if std::env::var_os("PROTOC").is_none() {
        let protoc = protoc_bin_vendored::protoc_bin_path()
            .expect("protoc-bin-vendored has no protoc for this platform; set PROTOC");
        // SAFETY: a build script is single-threaded here; prost-build reads
        // PROTOC from the environment when it runs protoc below.
        unsafe { std::env::set_var("PROTOC", protoc) };
        includes.push(
            protoc_bin_vendored::include_path()
                .expect("protoc-bin-vendored has no include path for this platform"),
        );
    }

    tonic_prost_build::configure()
        .build_server(should_build_server())
        .compile_protos(
            &[
                "proto/etcd/api/authpb/auth.proto",
                "proto/etcd/api/etcdserverpb/rpc.proto",
                "proto/etcd/api/mvccpb/kv.proto",
                "proto/etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
                "proto/etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
            ]
            .map(std::path::PathBuf::from),
            &includes,
        )
        .expect("Failed to compile proto files");
}
