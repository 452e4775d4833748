//! `lardon cc` with real processes on loopback: a `lardon broker` (with
//! its cache), a `lardon agent` declaring this machine's gcc, and real gcc
//! compiles. A compile through the cluster gives the object a local
//! compile gives (byte for byte, without -g) and the linked program runs; the same
//! compile again is answered from the cache with no agent left; linking
//! runs here; no broker means a local compile. Each run says where it ran
//! (`--verbose`), which is what the assertions read.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::support;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::procs::{Proc, agent_args, free_port, logs};

const WAIT: Duration = Duration::from_secs(60);

/// This machine's gcc as a capability, `gcc@VERSION:TARGET`; fails the
/// test (with the reason) when there is no gcc.
fn gcc_capability() -> String {
    let ask = |flag: &str| {
        let out = Command::new("gcc").arg(flag).output().expect("this test needs gcc on PATH");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    format!("gcc@{}:{}", ask("-dumpversion"), ask("-dumpmachine"))
}

/// `lardon cc ARGS…` in `dir` with `broker` (none: LARDON_BROKER unset).
fn cc(dir: &Path, broker: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(support::bin());
    cmd.current_dir(dir).env_remove("LARDON_BROKER").env("LARDON_CC_VERBOSE", "1").arg("cc").args(args);
    if let Some(b) = broker {
        cmd.env("LARDON_BROKER", b);
    }
    cmd.output().unwrap()
}

fn agents(addr: &str) -> usize {
    let out = Command::new(support::bin())
        .args(["cluster", "status", "--json", "--broker", addr])
        .output()
        .unwrap();
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .and_then(|v| v["agents"].as_array().map(Vec::len))
        .unwrap_or(usize::MAX)
}

fn write_program(dir: &Path) {
    std::fs::write(dir.join("fib.h"), "#define LIMIT 25\nint fib(int n);\n").unwrap();
    std::fs::write(
        dir.join("main.c"),
        "#include <stdio.h>\n#include \"fib.h\"\nint main(void) { printf(\"%d\\n\", fib(LIMIT)); return 0; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("fib.c"),
        "#include \"fib.h\"\nint fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n",
    )
    .unwrap();
}

#[test]
fn compiles_go_through_the_cluster_are_cached_and_everything_else_runs_here() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let src = dir.join("src");
    std::fs::create_dir(&src).unwrap();
    write_program(&src);
    let addr = free_port();
    let broker = Proc::start(dir, "broker", &["broker", "--listen", &addr, "--heartbeat", "1s"]);
    let work = dir.join("work");
    let cap = gcc_capability();
    let mut agent = Proc::start(
        dir,
        "agent",
        &[agent_args(&addr, "a1", &cap, "2"), vec!["--work-dir", work.to_str().unwrap()]].concat(),
    );
    support::wait_until("the agent to connect", WAIT, || agents(&addr) == 1);
    let ctx = |agent: &Proc| logs(&[&broker, agent]);

    // Through the cluster: both objects, `-o` given and implied.
    let out = cc(&src, Some(&addr), &["gcc", "-O2", "-c", "main.c", "-o", "main.o"]);
    assert!(out.status.success(), "{}{}", support::stderr(&out), ctx(&agent));
    assert!(
        support::stderr(&out).contains("main.c compiled through the broker"),
        "{}",
        support::stderr(&out)
    );
    let out = cc(&src, Some(&addr), &["gcc", "-O2", "-g", "-c", "fib.c"]);
    assert!(
        support::stderr(&out).contains("fib.c compiled through the broker"),
        "{}{}",
        support::stderr(&out),
        ctx(&agent)
    );
    // Two compiles at once (as `make -j2`): each is its own submitter.
    let spawn = |file: &str| {
        let mut cmd = Command::new(support::bin());
        cmd.current_dir(&src).env("LARDON_BROKER", &addr).env("LARDON_CC_VERBOSE", "1");
        cmd.args(["cc", "gcc", "-c", file, "-o", &format!("{file}.twin.o")]);
        cmd.stderr(std::process::Stdio::piped()).spawn().unwrap()
    };
    let mut twins = [spawn("main.c"), spawn("fib.c")];
    support::wait_until("both concurrent compiles to end", WAIT, || {
        twins.iter_mut().all(|c| c.try_wait().unwrap().is_some())
    });
    for twin in twins {
        let out = twin.wait_with_output().unwrap();
        assert!(support::stderr(&out).contains("compiled through the broker"), "{}", support::stderr(&out));
    }
    // The same object a local compile makes (without -g: with it, gcc's
    // line tables differ between compiling the source and its
    // preprocessed text, though the code is the same).
    let local = Command::new("gcc").current_dir(&src).args(["-O2", "-c", "main.c", "-o", "local.o"]).status();
    assert!(local.unwrap().success());
    assert!(
        std::fs::read(src.join("main.o")).unwrap() == std::fs::read(src.join("local.o")).unwrap(),
        "the remote object differs from the local one"
    );
    // Linking runs here; the program runs.
    let out = cc(&src, Some(&addr), &["gcc", "main.o", "fib.o", "-o", "fib"]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    assert!(
        support::stderr(&out).contains("running locally: not a compile (no -c)"),
        "{}",
        support::stderr(&out)
    );
    let run = Command::new(src.join("fib")).output().unwrap();
    assert_eq!(support::stdout(&run), "75025\n");
    // A compile error is the compiler's answer, from the agent.
    std::fs::write(src.join("bad.c"), "int bad(void) { return nope; }\n").unwrap();
    let out = cc(&src, Some(&addr), &["gcc", "-c", "bad.c"]);
    assert_eq!(out.status.code(), Some(1), "{}", support::stderr(&out));
    assert!(
        support::stderr(&out).contains("'nope' undeclared")
            || support::stderr(&out).contains("‘nope’ undeclared")
    );
    assert!(!src.join("bad.o").exists());
    let left: Vec<_> = std::fs::read_dir(work.join("a1")).unwrap().collect();
    assert!(left.is_empty(), "task directories left behind: {left:?}");

    // No agent any more: the same compile is a cache hit.
    agent.kill9();
    support::wait_until("the agent to be gone", WAIT, || agents(&addr) == 0);
    std::fs::remove_file(src.join("main.o")).unwrap();
    let out = cc(&src, Some(&addr), &["gcc", "-O2", "-c", "main.c", "-o", "main.o"]);
    assert!(
        support::stderr(&out).contains("main.c compiled through the broker"),
        "{}{}",
        support::stderr(&out),
        logs(&[&broker])
    );
    assert!(std::fs::read(src.join("main.o")).unwrap() == std::fs::read(src.join("local.o")).unwrap());
    // A changed header changes the preprocessed source: not in the cache,
    // no agent, so it compiles here.
    std::fs::write(src.join("fib.h"), "#define LIMIT 20\nint fib(int n);\n").unwrap();
    let out = cc(&src, Some(&addr), &["gcc", "-O2", "-c", "main.c", "-o", "main.o"]);
    assert!(out.status.success());
    assert!(
        support::stderr(&out).contains("running locally: no agent runs gcc@"),
        "{}",
        support::stderr(&out)
    );

    // No broker at all: local.
    std::fs::remove_file(src.join("fib.o")).unwrap();
    let out = cc(&src, Some(&free_port()), &["gcc", "-c", "fib.c"]);
    assert!(out.status.success() && src.join("fib.o").exists(), "{}", support::stderr(&out));
    assert!(
        support::stderr(&out).contains("running locally: cannot reach the broker"),
        "{}",
        support::stderr(&out)
    );
    let out = cc(&src, None, &["--", "gcc", "-c", "fib.c"]);
    assert!(support::stderr(&out).contains("running locally: no broker"), "{}", support::stderr(&out));
}
