//! What a queued command is: the [`TaskSpec`] the store persists and the
//! small value types around it.
//!
//! A spec is immutable once submitted. It serialises (JSON in the store)
//! without any reference to a local file handle, so it can later travel to
//! another host (docs/DESIGN.md §14). Two levels of checking:
//!
//! * [`TaskSpec::validate`]: malformed requests the API refuses outright
//!   (empty argv, NUL bytes, bad env keys, zero items, …);
//! * [`EstimateSpec::to_estimate`] + [`lardon::Estimate::validate`]: an
//!   invalid *estimate* is not an API error; admission REJECTs it with a
//!   reason (docs/DESIGN.md §2).

use std::fmt;
use std::str::FromStr;

use lardon::{Class, Estimate, MILLIS_PER_CPU};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The daemon-local number of a task; never reused (see
/// [`crate::store::Store::next_task_number`]). The API boundary prefixes it
/// with the host to make it unique across hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(pub u64);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for TaskId {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<u64>().map(TaskId).map_err(|_| SpecError::BadTaskId(s.to_owned()))
    }
}

/// Life cycle of a task (docs/DESIGN.md §8): the engine's own states; the
/// daemon stores and prints them by [`TaskState::as_str`]. The answers of
/// admission are likewise the engine's [`DecisionKind`].
pub use lardon::{DecisionKind, TaskState};

/// Every state, in life-cycle order (the last three are terminal).
pub const STATES: [TaskState; 6] = [
    TaskState::Pending,
    TaskState::Running,
    TaskState::Paused,
    TaskState::Completed,
    TaskState::Failed,
    TaskState::Cancelled,
];

/// Every decision kind.
pub const DECISION_KINDS: [DecisionKind; 4] =
    [DecisionKind::Admit, DecisionKind::ReduceBatch, DecisionKind::Wait, DecisionKind::Reject];

/// The state whose [`TaskState::as_str`] is `s`.
///
/// # Errors
/// [`SpecError::BadState`] for any other word.
pub fn parse_state(s: &str) -> Result<TaskState, SpecError> {
    STATES.into_iter().find(|st| st.as_str() == s).ok_or_else(|| SpecError::BadState(s.to_owned()))
}

/// The decision kind whose [`DecisionKind::as_str`] is `s`.
///
/// # Errors
/// [`SpecError::BadDecision`] for any other word.
pub fn parse_decision(s: &str) -> Result<DecisionKind, SpecError> {
    DECISION_KINDS.into_iter().find(|k| k.as_str() == s).ok_or_else(|| SpecError::BadDecision(s.to_owned()))
}

fn default_batch_min() -> u64 {
    1
}
fn default_cpu_millis() -> u32 {
    MILLIS_PER_CPU
}
fn default_class() -> String {
    Class::DEFAULT.to_owned()
}
fn default_true() -> bool {
    true
}

/// The estimate as submitted: plain integers (bytes, thousandths of a CPU),
/// converted to a [`lardon::Estimate`] for admission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EstimateSpec {
    /// Fixed host memory per sequence, bytes.
    #[serde(default)]
    pub memory_fixed: u64,
    /// Host memory per item, bytes.
    #[serde(default)]
    pub memory_per_item: u64,
    /// Fixed GPU memory per device, bytes.
    #[serde(default)]
    pub gpu_memory_fixed: u64,
    /// GPU memory per item per device, bytes.
    #[serde(default)]
    pub gpu_memory_per_item: u64,
    /// Smallest useful batch (default 1).
    #[serde(default = "default_batch_min")]
    pub batch_min: u64,
    /// Largest batch wanted (default: `batch_min`).
    #[serde(default)]
    pub batch_max: Option<u64>,
    /// CPUs wanted in thousandths (default 1000).
    #[serde(default = "default_cpu_millis")]
    pub cpu_millis: u32,
    /// Wait for every CPU rather than run with fewer.
    #[serde(default)]
    pub cpus_exact: bool,
    /// GPU devices wanted.
    #[serde(default)]
    pub gpu_slots: u32,
    /// IO slots wanted.
    #[serde(default)]
    pub io_slots: u32,
    /// Scratch space wanted, bytes.
    #[serde(default)]
    pub scratch_bytes: u64,
    /// Learning key (default `default`).
    #[serde(default = "default_class")]
    pub class: String,
}

impl Default for EstimateSpec {
    fn default() -> Self {
        EstimateSpec {
            memory_fixed: 0,
            memory_per_item: 0,
            gpu_memory_fixed: 0,
            gpu_memory_per_item: 0,
            batch_min: default_batch_min(),
            batch_max: None,
            cpu_millis: default_cpu_millis(),
            cpus_exact: false,
            gpu_slots: 0,
            io_slots: 0,
            scratch_bytes: 0,
            class: default_class(),
        }
    }
}

impl EstimateSpec {
    /// The effective largest batch.
    pub fn batch_max(&self) -> u64 {
        self.batch_max.unwrap_or(self.batch_min)
    }

    /// The engine's estimate (not validated: admission does that, or call
    /// [`Estimate::validate`]).
    pub fn to_estimate(&self) -> Estimate {
        let b = Estimate::builder()
            .memory(self.memory_fixed)
            .memory_per_item(self.memory_per_item)
            .gpu_memory(self.gpu_memory_fixed)
            .gpu_memory_per_item(self.gpu_memory_per_item)
            .batch(self.batch_min, self.batch_max())
            .cpu_millis(self.cpu_millis)
            .gpu_slots(self.gpu_slots)
            .io_slots(self.io_slots)
            .scratch(self.scratch_bytes)
            .class(self.class.clone());
        if self.cpus_exact { b.cpus_exact().build() } else { b.build() }
    }
}

/// One environment variable added to the task's environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    /// Name (non-empty, no `=` or NUL).
    pub key: String,
    /// Value (no NUL).
    pub value: String,
}

/// Everything `lardon submit` says about a command (docs/DESIGN.md §10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Display name (default: empty, shown as argv).
    #[serde(default)]
    pub name: String,
    /// The command, run without a shell.
    pub argv: Vec<String>,
    /// Working directory on the daemon's host (absolute), if given.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Extra environment, applied in order.
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// Resources per sequence.
    #[serde(default)]
    pub estimate: EstimateSpec,
    /// Higher runs first; FIFO within a priority.
    #[serde(default)]
    pub priority: i32,
    /// Wait for these to succeed.
    #[serde(default)]
    pub after: Vec<TaskId>,
    /// Wait for these to end, however they end.
    #[serde(default)]
    pub after_any: Vec<TaskId>,
    /// Total items: present for a batched command task.
    #[serde(default)]
    pub items: Option<u64>,
    /// Whether a run interrupted by a daemon crash is started again
    /// (default) or the task fails.
    #[serde(default = "default_true")]
    pub retry_on_interrupt: bool,
    /// Whether a run killed at its memory limit is run again at the
    /// learned size (default; a bounded number of times) or the task fails.
    #[serde(default = "default_true")]
    pub oom_retry: bool,
    /// Where the task runs: this host (default) or one Slurm job per run
    /// (native mode, docs/DESIGN.md §14). Omitted from the stored JSON
    /// when local, so specs stored before the field existed read the same.
    #[serde(default, skip_serializing_if = "RunEngine::is_local")]
    pub engine: RunEngine,
    /// Present when the task may run on a cluster agent instead of here
    /// (offload, docs/DESIGN.md §14). Omitted from the stored JSON when
    /// absent, so specs stored before the field existed read the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<Offload>,
    /// The submitter's environment (`lardon submit`): a run starts from it
    /// instead of the daemon's; `None` (`lardon run`, the library, tasks
    /// stored before it existed): the daemon's. Not in the spec's JSON: the
    /// store keeps it in a column of its own (`tasks.env`).
    #[serde(skip)]
    pub submit_env: Option<crate::submit_env::SubmitEnv>,
    /// Wall-clock limit of one run (a batched task's: of each batch run),
    /// milliseconds: at it the run's whole process tree is killed and the
    /// task fails with reason `timeout` (after `retry_on_timeout` more
    /// runs). Omitted when absent (older specs read the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Runs killed at `timeout_ms` that are run again before the task
    /// fails. Omitted when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry_on_timeout: u32,
    /// The command (`sh -c`) run after each end of the task is durable
    /// (docs/DESIGN.md §10 Hooks); `None`: the policy's `on_end`. Omitted
    /// when absent (older specs read the same); the store reads it from
    /// the spec's JSON at the end (`$.on_end`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_end: Option<String>,
    /// The group the task belongs to (`--group`, an `--each` call's own,
    /// or a submitting task's): its limits hold the task back (Governor,
    /// `group_limit`) and the group's verbs select it. Omitted when none
    /// (older specs read the same); copied to `tasks.group_name`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "group_serde")]
    pub group: Option<lardon::GroupName>,
}

/// A [`lardon::GroupName`] in the spec's JSON: a string, checked when read.
mod group_serde {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(g: &Option<lardon::GroupName>, s: S) -> Result<S::Ok, S::Error> {
        match g {
            Some(g) => s.serialize_some(g.as_str()),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<lardon::GroupName>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| lardon::GroupName::new(&t).map_err(D::Error::custom)).transpose()
    }
}

/// The longest `on_end` command a spec or the policy takes, in bytes.
pub const MAX_HOOK_BYTES: usize = 4096;

/// The reason a task whose run was killed at its timeout fails with (the
/// start of its failure reason; `explain --history`'s reason code).
pub const TIMEOUT: &str = "timeout";

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What makes a task shippable: the capability an agent must declare, and
/// the deadline that travels with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offload {
    /// The canonical capability key (`name@version:target`, `*` for any),
    /// as [`lardon_cluster_core::Capability::key`] writes it.
    pub capability: String,
    /// Unix ms after which the agent kills it (`None`: no deadline). A
    /// deadline already passed when the task would ship fails it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_unix_ms: Option<i64>,
    /// Files the task reads, relative to its working directory (plain
    /// names, no `..`): uploaded to the broker's CAS when it ships and
    /// written into its directory at the agent. Omitted when empty (specs
    /// stored before files travelled read the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    /// Files the task writes, relative to its working directory: fetched
    /// from the agent's run and written (atomically) into the working
    /// directory before the task is marked COMPLETED.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
}

/// Where a task's runs happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunEngine {
    /// On this host, admitted by the Governor, run by the local executor.
    #[default]
    Local,
    /// Each run is its own `sbatch` job sized from what the class learned
    /// (see [`crate::slurm`]).
    Slurm,
}

impl RunEngine {
    /// `local` or `slurm`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunEngine::Local => "local",
            RunEngine::Slurm => "slurm",
        }
    }

    /// The default engine (serde's skip test).
    pub fn is_local(&self) -> bool {
        *self == RunEngine::Local
    }
}

impl FromStr for RunEngine {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "" | "local" => Ok(RunEngine::Local),
            "slurm" => Ok(RunEngine::Slurm),
            other => Err(SpecError::BadEngine(other.to_owned())),
        }
    }
}

impl TaskSpec {
    /// A spec running `argv` with every default.
    pub fn command<I, S>(argv: I) -> TaskSpec
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        TaskSpec {
            name: String::new(),
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: None,
            env: Vec::new(),
            estimate: EstimateSpec::default(),
            priority: 0,
            after: Vec::new(),
            after_any: Vec::new(),
            items: None,
            retry_on_interrupt: true,
            oom_retry: true,
            engine: RunEngine::Local,
            offload: None,
            submit_env: None,
            timeout_ms: None,
            retry_on_timeout: 0,
            on_end: None,
            group: None,
        }
    }

    /// Checks what the API must refuse (the estimate is left to admission).
    ///
    /// # Errors
    /// The first [`SpecError`], naming the field.
    pub fn validate(&self) -> Result<(), SpecError> {
        let Some(program) = self.argv.first() else {
            return Err(SpecError::EmptyArgv);
        };
        if program.is_empty() {
            return Err(SpecError::EmptyProgram);
        }
        if let Some(i) = self.argv.iter().position(|a| a.contains('\0')) {
            return Err(SpecError::Nul(format!("argv[{i}]")));
        }
        if self.name.contains('\0') {
            return Err(SpecError::Nul("name".into()));
        }
        if self.name.chars().count() > MAX_NAME_CHARS {
            return Err(SpecError::NameTooLong(MAX_NAME_CHARS));
        }
        if let Some(cwd) = &self.cwd {
            if cwd.contains('\0') {
                return Err(SpecError::Nul("cwd".into()));
            }
            if !cwd.starts_with('/') {
                return Err(SpecError::RelativeCwd(cwd.clone()));
            }
        }
        for var in &self.env {
            if !is_valid_env_name(&var.key) {
                return Err(SpecError::BadEnvKey(var.key.clone()));
            }
            if var.value.contains('\0') {
                return Err(SpecError::Nul(format!("env {}", var.key)));
            }
        }
        if self.items == Some(0) {
            return Err(SpecError::ZeroItems);
        }
        if self.timeout_ms == Some(0) {
            return Err(SpecError::ZeroTimeout);
        }
        if let Some(hook) = &self.on_end {
            check_hook(hook).map_err(|e| SpecError::BadHook(format!("on_end: {e}")))?;
        }
        if let Some(offload) = &self.offload {
            lardon_cluster_core::Capability::parse(&offload.capability)
                .map_err(|e| SpecError::BadCapability(e.to_string()))?;
            if offload.deadline_unix_ms.is_some_and(|d| d <= 0) {
                return Err(SpecError::BadDeadline);
            }
            self.validate_files(offload)?;
        }
        Ok(())
    }

    /// A shippable task's files: each a relative path of plain names
    /// (`lardon_cluster_core::wire::relative_path`), none named twice, at most
    /// [`MAX_TASK_FILES`] of each, and a working directory to hold them.
    fn validate_files(&self, offload: &Offload) -> Result<(), SpecError> {
        for (field, paths) in [("inputs", &offload.inputs), ("outputs", &offload.outputs)] {
            if paths.len() > MAX_TASK_FILES {
                return Err(SpecError::BadFile(format!(
                    "{field}: {} paths, at most {MAX_TASK_FILES}",
                    paths.len()
                )));
            }
            let mut seen = std::collections::HashSet::new();
            for (i, path) in paths.iter().enumerate() {
                lardon_cluster_core::wire::relative_path(&format!("{field}[{i}]"), path)
                    .map_err(|e| SpecError::BadFile(e.to_string()))?;
                if !seen.insert(path.as_str()) {
                    return Err(SpecError::BadFile(format!("{field}[{i}]: `{path}` named twice")));
                }
            }
        }
        let files = !offload.inputs.is_empty() || !offload.outputs.is_empty();
        if files && self.cwd.is_none() {
            return Err(SpecError::BadFile(
                "cwd: a task with input or output files needs a working directory".into(),
            ));
        }
        Ok(())
    }

    /// Dependencies of both kinds, `after` first.
    pub fn dependencies(&self) -> impl Iterator<Item = (TaskId, DepKind)> + '_ {
        self.after
            .iter()
            .map(|id| (*id, DepKind::Success))
            .chain(self.after_any.iter().map(|id| (*id, DepKind::End)))
    }

    /// The name to show: the given name, else the argv joined by spaces.
    pub fn display_name(&self) -> String {
        if self.name.is_empty() { self.argv.join(" ") } else { self.name.clone() }
    }
}

/// Whether `key` is a portable environment-variable name: an ASCII letter
/// or `_`, then letters, digits or `_` (what every shell can expand). The
/// one rule the CLI and the daemon both apply, so that a name the CLI
/// accepts is never refused by the daemon, nor the other way round.
pub fn is_valid_env_name(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks that `cwd` names an existing directory on this host, at submit
/// rather than as a failed spawn later.
///
/// # Errors
/// [`SpecError::MissingCwd`] naming `cwd`.
pub fn check_cwd_exists(cwd: &str) -> Result<(), SpecError> {
    if std::path::Path::new(cwd).is_dir() { Ok(()) } else { Err(SpecError::MissingCwd(cwd.to_owned())) }
}

/// Most input files, and most output files, of a shippable task (the
/// broker's own bound).
pub const MAX_TASK_FILES: usize = lardon_cluster_core::wire::MAX_FILES;

/// Longest task name accepted, in characters.
pub const MAX_NAME_CHARS: usize = 256;

/// What a dependency waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DepKind {
    /// `after`: the dependency must complete successfully.
    Success,
    /// `after_any`: the dependency must end, however.
    End,
}

impl DepKind {
    /// `success` or `end`, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            DepKind::Success => "success",
            DepKind::End => "end",
        }
    }
}

/// A malformed spec or value, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    /// No command given.
    #[error("argv: the command is empty")]
    EmptyArgv,
    /// The program name is the empty string.
    #[error("argv[0]: the program name is empty")]
    EmptyProgram,
    /// A NUL byte in a string that becomes a C string.
    #[error("{0}: contains a NUL byte")]
    Nul(String),
    /// Name longer than [`MAX_NAME_CHARS`].
    #[error("name: longer than {0} characters")]
    NameTooLong(usize),
    /// `cwd` must be absolute (it is resolved on the daemon's host).
    #[error("cwd: `{0}` is not an absolute path")]
    RelativeCwd(String),
    /// An env key that is not a portable name ([`is_valid_env_name`]).
    #[error("env: `{0}` is not a valid variable name (a letter or _, then letters, digits, _)")]
    BadEnvKey(String),
    /// `cwd` is not an existing directory.
    #[error("cwd: `{0}` is not an existing directory")]
    MissingCwd(String),
    /// `items = 0` (omit it for an unbatched task).
    #[error("items: must be at least 1")]
    ZeroItems,
    /// Not a task number.
    #[error("task id: `{0}` is not a task number")]
    BadTaskId(String),
    /// Not a task state word.
    #[error("state: `{0}` is not a task state")]
    BadState(String),
    /// Not an engine name.
    #[error("engine: `{0}` is not one of local, slurm")]
    BadEngine(String),
    /// The capability of a shippable task does not parse.
    #[error("capability: {0}")]
    BadCapability(String),
    /// A bad input or output path of a shippable task (the message names
    /// the field, e.g. `inputs[0]: …`).
    #[error("{0}")]
    BadFile(String),
    /// A deadline at or before the Unix epoch.
    #[error("deadline: must be a positive Unix time in milliseconds")]
    BadDeadline,
    /// A timeout of zero (omit it for none).
    #[error("timeout: must be more than 0")]
    ZeroTimeout,
    /// Not a decision kind word.
    #[error("decision: `{0}` is not a decision kind")]
    BadDecision(String),
    /// A group name outside 1-64 characters of `[A-Za-z0-9._-]`.
    #[error("group: {0}")]
    BadGroup(lardon::GroupNameError),
    /// An `on_end` command that cannot be run (the message names the field).
    #[error("{0}")]
    BadHook(String),
}

/// What an `on_end` command (the spec's or the policy's) must be: not
/// blank, no NUL (it becomes a C string), at most [`MAX_HOOK_BYTES`]. The
/// error does not name the field: callers prefix theirs.
///
/// # Errors
/// Why it is refused.
pub fn check_hook(hook: &str) -> Result<(), String> {
    if hook.trim().is_empty() {
        return Err("the command is empty".to_owned());
    }
    if hook.contains('\0') {
        return Err("contains a NUL byte".to_owned());
    }
    if hook.len() > MAX_HOOK_BYTES {
        return Err(format!("longer than {MAX_HOOK_BYTES} bytes"));
    }
    Ok(())
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
