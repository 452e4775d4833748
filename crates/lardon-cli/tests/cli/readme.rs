//! The README is true of this binary: its install lines work in a fresh
//! home directory, its `console` blocks run as shown against a real daemon
//! (trycmd: each `$ ` line is run and its output compared, `[..]` matching
//! what changes from run to run), and what it says of the systemd unit is
//! what the unit holds. The README's library example is a doctest of the
//! `lardon` crate (`ReadmeDoctests`).
//!
//! Break it to watch it fail: drop a `mkdir -p` from an install line,
//! change an output line of a console block, or write `Delegate=yes` in
//! the README again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use crate::support::{bin, repo_root};

fn readme() -> String {
    std::fs::read_to_string(repo_root().join("README.md")).unwrap()
}

/// The lines of the first fenced block after `heading`.
fn block_after(text: &str, heading: &str) -> Vec<String> {
    let from = text.find(heading).unwrap_or_else(|| panic!("README has no {heading:?}"));
    let rest = &text[from..];
    let open = rest.find("```").unwrap();
    let body = &rest[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let close = body.find("```").unwrap();
    body[..close].lines().map(str::to_owned).collect()
}

#[test]
fn the_install_block_writes_every_completion_file_in_a_fresh_home() {
    let lines: Vec<String> =
        block_after(&readme(), "## Install").into_iter().filter(|l| l.contains("completions")).collect();
    assert_eq!(lines.len(), 3, "bash, zsh and fish: {lines:?}");
    let home = tempfile::tempdir().unwrap();
    let path = format!("{}:{}", bin().parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    for line in &lines {
        let line = line.split(" # ").next().unwrap();
        let o = Command::new("sh")
            .arg("-c")
            .arg(line)
            .env("HOME", home.path())
            .env("PATH", &path)
            .output()
            .unwrap();
        assert!(o.status.success(), "{line}: {}", String::from_utf8_lossy(&o.stderr));
    }
    for (file, shell_word) in [
        (".local/share/bash-completion/completions/lardon", "complete"),
        (".zfunc/_lardon", "#compdef lardon"),
        (".config/fish/completions/lardon.fish", "complete -c lardon"),
    ] {
        let text = std::fs::read_to_string(home.path().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(text.contains(shell_word), "{file} is not a completion script");
        assert!(text.contains("submit"), "{file} does not complete `submit`");
    }
}

#[test]
fn what_the_readme_says_of_the_systemd_unit_is_what_it_holds() {
    let unit = std::fs::read_to_string(repo_root().join("contrib/systemd/lardon.service")).unwrap();
    let delegate = unit.lines().find(|l| l.starts_with("Delegate=")).expect("lardon.service delegates");
    let text = readme();
    let from = text.find("* `lardon.service`").expect("README has a `lardon.service` bullet");
    let bullet = &text[from..];
    let bullet = &bullet[..bullet[2..].find("\n* ").map_or(bullet.len(), |i| i + 2)];
    let bullet = bullet.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        bullet.contains(&format!("`{delegate}`")),
        "the README's lardon.service bullet does not quote the unit's `{delegate}`: {bullet}"
    );
}

#[test]
fn the_readme_console_blocks_print_what_they_show() {
    let tmp = tempfile::tempdir().unwrap();
    let _daemon = crate::support::Daemon::start(tmp.path(), "16GiB,8");
    trycmd::TestCases::new()
        .register_bin("lardon", bin())
        .env("LARDON_STATE_DIR", tmp.path().to_str().unwrap())
        .timeout(std::time::Duration::from_secs(60))
        .case(repo_root().join("README.md"));
}
