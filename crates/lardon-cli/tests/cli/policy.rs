//! `lardon policy` shows how each derived default follows from the host
//! (human and `--json`), and takes `max_load_ratio=off` and values above 1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{Daemon, lardon, stderr, stdout};

fn entry(json: &serde_json::Value, key: &str) -> serde_json::Value {
    json["entries"].as_array().unwrap().iter().find(|e| e["key"] == key).cloned().unwrap()
}

#[test]
fn derived_defaults_are_shown_with_their_rule_and_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _d = Daemon::start(dir, "16GiB,8");
    let o = lardon(dir, &["policy"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let line = |key: &str| text.lines().find(|l| l.starts_with(key)).unwrap_or_default().to_owned();
    assert!(
        line("memory_reserve").contains("1GiB")
            && line("memory_reserve").contains(
                "(default: total/16 within 512.0 MiB–4.0 GiB, at most total/4: 1.0 GiB of 16.0 GiB)"
            ),
        "{text}"
    );
    assert!(line("memory_caution").contains("1536MiB"), "{text}");
    // 8 CPUs: the reserve is 8 / 8 = 1, so the pool is 7 (the rule is
    // printed with its figures).
    assert!(line("max_load_ratio").contains("0.9 × the 7-CPU compute pool"), "{text}");
    assert!(line("cpu_reserve").contains("(default: logical CPUs / 8, at most 4"), "{text}");
    assert!(line("cpu_reserve").contains(": 1 of 8)"), "{text}");

    let o = lardon(dir, &["policy", "--set", "max_load_ratio=off", "--set", "memory_reserve=8GiB", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let reserve = entry(&json, "memory_reserve");
    assert_eq!((reserve["value"].as_str(), reserve["overridden"].as_bool()), (Some("8GiB"), Some(true)));
    assert_eq!(reserve["default"], "1GiB");
    assert!(reserve["default_rule"].as_str().unwrap().contains("1.0 GiB of 16.0 GiB"), "{reserve}");
    // The floor and the caution band moved with the reserve (no memory_caution=none needed).
    assert_eq!(entry(&json, "emergency_floor")["value"], "8GiB");
    assert_eq!(entry(&json, "memory_caution")["value"], "8704MiB");
    assert_eq!(entry(&json, "max_load_ratio")["value"], "off");
    let o = lardon(dir, &["policy", "--set", "max_load_ratio=2.5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).lines().any(|l| l.starts_with("max_load_ratio") && l.contains("2.5")),
        "{}",
        stdout(&o)
    );
}
