//! Compiles `proto/lardon/v1/*.proto` (the daemon's and the cluster's API)
//! and KEDA's external-scaler interface (`proto/externalscaler/`) with
//! protox (a pure-Rust protoc: no
//! binary, no network) and generates the tonic client and server.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(
        ["lardon/v1/daemon.proto", "lardon/v1/cluster.proto", "externalscaler/externalscaler.proto"],
        ["proto"],
    )?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(fds)?;
    Ok(())
}
