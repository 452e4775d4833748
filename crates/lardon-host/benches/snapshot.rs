//! Cost of one host sample: `cargo bench -p lardon-host --bench snapshot`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use lardon::Probe;
use lardon_host::HostProbe;

fn main() {
    divan::main();
}

#[divan::bench]
fn host_snapshot(bencher: divan::Bencher) {
    let probe = HostProbe::new().expect("host probe");
    bencher.bench_local(|| divan::black_box(probe.snapshot().expect("snapshot")));
}
