//! `submit_many`: a batch goes in under one lock with one dispatcher wake,
//! each task answered exactly as `submit` would answer it.

use super::*;

#[test]
fn each_task_of_a_batch_is_answered_as_submit_would_answer_it() {
    let r = rig();
    let failed = r.queue.submit(Task::new("fails", mem(GIB), |_| Err(TaskError::failed("no")))).unwrap();
    assert_eq!(r.finished(failed), TaskState::Failed);
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = |name: &'static str| {
        let ran = Arc::clone(&ran);
        Task::new(name, mem(GIB), move |_| {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    };
    let answers = r.queue.submit_many(vec![
        counted("first"),
        counted("unknown dependency").after(TaskId(999_999)),
        counted("after the failed one").after(failed),
        counted("duplicate id").with_id(failed),
        counted("last"),
    ]);
    assert_eq!(answers.len(), 5);
    let first = *answers[0].as_ref().expect("first is queued");
    assert!(matches!(answers[1], Err(SubmitError::UnknownDependency(TaskId(999_999)))), "{:?}", answers[1]);
    let dependent = *answers[2].as_ref().expect("a task after a failed one is queued, then fails");
    assert!(matches!(answers[3], Err(SubmitError::DuplicateId(id)) if id == failed), "{:?}", answers[3]);
    let last = *answers[4].as_ref().expect("a refusal does not stop the tasks after it");
    // Ids in the batch's order, as one submit after another gives them.
    assert!(first < dependent && dependent < last, "{first} {dependent} {last}");
    r.queue.wait_idle();
    assert_eq!(r.queue.get(first).unwrap().state, TaskState::Completed);
    assert_eq!(r.queue.get(last).unwrap().state, TaskState::Completed);
    let view = r.queue.get(dependent).unwrap();
    assert_eq!(view.state, TaskState::Failed);
    assert_eq!(view.message.as_deref(), Some(format!("dependency {failed} ended failed").as_str()));
    assert_eq!(ran.load(Ordering::SeqCst), 2, "only the two runnable tasks ran");
}

/// A batch larger than the queue's capacity fills it, wakes the dispatcher
/// (nothing else would: the batch's tasks are not announced until it
/// returns) and waits for room, so it always completes.
///
/// To see it fail, drop the dispatcher wake from `wait_for_room`: the
/// first two tasks never start and the batch never returns.
#[test]
fn a_batch_beyond_capacity_waits_for_room_and_completes() {
    let r = rig_with(QueueConfig { capacity: 2, ..QueueConfig::default() }, |p| p.max_running = Some(1));
    let ran = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<Task> = (0..10)
        .map(|i| {
            let ran = Arc::clone(&ran);
            Task::new(format!("t{i}"), mem(GIB), move |_| {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        })
        .collect();
    // The dispatcher sleeps with nothing to wake it but this batch.
    eventually("the dispatcher sleeps", || r.queue.inner.dispatch.asleep().is_some());
    std::thread::scope(|s| {
        let q = &r.queue;
        let (tx, rx) = channel();
        s.spawn(move || tx.send(q.submit_many(tasks).iter().filter(|a| a.is_ok()).count()));
        let got = rx.recv_timeout(LIMIT);
        if got.is_err() {
            // Unblock the submitter (Closing) so the scope can end.
            r.queue.close();
        }
        assert_eq!(got.expect("the batch returned"), 10);
    });
    r.queue.wait_idle();
    assert_eq!(ran.load(Ordering::SeqCst), 10);
    assert_eq!(r.queue.inner.lock().blocked_submits, 0);
}
