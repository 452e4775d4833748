//! The Slurm provider's script and its reading of job states (the
//! parsers of Slurm's answers are the `lardon-slurm` adapter's, tested
//! there on answers recorded from Debian's Slurm 22.05).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use lardon_slurm::parse_squeue;

use super::slurm::{SlurmError, batch_script, states};
use super::*;

/// An `squeue --format=%i|%T|%r` answer in Slurm 22.05's words: jobs 3
/// CANCELLED, 4 COMPLETED, 5 CANCELLED, 6 and 7 RUNNING, 8 PENDING
/// (Resources), 9 COMPLETING, 10 CONFIGURING.
const MIXED: &str = "3|CANCELLED|None\n4|COMPLETED|None\n5|CANCELLED by 0|None\n6|RUNNING|None\n\
                     7|RUNNING|None\n8|PENDING|Resources\n9|COMPLETING|None\n10|CONFIGURING|None\n";

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
fn squeue_states_map_to_allocation_states_and_an_unlisted_job_is_over() {
    let answer = parse_squeue(MIXED);
    let got = states(&answer, &ids(&["8", "6", "4", "3", "12345", "9", "10", "not-a-job"])).unwrap();
    assert_eq!(
        got,
        [
            (AllocationId("8".into()), AllocState::Queued),
            (AllocationId("6".into()), AllocState::Running),
            (AllocationId("4".into()), AllocState::Ended),
            (AllocationId("3".into()), AllocState::Ended),
            (AllocationId("12345".into()), AllocState::Ended),
            (AllocationId("9".into()), AllocState::Ended,),
            (AllocationId("10".into()), AllocState::Queued),
            (AllocationId("not-a-job".into()), AllocState::Ended),
        ]
    );
    // No ids: nothing to ask.
    assert_eq!(states(&answer, &[]).unwrap(), []);
}

#[test]
fn a_state_word_not_understood_is_an_error_naming_it() {
    let answer = parse_squeue("7|DANCING|None\n");
    let e = states(&answer, &ids(&["7"])).unwrap_err();
    assert!(matches!(e, SlurmError::BadStatus(_)), "{e}");
    assert!(e.to_string().contains("job 7: unknown state"), "{e}");
    // A job not asked about is not judged.
    assert_eq!(states(&answer, &ids(&["8"])).unwrap(), [(AllocationId("8".into()), AllocState::Ended)]);
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
        end=\"${SLURM_JOB_END_TIME:-$(( $(date +%s) + 93661 ))}\"\n\
        exec '/opt/lardon/bin/lardon' 'agent' '--allocation' '--broker' '10.0.0.5:7700' \
        '--join-token-file' '/etc/lardon/join token' '--idle-exit' '300000ms' \
        '--capability' 'gcc@13:x86_64-linux-gnu' --id \"slurm-${SLURM_JOB_ID}\" --ends-at \"$end\"\n";
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
        ) && last.ends_with(" --ends-at \"$end\""),
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
