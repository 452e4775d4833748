//! The command line, declared with clap derive: the doc comments are the
//! `--help` text, and every value with a unit is parsed here so that a bad
//! one is reported as a usage error naming its flag.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::parse::*;

mod groups;
mod report;
pub(crate) use groups::{GroupCommand, GroupIdsArgs, RestartArgs};
pub(crate) use report::ReportArgs;

/// Lardon: a resource-governed task runtime.
///
/// Queue commands with what they need (memory, GPU memory, CPUs, IO slots,
/// scratch space, a batch range); the daemon admits each one only when the
/// host can afford it, makes it wait with a reason otherwise, and learns
/// from what ran.
#[derive(Debug, Parser)]
#[command(
    name = "lardon",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_long_help = "Start here:\n  \
        lardon daemon &                          # once per machine\n  \
        lardon submit --mem 2GiB -- ./train.sh   # queue a command\n  \
        lardon status                            # what runs, what waits, why\n  \
        lardon top                               # the live dashboard\n  \
        lardon run work.toml                     # a workload file, no daemon\n\n\
        A sample workload is examples/demo.toml (in a source checkout)."
)]
pub(crate) struct Cli {
    /// State directory (database, logs, socket) [default: $XDG_STATE_HOME/lardon]
    #[arg(
        long,
        global = true,
        env = "LARDON_STATE_DIR",
        value_name = "DIR",
        help_heading = "Global options"
    )]
    pub(crate) state_dir: Option<PathBuf>,
    /// Daemon socket [default: <state dir>/lardon.sock or $XDG_RUNTIME_DIR/lardon/lardon.sock]
    #[arg(long, global = true, env = "LARDON_SOCKET", value_name = "PATH", help_heading = "Global options")]
    pub(crate) socket: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands. Each one's arguments are built only when it is the
/// one invoked (`defer`): a `lardon submit` no longer builds the ~40
/// other commands' arguments at every start (0.1 ms of its CPU).
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum Command {
    /// Run the daemon in the foreground (Ctrl-C or SIGTERM stops it cleanly).
    ///
    /// Its log goes to standard error and `<state dir>/daemon.log`, rotated
    /// past 16 MiB with 4 older files kept (`--log-max-size`, `--log-keep`).
    ///
    /// Example: `lardon daemon &` or `lardon daemon --metrics-addr 127.0.0.1:9184`
    /// or `lardon daemon --log-max-size 64MiB --log-keep 8`
    Daemon(DaemonArgs),
    /// Queue a command with its resource needs; prints the task id.
    ///
    /// The command after `--` runs as is, never through a shell (write
    /// `sh -c '…'` if you want one).
    ///
    /// Example: `lardon submit --mem 2GiB --cpus 2 --name train -- python train.py`
    ///
    /// Batched: `lardon submit --mem 1GiB --mem-per-item 50MiB --items 1000 --batch 1..32 -- ./chunk.sh`
    /// runs the command once per granted batch with LARDON_ITEM_OFFSET and LARDON_BATCH_SIZE set.
    ///
    /// Many at once, one task per input line (`{}` the line, `{#}` its number):
    /// `ls *.jpg | lardon submit --each --mem 1GiB -- convert {} out/{#}.png`.
    ///
    /// It runs in your environment (as `sbatch --export=ALL`: your PATH,
    /// virtualenv, variables) and working directory; Lardon's own LARDON_*
    /// win. `lardon status ID` names what differs from the daemon's.
    /// `FOO=bar lardon submit -- sh -c 'echo $FOO'` logs `bar`;
    /// `lardon submit --env-clear --env A=1 -- env` sees only A (and LARDON_*);
    /// `lardon submit --env OMP_PROC_BIND=true -- ./solve` sets one variable.
    ///
    /// `lardon submit --timeout 2h -- ./render.sh` kills it (its whole
    /// process tree) after 2 hours: FAILED, reason `timeout`;
    /// `lardon submit --timeout 10m --retry-on-timeout 2 -- ./flaky.sh` runs it at most 3 times.
    ///
    /// A hook when it ends (run with `sh -c`, once per end, after the end is recorded):
    /// `lardon submit --on-end 'notify-send "task $LARDON_TASK_ID $LARDON_TASK_STATE"' -- ./train.sh`;
    /// for every task without one: `lardon policy --set on_end='echo $LARDON_TASK_ID >> ~/ended'`.
    /// Groups: `lardon submit --group render -- ./frame.sh 1` puts it in group `render`
    /// (`lardon group add render --max-running 2` limits what the group holds at once). Every
    /// `--each` call is a group of its own: `--group NAME`, else `each-<first id>` (printed on
    /// stderr, in `--json`'s `group`): `lardon wait --group each-17` waits for it, `lardon
    /// restart --failed --group each-17` reruns what failed.
    ///
    /// Inside a task (LARDON_TASK_ID and LARDON_SOCKET set) `lardon submit` queues in the same
    /// daemon, in the task's own group (LARDON_GROUP) unless --group says otherwise; a parent
    /// task waits for its children with `lardon wait --group "$LARDON_GROUP"`, which waits for
    /// every other task of the group, never for the caller itself:
    /// `lardon submit --group job -- sh -c 'lardon submit -- ./part.sh 1; lardon submit -- ./part.sh 2; lardon wait --group "$LARDON_GROUP"'`.
    #[command(visible_alias = "add")]
    Submit(SubmitArgs),
    /// Run a command and report its peak memory, duration and exit to a
    /// file: the wrapper every native-mode Slurm job runs (`submit --engine
    /// slurm`). Exits with the command's status.
    ///
    /// The peak is the Slurm job cgroup's high-water mark when the command
    /// runs in one (`memory.peak`, `memory.max_usage_in_bytes`), else the
    /// command's largest resident set.
    ///
    /// Example: `lardon exec --report /tmp/r.json -- ./render.sh scene.blend`
    Exec(ExecArgs),
    /// Show tasks: state, progress, elapsed time, ETA and why a task waits.
    ///
    /// With an ID it also names the variables of the task's environment
    /// (yours, captured at submit) that differ from the daemon's; their
    /// values only with --show-env (never otherwise, --json included).
    ///
    /// Example: `lardon status` or `lardon status 7 --json` or `lardon status 7 --show-env`
    /// or `lardon status --group render`
    Status {
        /// Show only this task, in detail
        #[arg(conflicts_with = "group")]
        id: Option<String>,
        /// Only the tasks of this group
        #[arg(long, value_name = "NAME", value_parser = parse_group)]
        group: Option<String>,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
        /// With ID: also print the values of the variables that differ from the daemon's
        #[arg(long, requires = "id")]
        show_env: bool,
    },
    /// Why a task runs, waits or was rejected: the last decision, its reason,
    /// and the estimate beside current availability.
    ///
    /// Example: `lardon explain 7`
    Explain {
        /// Task id
        id: String,
        /// Also list the decisions that changed the task's course (admitted
        /// with its batch and grant, each wait period and its reason, batch
        /// changes, memory retries, soft overruns), oldest first
        #[arg(long)]
        history: bool,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Print a task's output (stdout and stderr as written).
    ///
    /// A log past the policy's `log_max` (default 256MiB) keeps its first and
    /// last halves; the middle is shown as one line, `[lardon: N bytes dropped]`.
    ///
    /// Examples: `lardon log 7 --follow`, `lardon log 7 --tail 20 --follow`,
    /// `lardon log 7 --head 5`
    Log {
        /// Task id
        id: String,
        /// Keep printing until the task ends
        #[arg(short, long)]
        follow: bool,
        /// Only standard error
        #[arg(long, conflicts_with = "stdout")]
        stderr: bool,
        /// Only standard output
        #[arg(long)]
        stdout: bool,
        /// Only the last N lines (with --follow: then what is written after them)
        #[arg(long, value_name = "N", value_parser = parse_count, conflicts_with_all = ["head", "tail_bytes"])]
        tail: Option<u64>,
        /// Only the first N lines (with --follow: waits for them, then ends)
        #[arg(long, value_name = "N", value_parser = parse_count, conflicts_with = "tail_bytes")]
        head: Option<u64>,
        /// Start this many bytes before the end (e.g. 4KiB)
        #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_hyphen_values = true)]
        tail_bytes: Option<u64>,
    },
    /// Pause tasks: pending ones are skipped, running ones are stopped (SIGSTOP) and keep their resources.
    ///
    /// Example: `lardon pause 7 8` or `lardon pause --group render` (its pending and running tasks)
    Pause(GroupIdsArgs),
    /// Resume paused tasks.
    ///
    /// Example: `lardon resume 7` or `lardon resume --group render`
    Resume(GroupIdsArgs),
    /// Cancel tasks (running commands get SIGTERM, then SIGKILL after a grace period).
    ///
    /// Example: `lardon cancel 7 --grace 10s` or `lardon cancel --group render` (every task of it not yet ended)
    Cancel {
        /// Task ids
        #[arg(required_unless_present = "group", value_name = "ID")]
        ids: Vec<String>,
        /// Every task of this group not yet ended (with the ids, those too)
        #[arg(long, value_name = "NAME", value_parser = parse_group)]
        group: Option<String>,
        /// Delay between SIGTERM and SIGKILL (e.g. 5s, 500ms)
        #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
        grace: Option<u64>,
        /// Print the results as JSON
        #[arg(long)]
        json: bool,
    },
    /// Wait until tasks end (all unfinished tasks by default); exits 1 if any failed.
    ///
    /// With --group, every task of the group (those already ended count: a failed one makes it
    /// exit 1), but never the caller's own task: run inside a task of the group (a parent that
    /// submitted its children), it waits for every other task of it.
    ///
    /// Example: `lardon wait 7 8 && echo both done` or `lardon wait --group render`
    Wait {
        /// Task ids (default: every task not yet finished)
        #[arg(value_name = "ID")]
        ids: Vec<String>,
        /// Every task of this group (but the caller's own)
        #[arg(long, value_name = "NAME", value_parser = parse_group)]
        group: Option<String>,
        /// Print each finished task and the summary as JSON lines
        #[arg(long)]
        json: bool,
    },
    /// Run finished tasks again (completed, failed or cancelled): same command and id, a new attempt.
    ///
    /// The task's history stays: `lardon explain ID --history` shows the restart, and its log keeps
    /// the earlier output above a separator line. A batched task runs all its items again.
    ///
    /// `--failed` reruns every failed task (`--cancelled` also every cancelled one), of one group
    /// with `--group`: each through the same restart, so only what failed runs again.
    ///
    /// Example: `lardon restart 7 8` or `lardon restart --failed --group each-17`
    Restart(RestartArgs),
    /// Groups of tasks and their limits: what a group's tasks may hold at once (running
    /// tasks, memory, CPUs), on top of the host's budgets. A task of a group at a limit waits
    /// with reason `group_limit` (`lardon status`, `lardon explain`).
    ///
    /// Example: `lardon group add render --max-running 2 --mem 4GiB` then
    /// `lardon submit --group render --each frames.txt -- ./render.sh {}`
    #[command(subcommand)]
    Group(GroupCommand),
    /// Forget finished tasks (ids are never reused).
    ///
    /// Example: `lardon remove 7`
    Remove(IdsArgs),
    /// Forget every finished task.
    ///
    /// Example: `lardon clean --successful-only`
    Clean {
        /// Only tasks that completed successfully
        #[arg(long)]
        successful_only: bool,
        /// Print the removed ids as JSON
        #[arg(long)]
        json: bool,
    },
    /// Budgets, reservations, pressure and enforcement on this host.
    ///
    /// Example: `lardon resources --json`
    Resources {
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// What ran, per class: runs, ends, memory declared vs measured peak,
    /// waste, memory retries, waits by reason, run times, learned figures.
    ///
    /// One row per class, and per command shape for tasks that named none
    /// (their learning key `default.<program>.<hash>`), then a totals row.
    /// It reads the store in the state dir, never the daemon: it works
    /// with the daemon stopped, and while it runs.
    ///
    /// Example: `lardon report --since 7d` or `lardon report --class render --json`
    /// or `lardon report --html report.html` (one page with charts, no network needed to view it)
    Report(ReportArgs),
    /// Show or change the host policy (reserves, thresholds, max running…).
    ///
    /// Example: `lardon policy --set memory_reserve=2GiB --set max_running=4`
    ///
    /// A hook for every task that sets no `--on-end`, with a 30 s limit:
    /// `lardon policy --set on_end='echo $LARDON_TASK_ID $LARDON_TASK_STATE >> ~/ended' --set on_end_timeout=30s`
    /// (`--set on_end=none` turns it off).
    Policy {
        /// Set KEY=VALUE (persisted by the daemon); repeat for several
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        set: Vec<(String, String)>,
        /// Reset KEY to its default; repeat for several
        #[arg(long = "reset", value_name = "KEY")]
        reset: Vec<String>,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Report progress from inside a task (uses $LARDON_TASK_ID and $LARDON_SOCKET).
    ///
    /// Example (in a task's script): `lardon progress 40/100 "resizing images"`
    Progress {
        /// DONE/TOTAL (e.g. 40/100), or DONE alone when the total is unknown
        #[arg(value_name = "DONE/TOTAL", value_parser = parse_progress)]
        progress: (u64, u64),
        /// A short message shown beside the bar
        message: Option<String>,
    },
    /// The live dashboard: tasks, resources, pressure, decisions, scratch volumes.
    ///
    /// Keys: ↑/↓ select, p pause, r resume, c cancel, d drain, ? help, q quit.
    ///
    /// With --cluster, a cluster broker's view instead: its agents (capabilities, tokens, tasks in
    /// flight, availability), its routes (tasks queued and in flight per capability) and totals.
    ///
    /// Example: `lardon top` (`NO_COLOR=1 lardon top` for no colours), `lardon top --cluster --broker 10.0.0.5:7700`
    Top {
        /// Draw without colour (words and bold/dim only)
        #[arg(long)]
        no_color: bool,
        /// Show a cluster broker instead of the local daemon
        #[arg(long)]
        cluster: bool,
        /// The broker (HOST:PORT) for --cluster
        #[arg(long, value_name = "ADDR", requires = "cluster", default_value = "127.0.0.1:7700")]
        broker: String,
        #[command(flatten)]
        security: ClusterSecurity,
    },
    /// Print a shell completion script.
    ///
    /// Example: `lardon completions bash > ~/.local/share/bash-completion/completions/lardon`
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
    /// A synthetic task that really allocates and touches memory, for demos and tests.
    ///
    /// Example: `lardon submit --mem 600MiB -- lardon exercise --mem 500MiB --secs 2`
    Exercise(ExerciseArgs),
    /// Run a workload file (TOML) through an embedded engine, no daemon needed.
    ///
    /// State lives in --state-dir (default: `.lardon/` beside the file), so an
    /// interrupted run resumes and completed tasks do not rerun. Exits 0 only
    /// if every task succeeded, 1 otherwise.
    ///
    /// Example: `lardon run work.toml` (a sample: `examples/demo.toml` in a source checkout)
    Run {
        /// The workload file
        file: PathBuf,
        /// Plain lines instead of progress bars, even on a terminal
        #[arg(long)]
        plain: bool,
        /// Start over: forget every task of earlier runs in the state dir
        /// (running ones are cancelled) and run the whole file again
        #[arg(long)]
        fresh: bool,
    },
    /// Scratch volumes: fast (possibly removable) disks leased to tasks.
    ///
    /// Example: `lardon scratch add /mnt/nvme --capacity 200GiB` then `lardon scratch drain nvme`
    #[command(subcommand)]
    Scratch(ScratchCommand),
    /// Run a cluster broker: routes tasks from submitters to the agents that
    /// dial in, by capability, fairly across submitters (docs/DESIGN.md §14).
    ///
    /// Example: `lardon broker --listen 127.0.0.1:7700 --state /var/lib/lardon-broker`
    Broker(BrokerArgs),
    /// Run a cluster agent: dials the broker, declares what it runs, and runs
    /// what it is assigned once this host's Governor admits it.
    ///
    /// Example: `lardon agent --broker 127.0.0.1:7700 --capability gcc@12:x86_64-linux-gnu`
    Agent(AgentArgs),
    /// Talk to a cluster broker: its status, or one command run through it.
    ///
    /// Example: `lardon cluster status --broker 127.0.0.1:7700`
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Cluster security: a private certificate authority, certificates for the broker and its clients, join tokens.
    ///
    /// Example: `lardon cert init --dir ca && lardon cert issue broker --ca ca --host broker.lan --out broker`
    #[command(subcommand)]
    Cert(CertCommand),
    /// A compiler wrapper: sends single-source compiles through the cluster
    /// broker (preprocessed here, compiled at an agent, cached), runs
    /// everything else here unchanged (docs/DESIGN.md §14).
    ///
    /// Example: `make -j8 CC="lardon cc gcc"` with LARDON_BROKER=HOST:PORT
    Cc(CcArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CcArgs {
    /// The broker (HOST:PORT); without one every compile runs here
    #[arg(long, value_name = "ADDR", env = "LARDON_BROKER")]
    pub(crate) broker: Option<String>,
    /// Say on stderr where each compile ran, and why it ran here
    #[arg(long, env = "LARDON_CC_VERBOSE", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) verbose: bool,
    #[command(flatten)]
    pub(crate) security: ClusterSecurity,
    /// The compiler command line, e.g. `gcc -c x.c -o x.o` (after `--` or not)
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        value_name = "COMPILER ARGS"
    )]
    pub(crate) command: Vec<String>,
}

// How a broker and its peers authenticate each other (`lardon cert`).
// A plain comment, not a doc comment: the subcommands are built lazily
// (`defer`), and a flattened struct's doc comment would replace the
// subcommand's own about text.
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct ClusterSecurity {
    /// Directory holding NAME.pem, NAME.key and the cluster's ca.pem (from `lardon cert issue`):
    /// speak mutual TLS [default: plain, for loopback and tests]
    #[arg(long, value_name = "DIR")]
    pub(crate) tls_dir: Option<PathBuf>,
    /// NAME of the certificate in --tls-dir [default: broker for the broker, agent otherwise]
    #[arg(long, value_name = "NAME", requires = "tls_dir")]
    pub(crate) tls_name: Option<String>,
    /// File holding the cluster's join token (from `lardon cert token`): a broker demands it,
    /// agents and submitters present it; needs --tls-dir (without TLS it would travel in clear)
    #[arg(long, value_name = "FILE")]
    pub(crate) join_token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct BrokerArgs {
    /// Address to listen on (agents and submitters dial it)
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: SocketAddr,
    /// Directory of the broker's state (SQLite): with it, a restarted broker
    /// loses nothing [default: in memory]
    #[arg(long, value_name = "DIR")]
    pub(crate) state: Option<PathBuf>,
    /// After a restart, how long agents that held tasks have to reconnect
    /// before their tasks go elsewhere (e.g. 15s)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms, default_value = "15s")]
    pub(crate) recovery: u64,
    /// Heartbeat interval on every stream; a peer silent for three is lost
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms, default_value = "5s")]
    pub(crate) heartbeat: u64,
    /// Also serve KEDA's external scaler (queued demand per capability) on this address, plain gRPC
    #[arg(long, value_name = "ADDR")]
    pub(crate) keda_listen: Option<SocketAddr>,
    /// Also serve Prometheus metrics (`GET /metrics`: agents, queue, answers, cache) on this address, plain HTTP
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// Blob bytes the REAPI result cache keeps, least recently used evicted first (served on
    /// --listen; 0: no cache). With --state it lives in STATE/cache and survives a restart
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "1GiB")]
    pub(crate) cache_size: u64,
    /// The largest blob the cache takes: a larger upload is refused on its first message,
    /// before any of it is kept (at most --cache-size)
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "256MiB")]
    pub(crate) cache_max_blob: u64,
    /// Bytes of action results (exit code, output, output digests) the cache keeps
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "64MiB")]
    pub(crate) cache_results_size: u64,
    /// Provisioning TOML (provider slurm|local|static, shapes, limits; see
    /// deploy/slurm/provision.toml): ask the engine for agents while tasks wait
    #[arg(long, value_name = "FILE")]
    pub(crate) provision: Option<PathBuf>,
    /// A capability whose agents an outside scaler starts from this broker's
    /// demand, NAME[@VERSION][:TARGET] (repeat it; KEDA through
    /// --keda-listen): its tasks wait for an agent instead of being answered
    /// "no executor" while none is connected, so KEDA can scale from zero
    #[arg(long, value_name = "CAPABILITY")]
    pub(crate) scaled_capability: Vec<String>,
    #[command(flatten)]
    pub(crate) security: ClusterSecurity,
    /// Serve plain gRPC on a --listen address other than loopback, for a
    /// trusted network only (logged at warn): without it such an address
    /// needs --tls-dir, since whoever reaches the port could run commands
    /// on every agent
    #[arg(long, conflicts_with = "tls_dir")]
    pub(crate) insecure: bool,
    /// Log level or filter [default: info]
    #[arg(long, value_name = "LEVEL")]
    pub(crate) log_level: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The broker (HOST:PORT)
    #[arg(long, value_name = "ADDR")]
    pub(crate) broker: String,
    /// A capability this agent runs, NAME[@VERSION][:TARGET][=PROGRAM[,PROGRAM…]] (repeat it);
    /// only these are ever run. With =PROGRAM,… (absolute paths) its tasks may run only those
    /// programs (argv[0] resolved in the agent's own PATH); without, any program (warned at start)
    #[arg(long, value_name = "CAP", required = true)]
    pub(crate) capability: Vec<String>,
    /// Let tasks set this variable although it changes what runs (LD_*, PATH, BASH_ENV,
    /// PYTHONPATH, … are refused by default; repeat it)
    #[arg(long, value_name = "NAME")]
    pub(crate) allow_env: Vec<String>,
    /// Upper bound on tasks at once [default: the allocation's CPUs (cpuset,
    /// quota, affinity), not the node's]
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub(crate) tokens: Option<u64>,
    /// This agent's id [default: HOSTNAME-PID]
    #[arg(long, value_name = "ID")]
    pub(crate) id: Option<String>,
    /// Heartbeat interval (at most the broker's)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms, default_value = "5s")]
    pub(crate) heartbeat: u64,
    /// When this agent's allocation ends, Unix seconds: the broker gives it no task that
    /// would outlast it [default: $SLURM_JOB_END_TIME when set, else no end]
    #[arg(long, value_name = "UNIX_SECONDS", conflicts_with = "walltime")]
    pub(crate) ends_at: Option<u64>,
    /// This agent's allocation ends this long after it starts (e.g. 4h); as --ends-at
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    pub(crate) walltime: Option<u64>,
    /// On SIGTERM, how long running tasks may finish before they are cancelled and queued
    /// again elsewhere (a second SIGTERM cancels at once) [default: the time left before
    /// the allocation ends, less 5 s (Slurm's --signal=B:TERM@LEAD gives LEAD), else 25 s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    pub(crate) drain_grace: Option<u64>,
    /// How often the optimizer reads this agent's cgroup CPU counters and moves its token
    /// bound (within 1 and --tokens; at least 100ms)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms, default_value = "5s")]
    pub(crate) optimize_every: u64,
    /// Keep the token bound at --tokens (no optimizer)
    #[arg(long)]
    pub(crate) no_optimizer: bool,
    #[command(flatten)]
    pub(crate) security: ClusterSecurity,
    /// This agent owns its allocation (a Slurm job, a pod): admit against
    /// the allocation alone, keeping no CPUs back for the rest of the host
    /// and ignoring the host's load average (other jobs' work)
    #[arg(long)]
    pub(crate) allocation: bool,
    /// How each task is held to the memory it declared: auto (with
    /// --allocation, a cgroup of its own where this agent can make one, else
    /// the soft watchdog; without it, nothing), cgroup (fail at start if none
    /// can be made), soft (sample the task's processes' RSS every 100ms and
    /// SIGKILL them past the declaration + 5 %, at least 8 MiB: the engine's
    /// limit stays the backstop), none. The agent logs its choice and why
    #[arg(long, value_enum, value_name = "HOW", default_value = "auto")]
    pub(crate) enforcement: AgentEnforcement,
    /// Exit (status 0, closing the stream) after this long with nothing
    /// assigned or running, e.g. 5m: an allocation's agent gives it back
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    pub(crate) idle_exit: Option<u64>,
    /// Tasks with files each get a fresh directory under this one
    /// [default: lardon-agent in the system's temporary directory]
    #[arg(long, value_name = "DIR")]
    pub(crate) work_dir: Option<PathBuf>,
    /// Admit against a simulated host of this size instead of this machine
    /// (tasks still really run). For tests, never for real work.
    #[arg(long, value_name = "MEMORY,CPUS", value_parser = parse_host)]
    pub(crate) simulate_host: Option<(u64, u32)>,
    /// Log level or filter [default: info]
    #[arg(long, value_name = "LEVEL")]
    pub(crate) log_level: Option<String>,
}

/// `lardon agent --enforcement`: how tasks are held to their declared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum AgentEnforcement {
    /// A cgroup per task in an allocation where one can be made, else the
    /// soft watchdog; nothing outside an allocation.
    Auto,
    /// A cgroup per task, or the agent does not start.
    Cgroup,
    /// The soft memory watchdog (RSS sampling), even where cgroups work.
    Soft,
    /// Nothing: the engine's limit, if any.
    None,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum ClusterCommand {
    /// The broker's agents (capabilities, tokens, tasks held, availability)
    /// and its queue.
    ///
    /// With --watch it follows the broker's Watch stream instead: the
    /// status at once, then again after every change (changes closer than
    /// --min-interval come as one, with the latest state), until
    /// interrupted. With --json each event is one line (JSON lines: the
    /// status plus `sequence`, the broker's change counter, and
    /// `heartbeat`, true for the broker's "nothing changed" beat, which
    /// the table form does not print). It exits 3 when the broker stops
    /// answering.
    ///
    /// Example: `lardon cluster status --broker 127.0.0.1:7700 --watch --json | jq -c '{queued, in_flight}'`
    Status {
        /// The broker (HOST:PORT)
        #[arg(long, value_name = "ADDR")]
        broker: String,
        /// Print JSON instead of a table (one line per event with --watch)
        #[arg(long)]
        json: bool,
        /// Keep printing the status as it changes
        #[arg(long)]
        watch: bool,
        /// With --watch: least time between two printed states (10ms ..= 60s)
        #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms, default_value = "1s", requires = "watch")]
        min_interval: u64,
        #[command(flatten)]
        security: ClusterSecurity,
    },
    /// Why the broker's Provisioner is not asking for (more) allocations,
    /// one line each, and the allocations it holds (as of its last tick).
    ///
    /// Example: `lardon cluster explain --broker 127.0.0.1:7700`
    Explain {
        /// The broker (HOST:PORT)
        #[arg(long, value_name = "ADDR")]
        broker: String,
        /// Print JSON
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        security: ClusterSecurity,
    },
    /// Run one command through the broker and wait for it: prints its
    /// output and exits with its exit code.
    ///
    /// Example: `lardon cluster submit --broker 127.0.0.1:7700 --capability gcc@12 -- gcc -c x.c`
    Submit(Box<ClusterSubmitArgs>),
}

#[derive(Debug, Args)]
pub(crate) struct ClusterSubmitArgs {
    /// The broker (HOST:PORT)
    #[arg(long, value_name = "ADDR")]
    pub(crate) broker: String,
    /// Its output depends only on the capability and argv (no input files): the broker
    /// answers it from its result cache when it can, and caches a success
    #[arg(long)]
    pub(crate) cacheable: bool,
    #[command(flatten)]
    pub(crate) security: ClusterSecurity,
    /// What it must run on, NAME[@VERSION][:TARGET]
    #[arg(long, value_name = "CAP")]
    pub(crate) capability: String,
    /// The task's id (a resubmission with the same id is the same task)
    /// [default: HOSTNAME-PID-MILLIS]
    #[arg(long, value_name = "ID")]
    pub(crate) id: Option<String>,
    /// Who submits (fair share is between submitters; two submits running
    /// at once need different ids) [default: HOSTNAME-PID]
    #[arg(long, value_name = "ID")]
    pub(crate) submitter: Option<String>,
    /// Memory it needs (e.g. 2GiB)
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "0")]
    pub(crate) mem: u64,
    /// CPUs it needs (e.g. 2, 0.5)
    #[arg(long, value_name = "CPUS", value_parser = parse_cpu, default_value = "1")]
    pub(crate) cpus: u32,
    /// Kill it at the agent past this long (e.g. 10m)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    pub(crate) deadline: Option<u64>,
    /// Its class for the broker's learned peak and duration (tasks of one class cost alike)
    /// [default: the capability and the program's base name]
    #[arg(long, value_name = "NAME")]
    pub(crate) class: Option<String>,
    /// How long it should run (e.g. 20m): keeps it off agents whose allocation ends sooner,
    /// until the broker has learned its class's duration
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    pub(crate) expected_duration: Option<u64>,
    /// Environment variable KEY=VALUE the task gets over the agent's (repeat it); the agent
    /// refuses those that change what runs (LD_*, PATH, …). Your own environment is not sent
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub(crate) env: Vec<(String, String)>,
    /// A file the task reads, relative to the current directory (repeat it): uploaded to the
    /// broker's cache (only if it lacks it) and written into the task's directory at the agent.
    /// It must exist and be a regular file; no `..`
    #[arg(long = "input", value_name = "PATH")]
    pub(crate) inputs: Vec<PathBuf>,
    /// A file the task writes, relative to its directory (repeat it): after a successful run it
    /// is fetched and written into the current directory (atomically); not produced fails the
    /// task. Only these are ever written here. No absolute path, no `..`
    #[arg(long = "output", value_name = "PATH")]
    pub(crate) outputs: Vec<PathBuf>,
    /// The command (never run through a shell)
    #[arg(last = true, required = true, value_name = "ARGV")]
    pub(crate) argv: Vec<String>,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum CertCommand {
    /// Create the cluster's certificate authority: DIR/ca.pem (trusted by all) and DIR/ca.key (keep it private).
    ///
    /// Example: `lardon cert init --dir ~/.config/lardon/ca`
    Init {
        /// Directory for ca.pem and ca.key (created; an existing CA is never replaced)
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
    /// Issue a certificate signed by the CA: OUT/NAME.pem, OUT/NAME.key and a copy of ca.pem.
    ///
    /// A broker's certificate (`--host`, one per name or address its clients dial) authenticates it to
    /// agents and daemons; a client certificate (no `--host`) admits an agent or daemon to the broker.
    ///
    /// Example: `lardon cert issue broker --ca ca --host 10.0.0.5 --host broker.lan --out broker`
    Issue {
        /// Name of the certificate's holder (letters, digits, - _ .)
        name: String,
        /// The CA's directory (from `lardon cert init`)
        #[arg(long, value_name = "DIR")]
        ca: PathBuf,
        /// Issue a broker (server) certificate answering as HOST (repeatable); without it, a client certificate
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
        /// Directory to write into (created)
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Validity in days (1–3650)
        #[arg(long, default_value_t = 365, value_name = "N")]
        days: u32,
    },
    /// Create a join token file (64 hex digits, mode 0600) that the broker demands of every client.
    ///
    /// Example: `lardon cert token --out join.token`
    Token {
        /// File to create (an existing one is never overwritten)
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Everything a one-machine trial of the secured cluster needs, in one directory: DIR/ca
    /// (the CA), DIR/broker (a broker certificate for --host), DIR/client (one client
    /// certificate, named `client`, for agents and submitters alike) and DIR/join.token; then
    /// prints the commands that use them. For more machines, issue one client certificate each.
    ///
    /// Example: `lardon cert trial --dir ./tls && lardon broker --listen 127.0.0.1:7710 --tls-dir ./tls/broker --join-token-file ./tls/join.token`
    Trial {
        /// Directory to create them in (nothing already there is overwritten)
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// The address the broker is dialled at (repeat for several)
        #[arg(long = "host", value_name = "HOST", default_value = "127.0.0.1")]
        hosts: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct IdsArgs {
    /// Task ids
    #[arg(required = true, value_name = "ID")]
    pub(crate) ids: Vec<String>,
    /// Print the results as JSON
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Enforce {
    /// Measure only
    Off,
    /// Limit with slack
    Soft,
    /// Limit at the contract
    Hard,
}

#[derive(Debug, Args)]
pub(crate) struct DaemonArgs {
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9184)
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_addr: Option<SocketAddr>,
    /// Memory enforcement through cgroups [default: the policy's]
    #[arg(long, value_enum)]
    pub(crate) enforce: Option<Enforce>,
    /// Log level or filter: error, warn, info (default), debug (every
    /// decision), trace, or directives like `lardon_daemon=debug,info`
    /// [default: $RUST_LOG, else info]
    #[arg(long, value_name = "LEVEL")]
    pub(crate) log_level: Option<String>,
    /// Write the log to FILE instead of standard error and
    /// <state dir>/daemon.log; `-` for standard error only (systemd)
    #[arg(long, value_name = "FILE")]
    pub(crate) log_file: Option<PathBuf>,
    /// Rotate the log file past this size (e.g. 64MiB; 0: never): it
    /// becomes FILE.1, the older ones FILE.2 … up to --log-keep
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "16MiB")]
    pub(crate) log_max_size: u64,
    /// Rotated log files kept (FILE.1 … FILE.N; 0: the file is emptied instead)
    #[arg(long, value_name = "N", value_parser = parse_u32, default_value_t = crate::logging::DEFAULT_KEEP)]
    pub(crate) log_keep: u32,
    /// Testing aid: govern a simulated host of MEMORY,CPUS (e.g. 4GiB,2)
    /// instead of the real one. Budgets and pressure are fixed; commands
    /// still really run. For the demo and tests that need a scripted host,
    /// never for real work.
    #[arg(long, value_name = "MEMORY,CPUS", value_parser = parse_host)]
    pub(crate) simulate_host: Option<(u64, u32)>,
    /// Policy file (TOML) applied at start, as `lardon policy --set` would: policy keys
    /// (`max_running = 4`) and `offload = { prefer = "local" | "remote" | "balance", max_retries = N }`
    #[arg(long, value_name = "FILE")]
    pub(crate) policy: Option<PathBuf>,
    /// Offload shippable tasks (`submit --capability … --shippable`) to this broker (HOST:PORT):
    /// they run at its agents when the policy prefers remote or this host would make them wait,
    /// and here whenever the broker cannot run them
    #[arg(long, value_name = "ADDR")]
    pub(crate) broker: Option<String>,
    /// With --broker: heartbeat interval (at most the broker's)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms, default_value = "5s", requires = "broker")]
    pub(crate) broker_heartbeat: u64,
    /// With --broker: shipped tasks run here once no broker has answered for this long
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms, default_value = "10s", requires = "broker")]
    pub(crate) broker_timeout: u64,
    #[command(flatten)]
    pub(crate) security: ClusterSecurity,
}

// What a task needs: shared by `submit` and the workload file. (A plain
// comment: see `ClusterSecurity`.)
#[derive(Debug, Args, Default, Clone)]
pub(crate) struct NeedsArgs {
    /// Fixed memory per run (e.g. 2GiB, 512MiB)
    #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_hyphen_values = true)]
    pub(crate) mem: Option<u64>,
    /// Extra memory per item of a batch (e.g. 50MiB)
    #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_hyphen_values = true)]
    pub(crate) mem_per_item: Option<u64>,
    /// Total items: makes this a batched task
    #[arg(long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub(crate) items: Option<u64>,
    /// Batch range MIN..MAX (or N) of items per run
    #[arg(long, value_name = "MIN..MAX", value_parser = parse_batch)]
    pub(crate) batch: Option<(u64, u64)>,
    /// GPU memory (asks for one GPU slot)
    #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_hyphen_values = true)]
    pub(crate) gpu_mem: Option<u64>,
    /// CPUs wanted (e.g. 2, 0.5, 250m)
    #[arg(long, value_name = "CPUS", value_parser = parse_cpu, allow_hyphen_values = true)]
    pub(crate) cpus: Option<u32>,
    /// IO slots
    #[arg(long, value_name = "N", value_parser = parse_u32, allow_hyphen_values = true)]
    pub(crate) io: Option<u32>,
    /// Scratch space to lease (e.g. 10GiB)
    #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_hyphen_values = true)]
    pub(crate) scratch: Option<u64>,
    /// Class for learning (a-z 0-9 . _ -): tasks of a class share measured peaks
    #[arg(long, value_name = "NAME")]
    pub(crate) class: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    #[command(flatten)]
    pub(crate) needs: NeedsArgs,
    /// Higher runs first
    #[arg(long, value_name = "N", value_parser = parse_i32, allow_negative_numbers = true)]
    pub(crate) priority: Option<i32>,
    /// Start only after this task succeeded; repeat for several
    #[arg(long, value_name = "ID")]
    pub(crate) after: Vec<String>,
    /// A name shown in `status`
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Working directory [default: the current one]
    #[arg(long, value_name = "DIR")]
    pub(crate) cwd: Option<PathBuf>,
    /// Environment variable KEY=VALUE, set over your environment; repeat for several
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub(crate) env: Vec<(String, String)>,
    /// Start from an empty environment instead of yours (only --env and
    /// Lardon's own LARDON_* are set)
    #[arg(long)]
    pub(crate) env_clear: bool,
    /// Fail instead of rerunning if the daemon is interrupted while it runs
    #[arg(long)]
    pub(crate) no_retry: bool,
    /// Fail when a run is killed at its memory limit, instead of running it
    /// again at the size learned from the kill (a smaller batch, or a larger
    /// grant; at most 3 times)
    #[arg(long)]
    pub(crate) no_oom_retry: bool,
    /// Submit in the paused state
    #[arg(long)]
    pub(crate) paused: bool,
    /// Where it runs: `local` (this host, admitted by the daemon) or
    /// `slurm` (its own `sbatch` job, `--mem` from what its class learned;
    /// the daemon needs Slurm's client commands and SLURM_CONF)
    #[arg(long, value_enum, default_value_t = EngineArg::Local)]
    pub(crate) engine: EngineArg,
    /// What it needs of a cluster agent, NAME[@VERSION][:TARGET] (`/TARGET` also accepted);
    /// with --shippable
    #[arg(long, value_name = "CAP", requires = "shippable")]
    pub(crate) capability: Option<String>,
    /// It may run at a cluster agent declaring --capability, when the daemon has a broker
    /// (`lardon daemon --broker`); it runs here otherwise
    #[arg(long, requires = "capability")]
    pub(crate) shippable: bool,
    /// Kill a run's whole process tree once it has run this long (e.g. 30s, 2h; a batched
    /// task's: each batch run); the task fails with reason `timeout`. A shippable task
    /// without --deadline gets it as its deadline from now
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    pub(crate) timeout: Option<u64>,
    /// Run a task killed at its timeout again, up to N times, before it fails
    #[arg(long, value_name = "N", value_parser = parse_u32, requires = "timeout")]
    pub(crate) retry_on_timeout: Option<u32>,
    /// A command run with `sh -c CMD` once the task's end is recorded, in its working directory
    /// and environment, with LARDON_TASK_ID, LARDON_TASK_STATE (completed, failed, cancelled),
    /// LARDON_EXIT_CODE (empty: none), LARDON_TASK_NAME, LARDON_GROUP and LARDON_HOOK_ATTEMPT
    /// set; limited by the policy's `on_end_timeout`. Its exit and output show in `status ID`;
    /// it never changes the task's state. Without it: the policy's `on_end`
    #[arg(long, value_name = "CMD")]
    pub(crate) on_end: Option<String>,
    /// Kill it past this long from now (e.g. 10m), at the agent it ships to; needs --shippable
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms, requires = "shippable")]
    pub(crate) deadline: Option<u64>,
    /// A file the task reads, relative to its working directory (repeat for several); needs
    /// --shippable. When it ships, the file is uploaded to the broker's cache (only if the broker
    /// lacks it) and written into the task's directory at the agent. It must exist now and be a
    /// regular file; no `..`
    #[arg(long = "input", value_name = "PATH", requires = "shippable")]
    pub(crate) inputs: Vec<PathBuf>,
    /// A file the task writes, relative to its working directory (repeat for several); needs
    /// --shippable. After a run at an agent it is fetched and written into the working
    /// directory (atomically: a temporary file, then a rename) before the task is COMPLETED;
    /// not produced fails the task. No absolute path, no `..`
    #[arg(long = "output", value_name = "PATH", requires = "shippable")]
    pub(crate) outputs: Vec<PathBuf>,
    /// One task per line of FILE (`-` or nothing: standard input), as GNU
    /// parallel does: in the command and --name, `{}` is the line and `{#}`
    /// its number; without `{}` the line is the last argument. Blank lines
    /// are skipped. All tasks go in one request and one transaction
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub(crate) each: Option<PathBuf>,
    /// Put the task (every task of an --each call) in this group (1-64 of A-Z a-z 0-9 . _ -).
    /// Default: inside a task, the task's group (LARDON_GROUP); an --each call elsewhere gets a
    /// group of its own, `each-<first id>`
    #[arg(long, value_name = "NAME", value_parser = parse_group)]
    pub(crate) group: Option<String>,
    /// Print the task as JSON instead of its id
    #[arg(long)]
    pub(crate) json: bool,
    /// The command and its arguments (after `--`)
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<String>,
}

/// `submit --engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum EngineArg {
    /// This host.
    Local,
    /// One Slurm job per task (native mode).
    Slurm,
}

#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// Write the report (JSON: exit, signal, wall time, peak) here
    #[arg(long, value_name = "FILE")]
    pub(crate) report: PathBuf,
    /// The command and its arguments (after `--`)
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ExerciseArgs {
    /// Memory to allocate and touch (every page written)
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "64MiB")]
    pub(crate) mem: u64,
    /// Extra memory per item of the batch
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "0")]
    pub(crate) mem_per_item: u64,
    /// How long to hold the memory (seconds, fractions allowed)
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = parse_secs, allow_hyphen_values = true)]
    pub(crate) secs: f64,
    /// Total items: process LARDON_BATCH_SIZE items from LARDON_ITEM_OFFSET
    #[arg(long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub(crate) items: Option<u64>,
    /// Exit with this code at the end (to demonstrate failures)
    #[arg(long, value_name = "CODE", default_value = "0")]
    pub(crate) exit_code: u8,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum ScratchCommand {
    /// Register a directory as a scratch volume.
    ///
    /// Example: `lardon scratch add /mnt/nvme --name nvme --capacity 200GiB --hook 'umount /mnt/nvme'`
    Add {
        /// The directory
        path: PathBuf,
        /// Volume name [default: last path component]
        #[arg(long)]
        name: Option<String>,
        /// Cap on what may be leased [default: the filesystem's free space]
        #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_hyphen_values = true)]
        capacity: Option<u64>,
        /// Command line run by `sh -c` on drain, once the last lease ended (e.g. 'umount /mnt/nvme')
        #[arg(long = "hook", value_name = "CMD", conflicts_with = "hook_argv")]
        hook: Option<String>,
        /// The drain hook as a program and its arguments after `--`, run without a shell
        #[arg(last = true, value_name = "HOOK")]
        hook_argv: Vec<String>,
    },
    /// Refuse new leases, wait for current ones, sync, run the hook: then it is safe to unplug.
    ///
    /// Waits until the volume is `safe_to_unplug` (exit 0) or the drain
    /// failed or was cancelled (exit 1), printing the volume's line at
    /// the start and at the end; `--no-wait` returns once the drain has
    /// begun (follow it with `lardon scratch status`).
    ///
    /// Example: `lardon scratch drain nvme && umount /mnt/nvme`
    Drain {
        /// Volume name
        name: String,
        /// Return once the drain has begun instead of waiting for `safe_to_unplug`
        #[arg(long)]
        no_wait: bool,
    },
    /// Return a draining volume to service.
    ///
    /// Example: `lardon scratch cancel-drain nvme`
    CancelDrain {
        /// Volume name
        name: String,
    },
    /// Unregister a volume.
    ///
    /// Example: `lardon scratch remove nvme`
    Remove {
        /// Volume name
        name: String,
    },
    /// Volumes, their state and leases.
    ///
    /// Example: `lardon scratch status --json`
    Status {
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every verb and sub-verb (`group add`, `scratch drain`, …) teaches by
    /// an example in its `--help`: a verb added without one fails here.
    #[test]
    fn every_verb_has_an_example_in_its_help() {
        fn walk(cmd: &mut clap::Command, path: &str, missing: &mut Vec<String>, seen: &mut usize) {
            for sub in cmd.get_subcommands_mut() {
                if sub.get_name() == "help" {
                    continue;
                }
                let name = format!("{path} {}", sub.get_name()).trim().to_owned();
                *seen += 1;
                sub.build();
                if !sub.render_long_help().to_string().contains("Example") {
                    missing.push(name.clone());
                }
                walk(sub, &name, missing, seen);
            }
        }
        let mut cmd = Cli::command();
        cmd.build();
        let (mut missing, mut seen) = (Vec::new(), 0);
        walk(&mut cmd, "", &mut missing, &mut seen);
        assert!(seen > 30, "only {seen} verbs walked");
        assert!(missing.is_empty(), "no example in the --help of: {missing:?}");
    }

    /// The subcommands' arguments are built lazily (`defer`), after each
    /// subcommand's own help text was set: a doc comment on an `Args`
    /// struct they flatten would then replace that text. Every subcommand
    /// must read the same before and after its arguments are built.
    #[test]
    fn deferred_arguments_keep_each_subcommands_own_help_text() {
        fn texts(c: &clap::Command) -> (Option<String>, Option<String>) {
            (c.get_about().map(ToString::to_string), c.get_long_about().map(ToString::to_string))
        }
        fn check(unbuilt: &clap::Command, path: &str) {
            let mut built = unbuilt.clone();
            built.build();
            assert_eq!(texts(unbuilt), texts(&built), "the help text of `{path}` changed when built");
        }
        let cli = Cli::command();
        let mut checked = 0;
        for sub in cli.get_subcommands() {
            check(sub, &format!("lardon {}", sub.get_name()));
            checked += 1;
        }
        assert!(checked > 20, "only {checked} subcommands found");
        assert_eq!(
            cli.find_subcommand("submit").and_then(|c| c.clone().get_about().map(ToString::to_string)),
            Some("Queue a command with its resource needs; prints the task id".to_owned())
        );
    }
}
