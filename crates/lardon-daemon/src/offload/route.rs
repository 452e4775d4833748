//! The pure parts of offload: where a shippable task goes, the remote ids,
//! the registry of tasks out at the broker (which makes an
//! answer count once), and what each answer means for the task.

use std::collections::HashMap;
use std::sync::Arc;

use lardon_submit::client::Answer;

use crate::settings::OffloadPrefer;
use crate::spec::{TaskId, TaskSpec};

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

/// A task out at the broker, as the registry holds it: one entry, one
/// lock, and a variant for each step (no sentinel remote id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Out {
    /// Claimed and being shipped, not sent: a cancel that takes it ends it,
    /// and it is then never sent ([`Registry::promote`] fails).
    Shipping {
        /// Re-shipments so far.
        retry: u32,
    },
    /// Shipped under a remote id.
    Sent(Sent),
}

/// A task shipped under a remote id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Its id there.
    pub(crate) remote: String,
    /// Re-shipments so far.
    pub(crate) retry: u32,
    /// Its spec, to run it here on a fallback.
    pub(crate) spec: Arc<TaskSpec>,
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
    /// Takes `id` if it is out as `remote`; `None` for a duplicate or a
    /// stale answer.
    pub(crate) fn take(&mut self, id: TaskId, remote: &str) -> Option<Sent> {
        if !self.is_out_as(id, remote) {
            return None;
        }
        match self.out.remove(&id) {
            Some(Out::Sent(sent)) => Some(sent),
            _ => None,
        }
    }

    /// Claims `id` before it has a remote id (it is being shipped): from
    /// here a cancel finds it ([`Registry::take_any`]), and
    /// [`Registry::promote`] then fails, so it is not sent.
    pub(crate) fn claim(&mut self, id: TaskId, retry: u32) {
        self.out.insert(id, Out::Shipping { retry });
    }

    /// Drops the claim on `id` (it will not be sent); false when a cancel
    /// took it first or it was already promoted.
    pub(crate) fn unclaim(&mut self, id: TaskId) -> bool {
        if matches!(self.out.get(&id), Some(Out::Shipping { .. })) {
            self.out.remove(&id);
            true
        } else {
            false
        }
    }

    /// Gives the claim on `id` its remote id and spec; false when the claim
    /// is gone (cancelled meanwhile: do not send it).
    pub(crate) fn promote(&mut self, id: TaskId, remote: &str, spec: &Arc<TaskSpec>) -> bool {
        match self.out.get_mut(&id) {
            Some(entry @ Out::Shipping { .. }) => {
                let Out::Shipping { retry } = *entry else { return false };
                *entry = Out::Sent(Sent { remote: remote.to_owned(), retry, spec: Arc::clone(spec) });
                true
            }
            _ => false,
        }
    }

    /// Whether `id` is out as `remote` now.
    pub(crate) fn is_out_as(&self, id: TaskId, remote: &str) -> bool {
        matches!(self.out.get(&id), Some(Out::Sent(s)) if s.remote == remote)
    }

    /// Takes `id` whatever its step (a cancel).
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
    fn an_answer_counts_once_and_only_for_the_current_remote_id() {
        let spec = Arc::new(TaskSpec::command(["true"]));
        let mut r = Registry::default();
        r.claim(TaskId(7), 2);
        assert!(r.promote(TaskId(7), "h:t7:a1:r0", &spec));
        assert_eq!(r.take(TaskId(7), "h:t7:a1:r9"), None, "a stale id");
        let sent = r.take(TaskId(7), "h:t7:a1:r0").unwrap();
        assert_eq!((sent.retry, sent.spec), (2, Arc::clone(&spec)), "the claim's retry and the spec");
        assert_eq!(r.take(TaskId(7), "h:t7:a1:r0"), None, "the same answer twice");
        r.claim(TaskId(8), 0);
        assert!(r.promote(TaskId(8), "x", &spec));
        assert!(r.take_any(TaskId(8)).is_some());
        assert_eq!(r.take(TaskId(8), "x"), None, "an answer after a cancel");
    }

    #[test]
    fn a_claim_cancelled_before_its_remote_id_is_never_promoted() {
        let spec = Arc::new(TaskSpec::command(["true"]));
        let mut r = Registry::default();
        r.claim(TaskId(9), 0);
        assert!(r.contains(TaskId(9)), "a cancel finds it");
        assert!(!r.is_out_as(TaskId(9), ""), "a claim is out under no id");
        assert_eq!(r.take(TaskId(9), ""), None, "nor can an answer take it");
        assert!(r.promote(TaskId(9), "h:t9:a1:r0", &spec));
        assert!(r.is_out_as(TaskId(9), "h:t9:a1:r0"));
        assert!(!r.promote(TaskId(9), "h:t9:a1:r1", &spec), "promoted once");
        assert!(!r.unclaim(TaskId(9)), "a sent task is no claim");
        r.claim(TaskId(10), 0);
        assert_eq!(r.take_any(TaskId(10)), Some(Out::Shipping { retry: 0 }));
        assert!(!r.promote(TaskId(10), "h:t10:a1:r0", &spec), "cancelled meanwhile: not sent");
        assert!(!r.unclaim(TaskId(10)), "gone");
        r.claim(TaskId(11), 0);
        assert!(r.unclaim(TaskId(11)));
        assert!(!r.contains(TaskId(11)));
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
