//! The deployment files are true of this build: every Kubernetes manifest
//! in `deploy/kubernetes/` parses, names what it must, runs this version's
//! image with a command line the CLI accepts, and points agents and KEDA
//! at a Service that exists with that port; the systemd units in
//! `contrib/systemd/` run command lines the CLI accepts.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml_ng::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every document of every manifest, with its file name.
fn documents() -> Vec<(String, Value)> {
    let dir = repo().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    let mut docs = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        for d in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = Value::deserialize(d).unwrap_or_else(|e| panic!("{name}: {e}"));
            if !v.is_null() {
                docs.push((name.clone(), v));
            }
        }
    }
    docs
}

use serde::Deserialize as _;

fn s<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(*k)).and_then(Value::as_str)
}

/// The pod spec inside a workload, if it is one.
fn pod_spec(v: &Value) -> Option<&Value> {
    match s(v, &["kind"])? {
        "Deployment" | "DaemonSet" | "Job" => v.get("spec")?.get("template")?.get("spec"),
        "ScaledJob" => v.get("spec")?.get("jobTargetRef")?.get("template")?.get("spec"),
        _ => None,
    }
}

fn flag<'a>(args: &'a [String], name: &str) -> Vec<&'a str> {
    let prefix = format!("--{name}=");
    args.iter().filter_map(|a| a.strip_prefix(&prefix)).collect()
}

#[test]
fn manifests_are_consistent_with_each_other_and_with_the_cli() {
    let docs = documents();
    let image = format!("lardon:{}", env!("CARGO_PKG_VERSION"));
    // Services: "NAME.NAMESPACE.svc:PORT" each one answers on.
    let mut endpoints = BTreeMap::new();
    let mut deployments = Vec::new();
    for (file, d) in &docs {
        let kind = s(d, &["kind"]).unwrap_or_else(|| panic!("{file}: no kind"));
        assert!(s(d, &["apiVersion"]).is_some(), "{file}: {kind} has no apiVersion");
        let name = s(d, &["metadata", "name"]).unwrap_or_else(|| panic!("{file}: {kind} has no name"));
        if kind != "Namespace" {
            assert_eq!(s(d, &["metadata", "namespace"]), Some("lardon"), "{file}: {kind} {name}");
        }
        if kind == "Service" {
            for p in d["spec"]["ports"].as_sequence().unwrap() {
                endpoints.insert(
                    format!("{name}.lardon.svc:{}", p["port"].as_u64().unwrap()),
                    s(p, &["name"]).unwrap().to_owned(),
                );
            }
        }
        if kind == "Deployment" {
            deployments.push(name.to_owned());
        }
    }
    // What the broker is told KEDA scales (tasks of these wait for an agent).
    let mut scaled = Vec::new();
    for (_, d) in &docs {
        let Some(spec) = pod_spec(d) else { continue };
        for c in spec["containers"].as_sequence().unwrap() {
            let args: Vec<String> = serde_yaml_ng::from_value(c["args"].clone()).unwrap();
            if args.first().map(String::as_str) == Some("broker") {
                scaled.extend(flag(&args, "scaled-capability").into_iter().map(|c| {
                    lardon_cluster::Capability::parse(c).unwrap_or_else(|e| panic!("broker: {e}")).key()
                }));
            }
        }
    }
    let mut checked = 0;
    for (file, d) in &docs {
        let Some(spec) = pod_spec(d) else { continue };
        for c in spec["containers"].as_sequence().unwrap() {
            let what = format!("{file}: container {}", s(c, &["name"]).unwrap_or("?"));
            assert_eq!(s(c, &["image"]), Some(image.as_str()), "{what}: this version's image");
            let command: Vec<String> = serde_yaml_ng::from_value(c["command"].clone()).unwrap();
            let args: Vec<String> = serde_yaml_ng::from_value(c["args"].clone()).unwrap();
            assert_eq!(command, ["lardon"], "{what}");
            lardon_cli::check_args(command.iter().chain(&args)).unwrap_or_else(|e| panic!("{what}: {e}"));
            for broker in flag(&args, "broker") {
                assert_eq!(
                    endpoints.get(broker).map(String::as_str),
                    Some("grpc"),
                    "{what}: --broker {broker} is no Service's grpc port"
                );
            }
            // A Job that Kubernetes ends at a deadline tells its agent
            // (walltime-aware dispatch), as the kubernetes provider's do.
            let deadline = match s(d, &["kind"]) {
                Some("Job") => d["spec"]["activeDeadlineSeconds"].as_u64(),
                Some("ScaledJob") => d["spec"]["jobTargetRef"]["activeDeadlineSeconds"].as_u64(),
                _ => None,
            };
            if let Some(deadline) = deadline {
                let told = flag(&args, "walltime").len() + flag(&args, "ends-at").len();
                assert_eq!(told, 1, "{what}: ends at {deadline} s but its agent is not told (--walltime)");
            }
            checked += 1;
        }
        if let Some(triggers) = d.get("spec").and_then(|s| s.get("triggers")).and_then(Value::as_sequence) {
            for t in triggers {
                let addr = s(t, &["metadata", "scalerAddress"]).unwrap();
                assert_eq!(
                    endpoints.get(addr).map(String::as_str),
                    Some("keda"),
                    "{file}: scalerAddress {addr}"
                );
                let cap = s(t, &["metadata", "capability"]).unwrap();
                let cap = lardon_cluster::Capability::parse(cap).unwrap_or_else(|e| panic!("{file}: {e}"));
                // Without it the broker answers "no executor" while no agent
                // runs, so KEDA would never see demand to scale from zero.
                assert!(
                    scaled.contains(&cap.key()),
                    "{file}: KEDA scales {} but the broker has no --scaled-capability for it",
                    cap.key()
                );
            }
        }
        if s(d, &["kind"]) == Some("ScaledObject") {
            let target = s(d, &["spec", "scaleTargetRef", "name"]).unwrap();
            assert!(
                deployments.iter().any(|n| n == target),
                "{file}: scales {target}, which no manifest defines"
            );
        }
    }
    assert!(checked >= 4, "broker, two agent workloads and the ScaledJob: {checked} containers checked");
}

#[test]
fn systemd_units_run_command_lines_the_cli_accepts() {
    for unit in ["lardon.service", "lardon-user.service", "lardon-broker.service", "lardon-agent.service"] {
        let path = repo().join("contrib/systemd").join(unit);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let exec = text
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .unwrap_or_else(|| panic!("{unit}: no ExecStart"));
        // systemd specifiers stand for host names here.
        let exec = exec.replace("%l", "host").replace("%H", "host.example");
        let mut words = exec.split_whitespace();
        let bin = words.next().unwrap();
        assert!(bin.ends_with("/lardon"), "{unit}: runs {bin}");
        lardon_cli::check_args(std::iter::once("lardon").chain(words))
            .unwrap_or_else(|e| panic!("{unit}: {e}"));
    }
}
