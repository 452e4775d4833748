//! Recorded decisions keep figures and are written only when read: what an
//! observer reads (a view, an event) must still say exactly what the
//! formatters say.

use super::*;
use crate::{DecisionKind, format_bytes, format_cpus};

/// The grant's message and the `max_running` wait's message, as a view and
/// as an event, for a running task and one held back by the cap.
#[test]
fn granted_and_max_running_messages_read_as_written_text() {
    let r = rig_with(QueueConfig::default(), |p| p.max_running = Some(1));
    let (release_a, a_cb) = gated();
    let a = r.queue.submit(Task::new("a", mem(GIB), a_cb)).unwrap();
    r.started(a);
    let (release_b, b_cb) = gated();
    let b = r.queue.submit(Task::new("b", mem(GIB), b_cb)).unwrap();
    let wait = "1 task(s) running, the cap is 1";
    match r.until("b waits", |e| matches!(e, QueueEvent::Decision { id, .. } if *id == b)) {
        QueueEvent::Decision { reason, message, .. } => {
            assert_eq!((reason, message.as_str()), (ReasonCode::MaxRunning, wait));
        }
        _ => unreachable!(),
    }
    let view = r.queue.get(b).unwrap().last_decision.unwrap();
    assert_eq!((view.reason, view.message.as_str()), (ReasonCode::MaxRunning, wait));

    let running = r.queue.get(a).unwrap();
    let c = running.contract.unwrap();
    let granted =
        format!("batch {}, {} memory, {} CPUs", c.batch, format_bytes(c.memory), format_cpus(c.cpu_millis));
    let view = running.last_decision.unwrap();
    assert_eq!((view.kind, view.message.as_str()), (DecisionKind::Admit, granted.as_str()));

    release_a.send(()).unwrap();
    r.started(b);
    release_b.send(()).unwrap();
    r.queue.wait_idle();

    // Ended tasks keep their entry and are viewed when read: the same text,
    // and the state and end they ended with.
    let ended = r.queue.get(a).unwrap();
    assert_eq!((ended.state, ended.last_decision.unwrap().message), (TaskState::Completed, granted.clone()));
    assert!(ended.finished_at.is_some() && ended.contract.is_none());
    let snapshot = r.queue.snapshot();
    let listed: Vec<TaskId> = snapshot.finished.iter().map(|v| v.id).collect();
    assert_eq!(listed, vec![a, b]);
    let removed = r.queue.remove(a).unwrap();
    assert_eq!(removed.last_decision.unwrap().message, granted);
    assert!(r.queue.get(a).is_none());
}

/// Two `max_running` reasons are equal exactly when their figures are,
/// and equal to a written reason with the same text.
#[test]
fn max_running_reasons_compare_by_what_they_say() {
    use crate::decision::Reason;
    let (two, again, three) =
        (Reason::max_running(2, 2), Reason::max_running(2, 2), Reason::max_running(3, 2));
    assert_eq!(two, again);
    assert_ne!(two, three);
    assert_eq!(two, Reason::new(ReasonCode::MaxRunning, "2 task(s) running, the cap is 2"));
    assert_ne!(two, Reason::new(ReasonCode::Memory, "2 task(s) running, the cap is 2"));
    assert_eq!(
        format!("{two:?}"),
        r#"Reason { code: MaxRunning, message: "2 task(s) running, the cap is 2" }"#
    );
}

/// A submitted task's event names it (the name is copied only for a
/// subscriber), its views keep the name, and a single-estimate task's one
/// alternative is `default` (a borrowed name, not one allocated per task).
#[test]
fn submitted_event_names_the_task_and_a_single_estimate_is_default() {
    let r = rig();
    let id = r.queue.submit(Task::new("named", mem(GIB), |_| Ok(()))).unwrap();
    match r.until("submitted", |e| matches!(e, QueueEvent::Submitted { id: x, .. } if *x == id)) {
        QueueEvent::Submitted { name, .. } => assert_eq!(name, "named"),
        _ => unreachable!(),
    }
    assert_eq!(crate::Envelope::single(mem(GIB)).alternatives()[0].name(), "default");
    r.queue.wait_idle();
    assert_eq!(r.queue.get(id).unwrap().name, "named");
    // A literal name is kept borrowed (no allocation per task); an owned
    // one is moved in; both read the same.
    let literal = Task::new("literal", mem(GIB), |_| Ok(()));
    assert!(matches!(literal.name, std::borrow::Cow::Borrowed("literal")));
    let owned = Task::new(format!("task {}", 7), mem(GIB), |_| Ok(()));
    assert!(matches!(&owned.name, std::borrow::Cow::Owned(n) if n == "task 7"));
    assert_eq!(owned.name(), "task 7");
}
