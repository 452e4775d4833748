//! The pure parts of offload: where a shippable task goes, the remote ids
//! and run handles, the registry of tasks out at the broker (which makes an
//! answer count once), and what each answer means for the task.

use std::collections::HashMap;

use lardon_cluster::client::Answer;

use crate::settings::OffloadPrefer;
use crate::spec::TaskId;

/// The run-handle prefix of a task out at the broker
/// (`offload:<remote id>`), so that a restarted daemon asks the broker for
/// the same id again instead of looking for a process.
pub(crate) const HANDLE_PREFIX: &str = "offload:";

/// Where a shippable task runs, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// At an agent; the words say why (for its course).
    Remote(String),
    /// Here.
    Local,
}

/// The routing rule (docs/DESIGN.md §14): `remote` always ships; `local`
/// and `balance` ship only a task the local Governor would not admit now
/// (`refused` is its WAIT or REJECT message, `None` when it would admit).
pub(crate) fn route(prefer: OffloadPrefer, refused: impl FnOnce() -> Option<String>) -> Route {
    match prefer {
        OffloadPrefer::Remote => Route::Remote("offload prefer = remote".to_owned()),
        OffloadPrefer::Local | OffloadPrefer::Balance => match refused() {
            Some(why) => Route::Remote(format!("this host would make it wait ({why})")),
            None => Route::Local,
        },
    }
}

/// The id a task carries at the broker: unique across daemons (the
/// submitter id names this daemon), attempts and re-shipments, since the
/// broker answers a finished id again rather than run it.
pub(crate) fn remote_id(submitter: &str, id: TaskId, attempt: u32, retry: u32) -> String {
    format!("{submitter}:t{id}:a{attempt}:r{retry}")
}

/// The run handle of a task out as `remote`.
pub(crate) fn handle(remote: &str) -> String {
    format!("{HANDLE_PREFIX}{remote}")
}

/// The remote id in a run handle written by [`handle`], if it is one.
pub(crate) fn remote_of_handle(handle: &str) -> Option<&str> {
    handle.strip_prefix(HANDLE_PREFIX).filter(|r| !r.is_empty())
}

/// A task out at the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Out {
    /// Its id there.
    pub(crate) remote: String,
    /// Re-shipments so far.
    pub(crate) retry: u32,
}

/// The tasks out at the broker. An answer counts only while its task is
/// out under the same remote id: taking it removes the entry, so a second
/// answer for it (or one arriving after a cancel) finds nothing and is
/// dropped — a result is recorded once.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    out: HashMap<TaskId, Out>,
}

impl Registry {
    /// Records `id` as out under `out.remote` (replacing an earlier ship).
    pub(crate) fn put(&mut self, id: TaskId, out: Out) {
        self.out.insert(id, out);
    }

    /// Takes `id` if it is out as `remote`; `None` for a duplicate or a
    /// stale answer.
    pub(crate) fn take(&mut self, id: TaskId, remote: &str) -> Option<Out> {
        if self.out.get(&id).is_some_and(|o| o.remote == remote) { self.out.remove(&id) } else { None }
    }

    /// Takes `id` whatever its remote id (a cancel).
    pub(crate) fn take_any(&mut self, id: TaskId) -> Option<Out> {
        self.out.remove(&id)
    }

    /// Whether `id` is out.
    pub(crate) fn contains(&self, id: TaskId) -> bool {
        self.out.contains_key(&id)
    }
}

/// What an answer does to its task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It ran at an agent (or came from the broker's cache): record it.
    Ran,
    /// It ends without running anywhere: `cancelled` or failed, and why.
    End { cancelled: bool, reason: String },
    /// Ship it again under a new id (the broker handed it back and retries
    /// are left); the words say why.
    Reship(String),
    /// Run it here: a course reason code and the words.
    Local { code: &'static str, message: String },
}

/// The verdict on `answer` for a task shipped `retry` times to `broker`
/// with `capability`, under `max_retries`. Every infrastructure failure
/// runs the task here — never a hang, never a loss.
pub(crate) fn verdict(
    answer: &Answer,
    retry: u32,
    max_retries: u32,
    broker: &str,
    capability: &str,
) -> Verdict {
    match answer {
        Answer::Done(_) => Verdict::Ran,
        Answer::Cancelled => Verdict::End { cancelled: true, reason: "cancelled at the broker".into() },
        Answer::DeadlinePassed => {
            Verdict::End { cancelled: false, reason: "deadline passed before an agent started it".into() }
        }
        Answer::RunLocally(why) if retry < max_retries => Verdict::Reship(format!(
            "the broker handed it back ({why}): shipping again (retry {} of {max_retries})",
            retry + 1
        )),
        Answer::RunLocally(why) => Verdict::Local {
            code: "agents_lost",
            message: format!("the broker handed it back ({why}): ran locally"),
        },
        Answer::NoExecutor(why) if !why.is_empty() => {
            Verdict::Local { code: "no_executor", message: format!("no executor ({why}): ran locally") }
        }
        Answer::NoExecutor(_) => Verdict::Local {
            code: "no_executor",
            message: format!("no agent for capability {capability}: ran locally"),
        },
        Answer::Unreachable => Verdict::Local {
            code: "broker_unreachable",
            message: format!("broker {broker} unreachable: ran locally"),
        },
        Answer::Rejected(why) => Verdict::Local {
            code: "broker_rejected",
            message: format!("the broker refused it ({why}): ran locally"),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use lardon_proto::cluster as pb;

    #[test]
    fn remote_always_ships_and_the_others_ship_only_what_would_wait() {
        assert_eq!(route(OffloadPrefer::Remote, || None), Route::Remote("offload prefer = remote".into()));
        for prefer in [OffloadPrefer::Local, OffloadPrefer::Balance] {
            assert_eq!(route(prefer, || None), Route::Local, "{prefer}");
            let Route::Remote(why) = route(prefer, || Some("max_running: 1 task running".into())) else {
                panic!("{prefer}: a task that would wait ships")
            };
            assert!(why.contains("max_running"), "{why}");
        }
    }

    #[test]
    fn an_answer_counts_once_and_only_for_the_current_remote_id() {
        let mut r = Registry::default();
        r.put(TaskId(7), Out { remote: "h:t7:a1:r0".into(), retry: 0 });
        assert_eq!(r.take(TaskId(7), "h:t7:a1:r9"), None, "a stale id");
        assert!(r.take(TaskId(7), "h:t7:a1:r0").is_some());
        assert_eq!(r.take(TaskId(7), "h:t7:a1:r0"), None, "the same answer twice");
        r.put(TaskId(8), Out { remote: "x".into(), retry: 0 });
        assert!(r.take_any(TaskId(8)).is_some());
        assert_eq!(r.take(TaskId(8), "x"), None, "an answer after a cancel");
    }

    #[test]
    fn every_infrastructure_failure_runs_here_and_retries_are_capped() {
        let v = |a: &Answer, retry| verdict(a, retry, 1, "b:1", "sh@*:*");
        assert_eq!(v(&Answer::Done(pb::TaskEnded::default()), 0), Verdict::Ran);
        assert!(matches!(v(&Answer::RunLocally("lost".into()), 0), Verdict::Reship(_)));
        for (answer, code) in [
            (Answer::RunLocally("lost".into()), "agents_lost"),
            (Answer::NoExecutor(String::new()), "no_executor"),
            (Answer::NoExecutor("sh@1:*: no shape fits 4.0 GiB".into()), "no_executor"),
            (Answer::Unreachable, "broker_unreachable"),
            (Answer::Rejected("request.argv: empty".into()), "broker_rejected"),
        ] {
            match v(&answer, 1) {
                Verdict::Local { code: c, message } => {
                    assert_eq!(c, code);
                    assert!(message.ends_with("ran locally"), "{message}");
                }
                other => panic!("{answer:?}: {other:?}"),
            }
        }
        assert!(matches!(v(&Answer::Cancelled, 0), Verdict::End { cancelled: true, .. }));
        assert!(matches!(v(&Answer::DeadlinePassed, 0), Verdict::End { cancelled: false, .. }));
    }

    #[test]
    fn handles_name_the_remote_id() {
        let id = remote_id("host-1a2b", TaskId(3), 2, 1);
        assert_eq!(id, "host-1a2b:t3:a2:r1");
        assert!(lardon_cluster::TaskId::new(&id).is_ok());
        assert_eq!(remote_of_handle(&handle(&id)), Some(id.as_str()));
        assert_eq!(remote_of_handle("offload:"), None);
        assert_eq!(remote_of_handle("slurm:4:r.json"), None);
    }
}
