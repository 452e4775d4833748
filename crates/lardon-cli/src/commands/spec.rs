//! Building a `TaskSpec` from what `submit` flags or a workload file say,
//! checking the estimate here so that a bad one is a usage error naming its
//! field (exit 2) rather than a rejection later.

use anyhow::Result;
use lardon::EstimateError;
use lardon_proto::pb;

use crate::cli::NeedsArgs;
use crate::error::usage;

/// How fields are named in errors: `--mem` (flags) or `mem` (TOML).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    Flags,
    Toml,
}

impl Style {
    pub(crate) fn field(self, toml_name: &str) -> String {
        match self {
            Style::Toml => toml_name.to_owned(),
            Style::Flags => format!("--{}", toml_name.replace('_', "-")),
        }
    }
}

/// The rest of a spec besides its needs.
#[derive(Debug, Default, Clone)]
pub(crate) struct SpecParts {
    pub(crate) name: String,
    pub(crate) argv: Vec<String>,
    pub(crate) cwd: String,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) priority: i32,
    pub(crate) after: Vec<String>,
    pub(crate) retry: bool,
    /// Run again after a memory kill (default true through `oom_retry`).
    pub(crate) no_oom_retry: bool,
}

pub(crate) fn estimate(needs: &NeedsArgs, style: Style) -> Result<pb::Estimate> {
    let f = |n: &str| style.field(n);
    if needs.batch.is_some() && needs.items.is_none() {
        return Err(usage(format!(
            "{}: a batch range needs {} (the total number of items)",
            f("batch"),
            f("items")
        )));
    }
    let (bmin, bmax) = needs.batch.unwrap_or((1, 1));
    let mut builder = lardon::Estimate::builder()
        .memory(needs.mem.unwrap_or(0))
        .memory_per_item(needs.mem_per_item.unwrap_or(0))
        .batch(bmin, bmax)
        .cpu_millis(needs.cpus.unwrap_or(1000))
        .io_slots(needs.io.unwrap_or(0))
        .scratch(needs.scratch.unwrap_or(0));
    let gpu = needs.gpu_mem.unwrap_or(0);
    if gpu > 0 {
        builder = builder.gpu_memory(gpu).gpu_slots(1);
    }
    if let Some(class) = &needs.class {
        builder = builder.class(class.clone());
    }
    let est = builder.build();
    if let Err(e) = est.validate() {
        let field = match &e {
            EstimateError::BatchMinZero | EstimateError::BatchRange { .. } => f("batch"),
            EstimateError::CpusZero => f("cpus"),
            EstimateError::GpuMemoryWithoutSlot => f("gpu_mem"),
            EstimateError::BadClass(_) => f("class"),
            EstimateError::Overflow(_) => f("mem_per_item"),
        };
        return Err(usage(format!("{field}: {e}")));
    }
    Ok(pb::Estimate {
        memory_fixed: needs.mem.unwrap_or(0),
        memory_per_item: needs.mem_per_item.unwrap_or(0),
        gpu_memory_fixed: gpu,
        gpu_memory_per_item: 0,
        batch_min: needs.batch.map(|b| b.0),
        batch_max: needs.batch.map(|b| b.1),
        cpu_millis: needs.cpus,
        cpus_exact: false,
        gpu_slots: u32::from(gpu > 0),
        io_slots: needs.io.unwrap_or(0),
        scratch_bytes: needs.scratch.unwrap_or(0),
        class: needs.class.clone().unwrap_or_default(),
    })
}

pub(crate) fn task_spec(needs: &NeedsArgs, parts: SpecParts, style: Style) -> Result<pb::TaskSpec> {
    let f = |n: &str| style.field(n);
    let estimate = estimate(needs, style)?;
    if parts.argv.is_empty() || parts.argv[0].is_empty() {
        return Err(usage(format!(
            "{}: the command is empty",
            if style == Style::Toml { "command" } else { "COMMAND" }
        )));
    }
    if parts.argv.iter().any(|a| a.contains('\0')) {
        return Err(usage("command: an argument contains a NUL byte"));
    }
    for (k, v) in &parts.env {
        // The daemon's own rule, so both agree.
        if !lardon_daemon::spec::is_valid_env_name(k) {
            return Err(usage(format!(
                "{}: `{k}` is not a valid variable name (letters, digits, _)",
                f("env")
            )));
        }
        if v.contains('\0') {
            return Err(usage(format!("{}: the value of {k} contains a NUL byte", f("env"))));
        }
    }
    Ok(pb::TaskSpec {
        name: parts.name,
        argv: parts.argv,
        cwd: parts.cwd,
        env: parts.env.into_iter().map(|(key, value)| pb::EnvVar { key, value }).collect(),
        estimate: Some(estimate),
        priority: parts.priority,
        after: parts.after,
        after_any: Vec::new(),
        items: needs.items,
        retry_on_interrupt: Some(parts.retry),
        oom_retry: parts.no_oom_retry.then_some(false),
        engine: String::new(),
        capability: String::new(),
        deadline_unix_ms: 0,
        inputs: Vec::new(),
        outputs: Vec::new(),
        submit_env: None,
        timeout_ms: None,
        retry_on_timeout: 0,
        on_end: String::new(),
        group: String::new(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field() {
        let needs = NeedsArgs { batch: Some((1, 4)), ..Default::default() };
        let e = estimate(&needs, Style::Flags).unwrap_err().to_string();
        assert!(e.starts_with("--batch:"), "{e}");
        let needs = NeedsArgs { class: Some("Bad Class".into()), ..Default::default() };
        let e = estimate(&needs, Style::Toml).unwrap_err().to_string();
        assert!(e.starts_with("class:"), "{e}");
        let needs = NeedsArgs {
            mem_per_item: Some(u64::MAX),
            items: Some(9),
            batch: Some((1, 9)),
            ..Default::default()
        };
        let e = estimate(&needs, Style::Flags).unwrap_err().to_string();
        assert!(e.starts_with("--mem-per-item:"), "{e}");
    }
}
