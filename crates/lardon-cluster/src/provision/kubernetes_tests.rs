//! The Kubernetes provider's Job and its parsers, on `kubectl` outputs
//! recorded from a real kube-apiserver 1.20 and controller manager (built
//! by scripts/k8s-check.sh; names kept, timestamps and uids as recorded).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::*;

/// `kubectl get jobs,pods -l app.kubernetes.io/managed-by=lardon-broker -o
/// json` with three Jobs: `…-a` whose pod runs, `…-b` whose pod is pending
/// (no node), `…-c` that failed (its deadline passed).
const LISTED: &str = include_str!("fixtures/kubectl-1.20-jobs-pods.json");

/// When the tests' Jobs are created, Unix seconds.
const SUBMITTED: u64 = 1_700_000_000;

fn launch() -> AgentLaunch {
    AgentLaunch {
        program: PathBuf::from("lardon"),
        broker: "lardon-broker.lardon.svc:7700".into(),
        join_token_file: Some(PathBuf::from("/etc/lardon/token/token")),
        tls_dir: Some(PathBuf::from("/etc/lardon/tls")),
        tls_name: Some("agent".into()),
        idle_exit: Duration::from_secs(300),
        heartbeat: None,
    }
}

fn shape(name: &str, nodes: u32) -> Shape {
    Shape {
        name: name.into(),
        memory: 8 << 30,
        cpu_millis: 4000,
        nodes,
        walltime: Duration::from_secs(3600),
        capabilities: vec![crate::Capability::parse("gcc@12:x86_64-linux-gnu").unwrap()],
    }
}

fn config() -> KubernetesConfig {
    KubernetesConfig {
        shapes: vec![shape("gcc", 1)],
        launch: launch(),
        image: "lardon:0.1.0".into(),
        namespace: "lardon".into(),
        tls_secret: Some("lardon-agent-tls".into()),
        token_secret: Some("lardon-join-token".into()),
        grace: Duration::from_secs(60),
        kubectl: PathBuf::from("kubectl"),
        kubeconfig: None,
    }
}

fn ids(list: &[&str]) -> Vec<AllocationId> {
    list.iter().map(|s| AllocationId((*s).to_owned())).collect()
}

#[test]
fn the_job_is_one_never_restarted_pod_sized_as_the_shape() {
    let c = config();
    let job = job_manifest(&c.shapes[0], &c, SUBMITTED).unwrap();
    assert_eq!(job["apiVersion"], "batch/v1");
    assert_eq!(job["kind"], "Job");
    assert_eq!(job["metadata"]["generateName"], "lardon-agent-gcc-");
    assert_eq!(job["metadata"]["namespace"], "lardon");
    assert_eq!(job["metadata"]["labels"][MANAGED_BY.0], MANAGED_BY.1);
    assert_eq!(job["metadata"]["labels"][SHAPE_LABEL], "gcc");
    let spec = &job["spec"];
    assert_eq!(spec["backoffLimit"], 0, "a failed agent is a failed allocation, not retried by Kubernetes");
    assert_eq!(spec["activeDeadlineSeconds"], 3600, "the walltime");
    // The agent is told the same end, counted from the submission (no
    // later than Kubernetes' deadline, which counts from the Job's start),
    // so walltime-aware dispatch works in pods.
    let args = spec["template"]["spec"]["containers"][0]["args"].as_array().unwrap();
    let at = args.iter().position(|a| a == "--ends-at").expect("--ends-at in the agent's args");
    assert_eq!(args[at + 1], (SUBMITTED + 3600).to_string());
    let seconds = Duration::from_secs(5400);
    let mut longer = c.clone();
    longer.shapes[0].walltime = seconds;
    let job = job_manifest(&longer.shapes[0], &longer, SUBMITTED).unwrap();
    let args = job["spec"]["template"]["spec"]["containers"][0]["args"].as_array().unwrap();
    assert_eq!(job["spec"]["activeDeadlineSeconds"], 5400);
    assert_eq!(args[at + 1], (SUBMITTED + 5400).to_string(), "the end follows the shape's walltime");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["terminationGracePeriodSeconds"], 60);
    assert_eq!(
        spec["template"]["metadata"]["labels"][MANAGED_BY.0], MANAGED_BY.1,
        "the pods are selected too"
    );
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "lardon:0.1.0");
    let want = serde_json::json!({"cpu": "4000m", "memory": (8u64 << 30).to_string()});
    assert_eq!(container["resources"]["requests"], want);
    assert_eq!(container["resources"]["limits"], want, "requests = limits: the agent's budget is the shape");
}

#[test]
fn the_pod_runs_the_agent_with_the_jobs_name_as_its_id() {
    let c = config();
    let job = job_manifest(&c.shapes[0], &c, SUBMITTED).unwrap();
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["command"], serde_json::json!(["lardon"]));
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let mut want = launch().argv(&c.shapes[0].capabilities);
    want.remove(0);
    want.extend(["--ends-at", "1700003600", "--id", "$(LARDON_JOB_NAME)"].map(str::to_owned));
    assert_eq!(args, want);
    assert_eq!(
        container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.labels['job-name']",
        "the Job controller labels each pod with its Job's name"
    );
    // The secrets are mounted where the agent's flags look.
    let mounts: Vec<(&str, &str)> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["mountPath"].as_str().unwrap()))
        .collect();
    assert_eq!(mounts, [("tls", "/etc/lardon/tls"), ("token", "/etc/lardon/token")]);
    let secrets: Vec<&str> = job["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["secret"]["secretName"].as_str().unwrap())
        .collect();
    assert_eq!(secrets, ["lardon-agent-tls", "lardon-join-token"]);
}

#[test]
fn configurations_that_cannot_become_a_job_are_refused_naming_why() {
    let refused = |c: KubernetesConfig| match KubernetesProvider::new(c) {
        Err(KubernetesError::BadConfig(why)) => why,
        other => panic!("expected BadConfig, got {other:?}"),
    };
    let mut c = config();
    c.shapes = vec![shape("gcc", 2)];
    assert!(refused(c).contains("a pod is one node"));
    let mut c = config();
    c.shapes = vec![shape("GCC_big", 1)];
    assert!(refused(c).contains("shape GCC_big"));
    let mut c = config();
    c.tls_secret = None;
    assert!(refused(c).contains("no tls_secret"));
    let mut c = config();
    c.token_secret = None;
    assert!(refused(c).contains("no token_secret"));
    let mut c = config();
    c.namespace = "Lardon".into();
    assert!(refused(c).starts_with("namespace:"));
    let mut c = config();
    c.image = " ".into();
    assert!(refused(c).starts_with("image:"));
    let mut c = config();
    c.shapes[0].memory = 0;
    assert!(refused(c).contains("requests and limits"));
    assert!(KubernetesProvider::new(config()).is_ok());
}

#[test]
fn created_names_are_parsed_strictly() {
    assert_eq!(
        parse_created("job.batch/lardon-agent-gcc-x7k2p\n").unwrap(),
        AllocationId("lardon-agent-gcc-x7k2p".into())
    );
    for bad in ["", "pod/lardon-agent-gcc-x7k2p", "job.batch/", "job.batch/Upper", "error: something"] {
        assert!(matches!(parse_created(bad), Err(KubernetesError::BadName(_))), "{bad:?}");
    }
}

#[test]
fn status_reads_jobs_and_their_pods_from_one_listing() {
    let names: Vec<String> = {
        let v: Value = serde_json::from_str(LISTED).unwrap();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["kind"] == "Job")
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let running = names.iter().find(|n| n.ends_with("-run")).expect("a Job whose pod runs");
    let pending = names.iter().find(|n| n.ends_with("-pend")).expect("a Job whose pod is pending");
    let failed = names.iter().find(|n| n.ends_with("-fail")).expect("a failed Job");
    let asked = ids(&[running, pending, failed, "lardon-agent-gcc-gone1"]);
    let got = parse_status(LISTED, &asked).unwrap();
    assert_eq!(
        got.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
        [AllocState::Running, AllocState::Queued, AllocState::Ended, AllocState::Ended],
        "{got:?}"
    );
}

#[test]
fn status_refuses_what_is_not_a_list() {
    for bad in ["", "{}", "[1,2]", "{\"items\": [{\"kind\": \"Job\"}]}"] {
        assert!(matches!(parse_status(bad, &ids(&["x"])), Err(KubernetesError::BadStatus(_))), "{bad:?}");
    }
    // An empty list: every allocation asked about is over.
    let got = parse_status("{\"kind\":\"List\",\"items\":[]}", &ids(&["x"])).unwrap();
    assert_eq!(got, [(AllocationId("x".into()), AllocState::Ended)]);
}
