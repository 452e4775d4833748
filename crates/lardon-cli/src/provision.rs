//! `lardon broker --provision FILE`: the provisioning TOML (docs/DESIGN.md
//! §14) turned into the broker's [`ProvisionLoop`]. Every field is checked
//! here, and a bad one is one line naming it (`shape[1].memory: …`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lardon_cluster::Capability;
use lardon_cluster::broker::ProvisionLoop;
use lardon_cluster::provision::{
    AgentLaunch, KubernetesConfig, KubernetesProvider, Limits, LocalProvider, Provider, Provisioner, Shape,
    SlurmConfig, SlurmProvider, SlurmShape, StaticProvider,
};
use serde::Deserialize;

use crate::parse::{parse_cpu, parse_duration_ms, parse_size};

/// A number or a text with units (`memory = "4GiB"` or `memory = 4294967296`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Quantity {
    Int(u64),
    Float(f64),
    Text(String),
}

impl Quantity {
    fn text(&self) -> String {
        match self {
            Quantity::Int(n) => n.to_string(),
            Quantity::Float(f) => f.to_string(),
            Quantity::Text(t) => t.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    provider: String,
    broker: Option<String>,
    idle_exit: Option<String>,
    grace: Option<String>,
    tick: Option<String>,
    task_duration: Option<String>,
    agent_program: Option<PathBuf>,
    join_token_file: Option<PathBuf>,
    tls_dir: Option<PathBuf>,
    tls_name: Option<String>,
    heartbeat: Option<String>,
    output_dir: Option<PathBuf>,
    job_prefix: Option<String>,
    #[serde(default)]
    limits: LimitsFile,
    #[serde(default, rename = "shape")]
    shapes: Vec<ShapeFile>,
    kubernetes: Option<KubernetesFile>,
}

/// The `[kubernetes]` table: where and how agent Jobs are created.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KubernetesFile {
    image: String,
    namespace: Option<String>,
    tls_secret: Option<String>,
    token_secret: Option<String>,
    kubectl: Option<PathBuf>,
    kubeconfig: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    max_allocations: Option<u32>,
    backlog: Option<u32>,
    min_utilization: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShapeFile {
    name: String,
    memory: Quantity,
    cpus: Quantity,
    walltime: String,
    nodes: Option<u32>,
    capabilities: Vec<String>,
    #[serde(default)]
    extras: Vec<String>,
}

/// The loop a provision file describes, checked.
#[derive(Debug)]
pub(crate) struct Provision {
    /// What the broker drives.
    pub(crate) config: ProvisionLoop,
}

fn duration(field: &str, text: Option<&str>, default: &str) -> Result<Duration, String> {
    let text = text.unwrap_or(default);
    parse_duration_ms(text).map(Duration::from_millis).map_err(|e| format!("{field}: {e}"))
}

/// Reads and checks `path`.
///
/// # Errors
/// One line naming the file and the field.
pub(crate) fn load(path: &Path) -> Result<Provision, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Checks a provision file's text.
///
/// # Errors
/// One line naming the field.
pub(crate) fn parse(text: &str) -> Result<Provision, String> {
    let file: File = toml::from_str(text).map_err(|e| e.message().to_owned().replace('\n', " "))?;
    let shapes = file
        .shapes
        .iter()
        .enumerate()
        .map(|(i, s)| shape(i, s))
        .collect::<Result<Vec<SlurmShape>, String>>()?;
    let defaults = Limits::default();
    let limits = Limits {
        max_allocations: file.limits.max_allocations.unwrap_or(defaults.max_allocations),
        backlog: file.limits.backlog.unwrap_or(defaults.backlog),
        min_utilization: file.limits.min_utilization.unwrap_or(defaults.min_utilization),
    };
    if !(0.0..=1.0).contains(&limits.min_utilization) {
        return Err(format!("limits.min_utilization: {} is not between 0 and 1", limits.min_utilization));
    }
    let every = duration("tick", file.tick.as_deref(), "5s")?;
    if every.is_zero() {
        return Err("tick: must be more than 0".into());
    }
    let task_duration = duration("task_duration", file.task_duration.as_deref(), "1m")?;
    let kubernetes = file.provider == "kubernetes";
    if file.kubernetes.is_some() && !kubernetes {
        return Err(format!(
            "kubernetes: a [kubernetes] table is for provider = \"kubernetes\", not `{}`",
            file.provider
        ));
    }
    let launch = || -> Result<AgentLaunch, String> {
        let broker = file
            .broker
            .clone()
            .ok_or("broker: the address agents dial back to is required (e.g. \"10.0.0.5:7700\")")?;
        lardon_submit::broker_uri(&broker).map_err(|e| format!("broker: {e}"))?;
        let program = match &file.agent_program {
            Some(p) => p.clone(),
            // Inside the image, on its PATH.
            None if kubernetes => PathBuf::from("lardon"),
            None => {
                std::env::current_exe().map_err(|e| format!("agent_program: this program's path: {e}"))?
            }
        };
        let idle_exit = duration("idle_exit", file.idle_exit.as_deref(), "5m")?;
        if idle_exit.is_zero() {
            return Err("idle_exit: must be more than 0".into());
        }
        Ok(AgentLaunch {
            program,
            broker,
            join_token_file: file.join_token_file.clone(),
            tls_dir: file.tls_dir.clone(),
            tls_name: file.tls_name.clone(),
            idle_exit,
            heartbeat: file.heartbeat.as_deref().map(|h| duration("heartbeat", Some(h), "")).transpose()?,
        })
    };
    let provider: Box<dyn Provider> = match file.provider.as_str() {
        "slurm" => {
            let config = SlurmConfig {
                shapes,
                launch: launch()?,
                grace: duration("grace", file.grace.as_deref(), "2m")?,
                output_dir: file.output_dir.clone(),
                job_prefix: file.job_prefix.clone().unwrap_or_else(|| "lardon".into()),
            };
            Box::new(SlurmProvider::new(config).map_err(|e| e.to_string())?)
        }
        "local" => {
            let shapes = shapes.into_iter().map(|s| s.shape).collect();
            Box::new(LocalProvider::new(shapes, launch()?, file.output_dir.clone()))
        }
        "kubernetes" => {
            let k = file.kubernetes.as_ref().ok_or(
                "kubernetes: provider = \"kubernetes\" needs a [kubernetes] table with at least `image`",
            )?;
            if let Some((i, _)) = shapes.iter().enumerate().find(|(_, s)| !s.extras.is_empty()) {
                return Err(format!("shape[{i}].extras: sbatch options; a Kubernetes shape takes none"));
            }
            let config = KubernetesConfig {
                shapes: shapes.into_iter().map(|s| s.shape).collect(),
                launch: launch()?,
                image: k.image.clone(),
                namespace: k.namespace.clone().unwrap_or_else(|| "lardon".into()),
                tls_secret: k.tls_secret.clone(),
                token_secret: k.token_secret.clone(),
                grace: duration("grace", file.grace.as_deref(), "2m")?,
                kubectl: k.kubectl.clone().unwrap_or_else(|| PathBuf::from("kubectl")),
                kubeconfig: k.kubeconfig.clone(),
            };
            Box::new(KubernetesProvider::new(config).map_err(|e| format!("kubernetes: {e}"))?)
        }
        "static" => {
            if !shapes.is_empty() {
                return Err("shape: a static provider allocates nothing; remove its shapes".into());
            }
            Box::new(StaticProvider)
        }
        other => return Err(format!("provider: `{other}` is not one of slurm, kubernetes, local, static")),
    };
    Ok(Provision {
        config: ProvisionLoop {
            provisioner: Arc::new(Mutex::new(Provisioner::new(provider, limits))),
            every,
            task_duration,
        },
    })
}

fn shape(i: usize, s: &ShapeFile) -> Result<SlurmShape, String> {
    let field = |name: &str| format!("shape[{i}].{name}");
    let memory = parse_size(&s.memory.text()).map_err(|e| format!("{}: {e}", field("memory")))?;
    if memory == 0 {
        return Err(format!("{}: must be more than 0", field("memory")));
    }
    let cpu_millis = parse_cpu(&s.cpus.text()).map_err(|e| format!("{}: {e}", field("cpus")))?;
    let walltime = duration(&field("walltime"), Some(&s.walltime), "")?;
    if walltime.is_zero() {
        return Err(format!("{}: must be more than 0", field("walltime")));
    }
    let nodes = s.nodes.unwrap_or(1);
    if nodes == 0 {
        return Err(format!("{}: must be at least 1", field("nodes")));
    }
    if s.capabilities.is_empty() {
        return Err(format!("{}: a shape offers at least one", field("capabilities")));
    }
    let capabilities = s
        .capabilities
        .iter()
        .map(|c| Capability::parse(c).map_err(|e| format!("{}: {e}", field("capabilities"))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SlurmShape {
        shape: Shape { name: s.name.clone(), memory, cpu_millis, nodes, walltime, capabilities },
        extras: s.extras.clone(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn explain(p: &Provision) -> (String, Vec<String>) {
        let prov = p.config.provisioner.lock().unwrap();
        (prov.provider().to_owned(), prov.capabilities().iter().map(Capability::key).collect())
    }

    #[test]
    fn the_example_in_deploy_slurm_is_valid() {
        let p = parse(include_str!("../../../deploy/slurm/provision.toml")).unwrap();
        let (provider, caps) = explain(&p);
        assert_eq!(provider, "slurm");
        assert!(!caps.is_empty());
    }

    #[test]
    fn a_local_provision_file_with_every_field() {
        let p = parse(
            r#"
            provider = "local"
            broker = "127.0.0.1:7700"
            idle_exit = "30s"
            tick = "500ms"
            task_duration = "2m"
            agent_program = "/usr/bin/lardon"
            [limits]
            max_allocations = 2
            backlog = 1
            min_utilization = 0.5
            [[shape]]
            name = "small"
            memory = "2GiB"
            cpus = 2
            walltime = "1h"
            capabilities = ["gcc@13:x86_64-linux-gnu"]
            "#,
        )
        .unwrap();
        assert_eq!(p.config.every, Duration::from_millis(500));
        assert_eq!(p.config.task_duration, Duration::from_secs(120));
        assert_eq!(explain(&p), ("local".into(), vec!["gcc@13:x86_64-linux-gnu".into()]));
    }

    #[test]
    fn a_kubernetes_provision_file() {
        let text = |extra: &str| {
            format!(
                r#"
            provider = "kubernetes"
            broker = "lardon-broker.lardon.svc:7700"
            tls_dir = "/etc/lardon/tls"
            tls_name = "agent"
            [kubernetes]
            image = "lardon:0.1.0"
            tls_secret = "lardon-agent-tls"
            {extra}
            [[shape]]
            name = "gcc"
            memory = "8GiB"
            cpus = 4
            walltime = "1h"
            capabilities = ["gcc@12:x86_64-linux-gnu"]
            "#
            )
        };
        let p = parse(&text("")).unwrap();
        assert_eq!(explain(&p), ("kubernetes".into(), vec!["gcc@12:x86_64-linux-gnu".into()]));
        // The provider checks its Jobs when made: a bad namespace is refused.
        let e = parse(&text("namespace = \"Not_A_Label\"")).unwrap_err();
        assert!(e.starts_with("kubernetes: namespace: "), "{e}");
        // A TLS directory needs its Secret.
        let e = parse(&text("").replace("tls_secret = \"lardon-agent-tls\"", "")).unwrap_err();
        assert!(e.contains("no tls_secret"), "{e}");
        let e = parse(&text("bogus = 1")).unwrap_err();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn a_bad_field_is_one_line_naming_it() {
        let base = |shape: &str| {
            format!(
                "provider = \"slurm\"\nbroker = \"127.0.0.1:7700\"\n[[shape]]\nname = \"s\"\ncapabilities = [\"gcc\"]\n{shape}"
            )
        };
        let e = |text: &str| parse(text).unwrap_err();
        assert!(
            e(&base("memory = \"lots\"\ncpus = 1\nwalltime = \"1h\"")).starts_with("shape[0].memory: "),
            "{}",
            e(&base("memory = \"lots\"\ncpus = 1\nwalltime = \"1h\""))
        );
        assert!(e(&base("memory = \"1GiB\"\ncpus = 0\nwalltime = \"1h\"")).starts_with("shape[0].cpus: "));
        assert!(
            e(&base("memory = \"1GiB\"\ncpus = 1\nwalltime = \"soon\"")).starts_with("shape[0].walltime: ")
        );
        assert!(
            e(&base("memory = \"1GiB\"\ncpus = 1\nwalltime = \"1h\"\nnodes = 0"))
                .starts_with("shape[0].nodes: ")
        );
        assert!(
            e(&base("memory = \"1GiB\"\ncpus = 1\nwalltime = \"1h\"\nextras = [\"partition=x\"]"))
                .starts_with("shape s: extras: "),
        );
        assert_eq!(e("provider = \"k8s\""), "provider: `k8s` is not one of slurm, kubernetes, local, static");
        assert!(e("provider = \"kubernetes\"\nbroker = \"b:7700\"").starts_with("kubernetes: "));
        assert!(e("provider = \"local\"\n[kubernetes]\nimage = \"x\"").starts_with("kubernetes: "));
        assert!(e("provider = \"local\"\n[[shape]]\nname = \"s\"\nmemory = 1\ncpus = 1\nwalltime = \"1h\"\ncapabilities = [\"gcc\"]").starts_with("broker: "));
        assert!(
            e("provider = \"static\"\nbogus = 1").contains("bogus"),
            "{}",
            e("provider = \"static\"\nbogus = 1")
        );
        let p = parse("provider = \"static\"").unwrap();
        assert_eq!(explain(&p), ("static".into(), vec![]));
    }
}
