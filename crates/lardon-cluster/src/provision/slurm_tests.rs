//! The Slurm provider's script and its parsers, on outputs recorded from
//! Debian's Slurm 22.05 on the CI machine (paths in them rewritten).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use super::slurm::{SlurmError, batch_script, parse_job_id, parse_squeue_json};
use super::*;

/// `squeue --json` with jobs 3 CANCELLED, 4 COMPLETED, 5 CANCELLED, 6 and 7
/// RUNNING, 8 PENDING (Resources).
const MIXED: &str = include_str!("fixtures/squeue-22.05-mixed.json");

fn ids(list: &[&str]) -> Vec<AllocationId> {
    list.iter().map(|s| AllocationId((*s).to_owned())).collect()
}

fn launch() -> AgentLaunch {
    AgentLaunch {
        program: PathBuf::from("/opt/lardon/bin/lardon"),
        broker: "10.0.0.5:7700".into(),
        join_token_file: Some(PathBuf::from("/etc/lardon/join token")),
        tls_dir: None,
        tls_name: None,
        idle_exit: Duration::from_secs(300),
        heartbeat: None,
    }
}

fn config(nodes: u32, extras: &[&str]) -> SlurmConfig {
    let shape = Shape {
        name: "small".into(),
        memory: 1536 << 20,
        cpu_millis: 1500,
        nodes,
        walltime: Duration::from_secs(26 * 3600 + 61),
        capabilities: vec![crate::Capability::parse("gcc@13:x86_64-linux-gnu").unwrap()],
    };
    SlurmConfig {
        shapes: vec![SlurmShape { shape, extras: extras.iter().map(|e| (*e).to_owned()).collect() }],
        launch: launch(),
        grace: Duration::from_secs(120),
        output_dir: Some(PathBuf::from("/var/log/lardon")),
        job_prefix: "lardon".into(),
    }
}

#[test]
fn squeue_json_states_map_to_allocation_states_and_an_unlisted_job_is_over() {
    let states = parse_squeue_json(MIXED, &ids(&["8", "6", "4", "3", "12345"])).unwrap();
    assert_eq!(
        states,
        [
            (AllocationId("8".into()), AllocState::Queued),
            (AllocationId("6".into()), AllocState::Running),
            (AllocationId("4".into()), AllocState::Ended),
            (AllocationId("3".into()), AllocState::Ended),
            (AllocationId("12345".into()), AllocState::Ended),
        ]
    );
}

#[test]
fn later_slurms_list_of_state_words_is_read_too() {
    let text = r#"{"jobs": [{"job_id": 41, "job_state": ["RUNNING", "COMPLETING"]},
                            {"job_id": 42, "job_state": ["PENDING"]}]}"#;
    let states = parse_squeue_json(text, &ids(&["41", "42"])).unwrap();
    assert_eq!(states[0].1, AllocState::Running, "the first known word counts");
    assert_eq!(states[1].1, AllocState::Queued);
}

#[test]
fn a_squeue_answer_not_understood_is_an_error_naming_what() {
    let e = |t: &str| parse_squeue_json(t, &ids(&["1"])).unwrap_err().to_string();
    assert!(e("squeue: error: invalid").starts_with("squeue --json: not JSON"), "{}", e("x"));
    assert_eq!(e(r#"{"errors": []}"#), "squeue --json: no `jobs` list");
    assert_eq!(
        e(r#"{"jobs": [{"job_id": "7", "job_state": "RUNNING"}]}"#),
        "squeue --json: a job without a numeric `job_id`"
    );
    assert!(e(r#"{"jobs": [{"job_id": 7, "job_state": "DANCING"}]}"#).contains("job 7: unknown `job_state`"));
    // No ids: nothing to ask.
    assert_eq!(parse_squeue_json(MIXED, &[]).unwrap(), []);
}

#[test]
fn sbatch_parsable_answers_are_parsed_strictly() {
    // Recorded: `sbatch --parsable` printed `3\n`.
    assert_eq!(parse_job_id("3\n").unwrap(), AllocationId("3".into()));
    assert_eq!(parse_job_id("1234;cluster-a\n").unwrap(), AllocationId("1234".into()));
    for bad in ["", "\n", "Submitted batch job 3", "3 4", "x;c", "3\n4\n"] {
        assert!(matches!(parse_job_id(bad), Err(SlurmError::BadJobId(_))), "{bad:?}");
    }
}

#[test]
fn the_batch_script_sizes_the_job_from_its_shape_and_runs_the_agent_with_idle_exit() {
    let c = config(1, &["--partition=debug", "--account=lab"]);
    let script = batch_script(&c.shapes[0], &c).unwrap();
    let expected = "#!/bin/sh\n\
        #SBATCH --job-name=lardon-small\n\
        #SBATCH --nodes=1\n\
        #SBATCH --ntasks-per-node=1\n\
        #SBATCH --cpus-per-task=2\n\
        #SBATCH --mem=1536M\n\
        #SBATCH --time=1-02:01:01\n\
        #SBATCH --signal=B:TERM@120\n\
        #SBATCH --output=/var/log/lardon/lardon-agent-%j.out\n\
        #SBATCH --partition=debug\n\
        #SBATCH --account=lab\n\
        exec '/opt/lardon/bin/lardon' 'agent' '--allocation' '--broker' '10.0.0.5:7700' \
        '--join-token-file' '/etc/lardon/join token' '--idle-exit' '300000ms' \
        '--capability' 'gcc@13:x86_64-linux-gnu' --id \"slurm-${SLURM_JOB_ID}\"\n";
    assert_eq!(script, expected);
}

#[test]
fn a_multi_node_shape_runs_one_agent_per_node_through_srun() {
    let c = config(2, &[]);
    let script = batch_script(&c.shapes[0], &c).unwrap();
    assert!(script.contains("#SBATCH --nodes=2\n"), "{script}");
    let last = script.lines().last().unwrap();
    assert!(
        last.starts_with(
            "exec srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1 \
             sh -c 'exec \"$@\" --id \"slurm-${SLURM_JOB_ID}-${SLURM_PROCID}\"' lardon-agent '/opt/lardon/bin/lardon' 'agent' '--allocation'"
        ),
        "{last}"
    );
}

#[test]
fn a_shape_that_cannot_be_scripted_is_refused_naming_it() {
    let c = config(1, &["--partition=a\n#SBATCH --uid=0"]);
    let e = SlurmProvider::new(c).unwrap_err().to_string();
    assert!(e.starts_with("shape small: extras:"), "{e}");
    let mut c = config(1, &[]);
    c.shapes[0].shape.name = "a b".into();
    assert!(SlurmProvider::new(c).unwrap_err().to_string().starts_with("shape a b: name:"));
    // A quote in an argument is quoted, not a way out of the word.
    let mut c = config(1, &[]);
    c.launch.broker = "x' ; rm -rf / ; '".into();
    let script = batch_script(&c.shapes[0], &c).unwrap();
    assert!(script.contains(r"'x'\'' ; rm -rf / ; '\'''"), "{script}");
}
