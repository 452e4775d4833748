//! The `kubernetes` provider (docs/DESIGN.md §14): each allocation is one
//! `batch/v1` Job whose single pod runs `lardon agent`, dialing back to the
//! broker and exiting after its idle time, which completes the Job. The
//! pod's requests equal its limits (the shape's memory and CPUs), so the
//! agent's budget, read from its cgroup, is the shape; the Job's
//! `activeDeadlineSeconds` is the shape's walltime, and the agent is told
//! the same end (`--ends-at`: the submission's time plus the walltime,
//! never later than the deadline Kubernetes counts from the Job's start),
//! so walltime-aware dispatch works on pods as on Slurm jobs.
//!
//! It talks to the API server through `kubectl` (the way the `slurm`
//! provider uses `sbatch`), so the kubeconfig, contexts and credentials are
//! the user's usual ones, and it uses only long-stable kinds (`batch/v1`
//! Job, `v1` Pod):
//! * **Submit**: `kubectl create -f - -o name` with the Job as JSON, named
//!   by `generateName`; the answer is `job.batch/NAME`.
//! * **Dry run**: the same with `--dry-run=server`.
//! * **Status**: one `kubectl get jobs,pods -l <managed-by label> -o json`
//!   per refresh. A Job that completed or failed is over; one with a
//!   running pod is running; any other is queued (its pod is pending or
//!   not yet created); a Job the server no longer lists is over.
//! * **Cancel**: `kubectl delete job NAME --wait=false` (its pod goes
//!   with it).
//!
//! A pod is one node: a multi-node shape is refused when the provider is
//! made (ask for several allocations instead).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use thiserror::Error;

use super::{AgentLaunch, AllocState, AllocationId, Provider, ProviderError, Shape};

/// The label every Job and pod of this provider carries, with its value.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "lardon-broker");
/// The label naming the shape an allocation was asked with.
pub const SHAPE_LABEL: &str = "lardon.io/shape";

/// How the `kubernetes` provider creates Jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesConfig {
    /// The shapes it may ask for (one node each).
    pub shapes: Vec<Shape>,
    /// The agent each pod runs; `program` is the binary's path inside the
    /// image (`lardon` when it is on the image's `PATH`). Its TLS
    /// directory and join-token file are mounted from `tls_secret` and
    /// `token_secret`.
    pub launch: AgentLaunch,
    /// The container image holding `lardon`.
    pub image: String,
    /// The namespace Jobs are created in.
    pub namespace: String,
    /// The Secret mounted at `launch.tls_dir` (required when it is set).
    pub tls_secret: Option<String>,
    /// The Secret mounted at the directory of `launch.join_token_file`
    /// (required when it is set); the file's name is its key.
    pub token_secret: Option<String>,
    /// `terminationGracePeriodSeconds`: how long the agent may drain after
    /// SIGTERM.
    pub grace: Duration,
    /// The `kubectl` to run.
    pub kubectl: PathBuf,
    /// `--kubeconfig` for every call (`None`: kubectl's own default).
    pub kubeconfig: Option<PathBuf>,
}

/// What went wrong talking to Kubernetes, or in the configuration.
#[derive(Debug, Error)]
pub enum KubernetesError {
    /// `kubectl` could not run, or failed.
    #[error(transparent)]
    Command(#[from] super::command::CommandError),
    /// `kubectl create -o name` answered something that is not a Job name.
    #[error("kubectl create -o name: expected job.batch/NAME, got `{0}`")]
    BadName(String),
    /// `kubectl get -o json` answered something unexpected.
    #[error("kubectl get -o json: {0}")]
    BadStatus(String),
    /// A configuration that cannot become a Job.
    #[error("{0}")]
    BadConfig(String),
}

/// The `kubernetes` [`Provider`].
#[derive(Debug)]
pub struct KubernetesProvider {
    config: KubernetesConfig,
}

impl KubernetesProvider {
    /// A provider over `config`; every shape's Job is built now, so a bad
    /// configuration fails here and not at the first submission.
    ///
    /// # Errors
    /// [`KubernetesError::BadConfig`] naming what is wrong.
    pub fn new(config: KubernetesConfig) -> Result<Self, KubernetesError> {
        if config.image.trim().is_empty() {
            return Err(KubernetesError::BadConfig("image: empty".into()));
        }
        if !is_dns_label(&config.namespace) {
            return Err(KubernetesError::BadConfig(format!(
                "namespace: `{}` is not a DNS label (lower-case letters, digits and '-', at most 63)",
                config.namespace
            )));
        }
        for shape in &config.shapes {
            job_manifest(shape, &config, unix_now())?;
        }
        Ok(KubernetesProvider { config })
    }

    fn shape(&self, name: &str) -> Result<&Shape, ProviderError> {
        self.config
            .shapes
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| err(format!("no shape named {name}")))
    }

    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, KubernetesError> {
        let mut all: Vec<String> = Vec::new();
        if let Some(k) = &self.config.kubeconfig {
            all.push(format!("--kubeconfig={}", k.display()));
        }
        all.push(format!("--namespace={}", self.config.namespace));
        all.extend(args.iter().map(|a| (*a).to_owned()));
        Ok(super::command::run(&self.config.kubectl.to_string_lossy(), &all, stdin)?)
    }

    fn manifest(&self, shape: &Shape) -> Result<String, ProviderError> {
        let shape = self.shape(&shape.name)?;
        let job = job_manifest(shape, &self.config, unix_now()).map_err(|e| err(e.to_string()))?;
        Ok(job.to_string())
    }
}

/// The wall clock, Unix seconds.
fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn err(message: String) -> ProviderError {
    ProviderError { provider: "kubernetes".into(), message }
}

/// An RFC 1123 label, as namespaces and name parts must be.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The Job that runs one allocation of `shape`: one pod, never restarted
/// (a failed agent is a failed allocation, which the Provisioner counts),
/// requests equal to limits, the agent's id taken from the Job's name so
/// the broker can tell the allocation started. Created at
/// `submitted_unix_s`, its pod's agent is told its allocation ends
/// (`--ends-at`) a walltime later: Kubernetes counts
/// `activeDeadlineSeconds` from the Job's start, which is no earlier, so
/// the agent never takes a task that would outlive its pod (the pod's
/// wait for a node only makes the agent's end early, never late).
///
/// # Errors
/// [`KubernetesError::BadConfig`] for a shape that cannot be one pod, or a
/// TLS directory or token file without its Secret.
pub fn job_manifest(
    shape: &Shape,
    config: &KubernetesConfig,
    submitted_unix_s: u64,
) -> Result<Value, KubernetesError> {
    let bad = |why: String| KubernetesError::BadConfig(format!("shape {}: {why}", shape.name));
    if shape.nodes > 1 {
        return Err(bad(format!(
            "nodes = {}: a pod is one node; ask for several one-node allocations instead",
            shape.nodes
        )));
    }
    // generateName adds 5 characters; a Job's name must stay a DNS label
    // (63) so that its pods' `job-name` label is valid.
    let prefix = format!("lardon-agent-{}-", shape.name);
    if !is_dns_label(prefix.trim_end_matches('-')) || prefix.len() > 58 {
        return Err(bad("the name must be lower-case letters, digits and '-', at most 45 characters".into()));
    }
    if shape.memory == 0 || shape.cpu_millis == 0 {
        return Err(
            bad("memory and cpus must both be set: they become the pod's requests and limits".into()),
        );
    }
    let argv = config.launch.argv(&shape.capabilities);
    let (command, args) =
        argv.split_first().ok_or_else(|| bad("the agent's command line is empty".into()))?;
    let mut args: Vec<Value> = args.iter().map(|a| json!(a)).collect();
    let walltime = shape.walltime.as_secs().max(1);
    args.push(json!("--ends-at"));
    args.push(json!(submitted_unix_s.saturating_add(walltime).to_string()));
    // Kubernetes expands $(VAR) in args: the agent's id is its Job's name,
    // which the Job controller puts on the pod as the `job-name` label.
    args.push(json!("--id"));
    args.push(json!("$(LARDON_JOB_NAME)"));

    let mut mounts = Vec::new();
    let mut volumes = Vec::new();
    if let Some(dir) = &config.launch.tls_dir {
        let secret = config
            .tls_secret
            .as_deref()
            .ok_or_else(|| bad("the agent has a TLS directory but no tls_secret".into()))?;
        mounts.push(json!({"name": "tls", "mountPath": dir.to_string_lossy(), "readOnly": true}));
        volumes.push(json!({"name": "tls", "secret": {"secretName": secret, "defaultMode": 0o400}}));
    }
    if let Some(file) = &config.launch.join_token_file {
        let secret = config
            .token_secret
            .as_deref()
            .ok_or_else(|| bad("the agent has a join-token file but no token_secret".into()))?;
        let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).ok_or_else(|| {
            bad(format!(
                "join-token file {}: must be a path inside a directory the Secret is mounted on",
                file.display()
            ))
        })?;
        mounts.push(json!({"name": "token", "mountPath": dir.to_string_lossy(), "readOnly": true}));
        volumes.push(json!({"name": "token", "secret": {"secretName": secret, "defaultMode": 0o400}}));
    }
    let resources = json!({
        "cpu": format!("{}m", shape.cpu_millis),
        "memory": shape.memory.to_string(),
    });
    let labels = json!({MANAGED_BY.0: MANAGED_BY.1, SHAPE_LABEL: shape.name});
    Ok(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": prefix, "namespace": config.namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": walltime,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": config.grace.as_secs(),
                    "containers": [{
                        "name": "agent",
                        "image": config.image,
                        "command": [command],
                        "args": args,
                        "env": [{
                            "name": "LARDON_JOB_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['job-name']"}},
                        }],
                        "resources": {"requests": resources, "limits": resources},
                        "volumeMounts": mounts,
                    }],
                    "volumes": volumes,
                },
            },
        },
    }))
}

/// The Job's name from `kubectl create -o name` (`job.batch/NAME`).
///
/// # Errors
/// [`KubernetesError::BadName`] for anything else.
pub fn parse_created(stdout: &str) -> Result<AllocationId, KubernetesError> {
    let line = stdout.trim();
    match line.strip_prefix("job.batch/") {
        Some(name) if is_dns_label(name) => Ok(AllocationId(name.to_owned())),
        _ => Err(KubernetesError::BadName(line.to_owned())),
    }
}

/// The state of each of `ids` from one `kubectl get jobs,pods -o json`
/// (a `List` of Jobs and pods).
///
/// # Errors
/// [`KubernetesError::BadStatus`] when the text is not such a list.
pub fn parse_status(
    json_text: &str,
    ids: &[AllocationId],
) -> Result<Vec<(AllocationId, AllocState)>, KubernetesError> {
    let bad = |why: &str| KubernetesError::BadStatus(why.to_owned());
    let list: Value =
        serde_json::from_str(json_text).map_err(|e| KubernetesError::BadStatus(e.to_string()))?;
    let items = list.get("items").and_then(Value::as_array).ok_or_else(|| bad("no `items` list"))?;
    let mut jobs: BTreeMap<&str, AllocState> = BTreeMap::new();
    let mut running: BTreeMap<&str, bool> = BTreeMap::new();
    for item in items {
        let kind = item.get("kind").and_then(Value::as_str).unwrap_or_default();
        let meta = item.get("metadata").ok_or_else(|| bad("an item without metadata"))?;
        match kind {
            "Job" => {
                let name =
                    meta.get("name").and_then(Value::as_str).ok_or_else(|| bad("a Job without a name"))?;
                jobs.insert(name, job_state(item));
            }
            "Pod" => {
                let Some(job) = meta.pointer("/labels/job-name").and_then(Value::as_str) else { continue };
                let phase = item.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending");
                *running.entry(job).or_default() |= phase == "Running";
            }
            _ => {}
        }
    }
    Ok(ids
        .iter()
        .map(|id| {
            let state = match jobs.get(id.0.as_str()) {
                None | Some(AllocState::Ended) => AllocState::Ended,
                Some(_) if running.get(id.0.as_str()).copied().unwrap_or(false) => AllocState::Running,
                Some(_) => AllocState::Queued,
            };
            (id.clone(), state)
        })
        .collect())
}

/// A Job is over once a `Complete` or `Failed` condition is true, or a pod
/// of it succeeded or failed (it has one pod and no retries).
fn job_state(job: &Value) -> AllocState {
    let status = job.get("status");
    let count = |field: &str| status.and_then(|s| s.get(field)).and_then(Value::as_u64).unwrap_or(0);
    let finished = status.and_then(|s| s.get("conditions")).and_then(Value::as_array).is_some_and(|cs| {
        cs.iter().any(|c| {
            matches!(c.get("type").and_then(Value::as_str), Some("Complete" | "Failed"))
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    });
    if finished || count("succeeded") > 0 || count("failed") > 0 {
        AllocState::Ended
    } else {
        AllocState::Queued
    }
}

impl Provider for KubernetesProvider {
    fn name(&self) -> &str {
        "kubernetes"
    }

    fn shapes(&self) -> Vec<Shape> {
        self.config.shapes.clone()
    }

    fn dry_run(&mut self, shape: &Shape) -> Result<(), ProviderError> {
        let manifest = self.manifest(shape)?;
        self.kubectl(&["create", "--dry-run=server", "-o", "name", "-f", "-"], Some(&manifest))
            .map(drop)
            .map_err(|e| err(e.to_string()))
    }

    /// One `kubectl create` per allocation. When a later one fails after
    /// earlier ones were created, the created ids are returned (they are
    /// alive and must be tracked) and the failure is logged.
    fn submit(&mut self, shape: &Shape, count: u32) -> Result<Vec<AllocationId>, ProviderError> {
        let manifest = self.manifest(shape)?;
        let mut ids = Vec::new();
        for _ in 0..count {
            let created = self
                .kubectl(&["create", "-o", "name", "-f", "-"], Some(&manifest))
                .and_then(|out| parse_created(&out));
            match created {
                Ok(id) => ids.push(id),
                Err(e) if ids.is_empty() => return Err(err(e.to_string())),
                Err(e) => {
                    tracing::warn!("kubernetes: {} of {count} allocations created; then: {e}", ids.len());
                    break;
                }
            }
        }
        Ok(ids)
    }

    fn status(&mut self, ids: &[AllocationId]) -> Result<Vec<(AllocationId, AllocState)>, ProviderError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let selector = format!("--selector={}={}", MANAGED_BY.0, MANAGED_BY.1);
        let out = self
            .kubectl(&["get", "jobs,pods", &selector, "-o", "json"], None)
            .map_err(|e| err(e.to_string()))?;
        parse_status(&out, ids).map_err(|e| err(e.to_string()))
    }

    fn cancel(&mut self, id: &AllocationId) -> Result<(), ProviderError> {
        let name = format!("job/{}", id.0);
        self.kubectl(&["delete", &name, "--wait=false", "--ignore-not-found"], None)
            .map(drop)
            .map_err(|e| err(e.to_string()))
    }

    /// The agent's id is its Job's name (see [`job_manifest`]).
    fn agent_prefix(&self, id: &AllocationId) -> String {
        id.0.clone()
    }
}

#[cfg(test)]
#[path = "kubernetes_tests.rs"]
mod tests;
