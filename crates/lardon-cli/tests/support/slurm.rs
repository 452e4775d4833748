//! What every real-Slurm test checks first.

use std::process::Command;

/// Fails (never skips) unless a Slurm answers with idle or busy nodes.
pub(crate) fn require_slurm() {
    let how = "start one with `eval \"$(scripts/slurm-up.sh /tmp/lardon-slurm | tail -n 1)\"` \
               (what .ci/run does before the tests)";
    let conf = std::env::var("SLURM_CONF").unwrap_or_else(|_| {
        panic!("SLURM_CONF is not set: the slurm-tests feature needs a running Slurm; {how}")
    });
    let o = Command::new("sinfo")
        .args(["-h", "-o", "%T"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run sinfo ({e}): Slurm is not installed; {how}"));
    let states = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && states.lines().any(|l| matches!(l.trim(), "idle" | "mixed" | "allocated")),
        "Slurm (SLURM_CONF={conf}) has no usable node (sinfo: {} {}); {how}",
        states.trim(),
        String::from_utf8_lossy(&o.stderr).trim()
    );
}
