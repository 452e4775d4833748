//! A daemon with a few tasks, for trying the dashboard and measuring its
//! idle cost: `cargo run -p lardon-top --example demo_daemon -- DIR [SECS]`
//! serves on `DIR/lardon.sock` for SECS seconds (default 600) with two
//! long `sleep` tasks running, one paused and one that fails at once.
#![allow(clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use lardon_proto::pb;

fn spec(name: &str, argv: &[&str]) -> pb::TaskSpec {
    pb::TaskSpec {
        name: name.into(),
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        estimate: Some(pb::Estimate { memory_fixed: 16 << 20, ..Default::default() }),
        ..Default::default()
    }
}

fn main() {
    let mut args = std::env::args_os().skip(1);
    let dir = PathBuf::from(args.next().expect("usage: demo_daemon DIR [SECS]"));
    let secs: u64 = args.next().and_then(|s| s.to_str()?.parse().ok()).unwrap_or(600);
    std::fs::create_dir_all(&dir).expect("state dir");
    let mut config = lardon_daemon::DaemonConfig::new(&dir);
    config.socket = Some(dir.join("lardon.sock"));
    let daemon = lardon_daemon::start_in_process(config).expect("daemon");
    let socket = daemon.socket().to_path_buf();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let mut client = lardon_proto::connect(&socket).await.expect("connect");
        for (name, argv, paused) in [
            ("render", &["sleep", "3600"][..], false),
            ("encode", &["sleep", "3600"][..], false),
            ("later", &["sleep", "3600"][..], true),
            ("broken", &["false"][..], false),
        ] {
            let req = pb::SubmitRequest { spec: Some(spec(name, argv)), paused, id_only: false };
            client.submit(req).await.expect("submit");
        }
    });
    println!("{}", socket.display());
    std::thread::sleep(Duration::from_secs(secs));
    daemon.shutdown().expect("shutdown");
}
