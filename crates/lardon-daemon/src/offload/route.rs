//! The pure parts of offload: where a shippable task goes, the remote ids,
//! and what each answer means for the task (the tasks out are in the
//! kernel's placement table, which makes an answer count once).

use lardon_submit::client::Answer;

use crate::settings::OffloadPrefer;
use crate::spec::TaskId;

/// Where a shippable task runs, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// At an agent; the words say why (for its course).
    Remote(String),
    /// Here: it joins the local queue (and ships later if it waits there
    /// longer than `offload_wait_ms`).
    Local,
}

/// What the local Governor, asked without reserving, says of a task now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Here {
    /// It would start now.
    Admit,
    /// It would wait; the reason code and message.
    Wait(String),
    /// It can never run here; the reason code and message.
    Reject(String),
}

/// The routing rule when a task is queued (docs/DESIGN.md §14): `remote`
/// always ships; a task this host rejects ships; a task it would make wait
/// ships now only with `wait_ms == 0` (else it joins the local queue, and
/// [`overdue`] ships it later); a task it would admit stays, except under
/// `balance`, where `balance` (the rule [`balance`]) may ship it.
pub(crate) fn route(
    prefer: OffloadPrefer,
    wait_ms: u64,
    here: impl FnOnce() -> Here,
    balance: impl FnOnce() -> Option<String>,
) -> Route {
    if prefer == OffloadPrefer::Remote {
        return Route::Remote("offload prefer = remote".to_owned());
    }
    match here() {
        Here::Reject(why) => Route::Remote(format!("this host can never run it ({why})")),
        Here::Wait(why) if wait_ms == 0 => Route::Remote(format!("this host would make it wait ({why})")),
        Here::Wait(_) => Route::Local,
        Here::Admit if prefer == OffloadPrefer::Balance => balance().map_or(Route::Local, Route::Remote),
        Here::Admit => Route::Local,
    }
}

/// A shippable task waiting in the local queue: whether it ships now, and
/// why. It ships once it has been queued here `wait_ms` or more and the
/// local Governor's latest word on it is WAIT (`waiting`: that WAIT's
/// reason), as long as the broker is connected; `None` keeps it here for
/// now (look again later).
pub(crate) fn overdue(
    queued_for_ms: u64,
    wait_ms: u64,
    waiting: Option<&str>,
    broker_connected: bool,
) -> Option<String> {
    let why = waiting?;
    (queued_for_ms >= wait_ms && broker_connected).then(|| {
        format!("it waited {queued_for_ms} ms in the local queue ({why}; offload wait_ms = {wait_ms})")
    })
}

/// How busy a side is: `used` of `total` (CPUs in thousandths here,
/// tokens at the agents).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Load {
    pub(crate) used: u64,
    pub(crate) total: u64,
}

impl Load {
    fn percent(self) -> u64 {
        self.used.saturating_mul(100).checked_div(self.total).unwrap_or(100)
    }
}

/// The `balance` rule for a task this host would admit: ship it when an
/// agent serving its capability has a free token (`remote`: tokens held,
/// queued ones counted as held, of all the serving agents' tokens) and
/// this host is busier than those agents (a larger fraction used); keep
/// it here otherwise — also when the agents' load is unknown (`None`).
/// Returns why it ships.
pub(crate) fn balance(local: Load, remote: Option<Load>, capability: &str) -> Option<String> {
    let remote = remote?;
    if remote.used >= remote.total || local.total == 0 {
        return None;
    }
    // local.used / local.total > remote.used / remote.total, exactly.
    let busier =
        u128::from(local.used) * u128::from(remote.total) > u128::from(remote.used) * u128::from(local.total);
    busier.then(|| {
        format!(
            "balance: this host is {}% busy, the agents for {capability} {}% ({} of {} tokens held)",
            local.percent(),
            remote.percent(),
            remote.used,
            remote.total
        )
    })
}

/// The id a task carries at the broker: unique across daemons (the
/// submitter id names this daemon), attempts and re-shipments, since the
/// broker answers a finished id again rather than run it.
pub(crate) fn remote_id(submitter: &str, id: TaskId, attempt: u32, retry: u32) -> String {
    format!("{submitter}:t{id}:a{attempt}:r{retry}")
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
    fn remote_always_ships_a_rejected_task_ships_and_a_wait_ships_at_once_only_with_wait_ms_0() {
        let never = || -> Option<String> { panic!("balance asked") };
        assert_eq!(
            route(OffloadPrefer::Remote, 0, || panic!("not asked"), never),
            Route::Remote("offload prefer = remote".into())
        );
        for prefer in [OffloadPrefer::Local, OffloadPrefer::Balance] {
            let wait = || Here::Wait("max_running: 1 task running".into());
            let Route::Remote(why) = route(prefer, 0, wait, never) else { panic!("{prefer}: ships at once") };
            assert!(why.contains("would make it wait (max_running"), "{why}");
            assert_eq!(route(prefer, 2000, wait, never), Route::Local, "{prefer}: joins the queue");
            let reject = || Here::Reject("memory: needs 64 GiB".into());
            let Route::Remote(why) = route(prefer, 2000, reject, never) else { panic!("{prefer}: rejected") };
            assert!(why.contains("can never run it (memory"), "{why}");
        }
        assert_eq!(route(OffloadPrefer::Local, 2000, || Here::Admit, never), Route::Local);
        let ship = || Some("balance: …".to_owned());
        assert_eq!(
            route(OffloadPrefer::Balance, 2000, || Here::Admit, ship),
            Route::Remote("balance: …".into())
        );
        assert_eq!(route(OffloadPrefer::Balance, 2000, || Here::Admit, || None), Route::Local);
    }

    #[test]
    fn a_queued_task_ships_once_it_waited_wait_ms_told_wait_with_a_broker() {
        assert_eq!(overdue(1999, 2000, Some("max_running"), true), None, "not yet");
        let why = overdue(2000, 2000, Some("max_running: 1 running"), true).unwrap();
        assert!(why.contains("waited 2000 ms") && why.contains("max_running: 1 running"), "{why}");
        assert_eq!(overdue(5000, 2000, None, true), None, "not told WAIT (not yet evaluated, or admitted)");
        assert_eq!(overdue(5000, 2000, Some("memory"), false), None, "no broker connected");
        assert!(overdue(0, 0, Some("memory"), true).is_some(), "0: at the first WAIT");
    }

    #[test]
    fn balance_ships_only_to_free_tokens_from_a_busier_host() {
        let l = |used, total| Load { used, total };
        let cap = "sh@1:*";
        // 3 of 4 CPUs here, 1 of 4 tokens there: ship.
        let why = balance(l(3000, 4000), Some(l(1, 4)), cap).unwrap();
        assert_eq!(why, "balance: this host is 75% busy, the agents for sh@1:* 25% (1 of 4 tokens held)");
        assert_eq!(balance(l(0, 4000), Some(l(0, 4)), cap), None, "both idle: here");
        assert_eq!(balance(l(2000, 4000), Some(l(2, 4)), cap), None, "as busy: here");
        assert_eq!(balance(l(1000, 4000), Some(l(2, 4)), cap), None, "less busy: here");
        assert_eq!(balance(l(4000, 4000), Some(l(4, 4)), cap), None, "no free token");
        assert_eq!(balance(l(4000, 4000), Some(l(0, 0)), cap), None, "no agent");
        assert_eq!(balance(l(4000, 4000), None, cap), None, "unknown remote load");
        assert!(balance(l(1, 4000), Some(l(0, 1)), cap).is_some(), "any load here against idle agents");
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
        assert!(lardon_cluster_core::TaskId::new(&id).is_ok());
    }
}
