//! The store's one writer: group commit, replies only after the commit, a
//! refused write alone rolled back, and a clean close.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, channel};

use lardon_daemon::spec::{TaskId, TaskSpec, TaskState};
use lardon_daemon::store::{NewTask, Outcome, Store, StoreError, StoreWriter};

fn db(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("lardon.db")
}

fn writer(dir: &tempfile::TempDir) -> StoreWriter {
    StoreWriter::spawn(Store::open(db(dir)).unwrap()).unwrap()
}

fn task(name: &str) -> NewTask {
    let mut s = TaskSpec::command(["echo", name]);
    s.name = name.to_owned();
    NewTask::new(s)
}

/// Holds the writer in the reply of a committed group until the returned
/// sender is dropped or sent to; returns once the writer is held there.
/// (Held inside a write, the writes queued meanwhile would join that
/// write's group: a write is applied as it arrives.)
fn hold(writer: &StoreWriter) -> std::sync::mpsc::Sender<()> {
    let (started, is_started) = channel();
    let (release, released) = channel::<()>();
    writer.send(
        |_| Ok(()),
        move |_: Result<(), StoreError>| {
            started.send(()).unwrap();
            let _ = released.recv();
        },
    );
    is_started.recv().unwrap();
    release
}

/// Sends an insert of `name`; its result arrives on the returned receiver.
fn insert(writer: &StoreWriter, name: &str) -> Receiver<Result<TaskId, StoreError>> {
    let (tx, rx) = channel();
    let new = task(name);
    writer.send(move |s| s.insert_task(&new), move |r| tx.send(r).unwrap());
    rx
}

#[test]
fn writes_that_arrive_during_a_group_commit_together_in_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let writer = writer(&dir);
    let release = hold(&writer);
    // The writer is busy after the first group: all of these queue up.
    let replies: Vec<_> = (0..50).map(|i| insert(&writer, &format!("t{i}"))).collect();
    release.send(()).unwrap();
    let ids: Vec<TaskId> = replies.into_iter().map(|r| r.recv().unwrap().unwrap()).collect();
    assert_eq!(ids.len(), 50);
    assert_eq!(writer.writes(), 51);
    assert_eq!(writer.groups(), 2, "the 50 writes queued behind a group form one group");
}

#[test]
fn a_reply_comes_only_once_its_group_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let writer = writer(&dir);
    // A second connection sees only what was committed.
    let reader = Store::open_reader(db(&dir)).unwrap();
    let release = hold(&writer);
    let (tx, rx) = channel();
    let new = task("seen");
    writer.send(
        move |s| s.insert_task(&new),
        move |r: Result<TaskId, StoreError>| {
            let id = r.unwrap();
            tx.send(reader.get_task(id).unwrap().map(|t| t.state)).unwrap();
        },
    );
    drop(release);
    assert_eq!(rx.recv().unwrap(), Some(TaskState::Pending), "the reply came before the commit");
    // `call` likewise: once it returns, any reader sees the write.
    let id = writer.call(|s| s.insert_task(&task("called"))).unwrap();
    let reader = Store::open_reader(db(&dir)).unwrap();
    assert_eq!(reader.get_task(id).unwrap().map(|t| t.state), Some(TaskState::Pending));
}

#[test]
fn a_refused_write_is_rolled_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    let writer = writer(&dir);
    let release = hold(&writer);
    let a = insert(&writer, "a");
    let (tx, refused) = channel();
    writer.send(
        move |s| {
            // Writes, then fails: its own savepoint undoes the insert.
            s.insert_task(&task("half"))?;
            s.finish(TaskId(999), &Outcome { state: TaskState::Failed, exit_code: None, reason: None })
        },
        move |r| tx.send(r).unwrap(),
    );
    let b = insert(&writer, "b");
    drop(release);
    let (a, b) = (a.recv().unwrap().unwrap(), b.recv().unwrap().unwrap());
    assert!(matches!(refused.recv().unwrap(), Err(StoreError::NotFound(TaskId(999)))));
    assert_eq!(writer.groups(), 2, "the refused write shared its group");
    let reader = Store::open_reader(db(&dir)).unwrap();
    let names: Vec<String> = reader.load_all().unwrap().into_iter().map(|t| t.spec.name).collect();
    assert_eq!(names, ["a", "b"], "a and b kept, the refused write's insert undone");
    assert!(a < b);
}

#[test]
fn close_commits_what_was_queued_and_refuses_later_writes() {
    let dir = tempfile::tempdir().unwrap();
    let writer = writer(&dir);
    let release = hold(&writer);
    let queued: Vec<_> = (0..5).map(|i| insert(&writer, &format!("q{i}"))).collect();
    drop(release);
    writer.close();
    for r in queued {
        r.recv().unwrap().unwrap();
    }
    let reader = Store::open_reader(db(&dir)).unwrap();
    assert_eq!(reader.load_all().unwrap().len(), 5);
    let late = writer.call(|s| s.insert_task(&task("late")));
    assert!(matches!(late, Err(StoreError::WriterStopped)), "{late:?}");
}

#[test]
fn the_reader_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    drop(writer(&dir));
    let mut reader = Store::open_reader(db(&dir)).unwrap();
    assert!(reader.insert_task(&task("nope")).is_err());
}

/// A writer whose background writes wait an hour for company: whatever
/// commits before that was committed by an urgent write, not the clock.
fn patient_writer(dir: &tempfile::TempDir) -> StoreWriter {
    StoreWriter::spawn_with_linger(Store::open(db(dir)).unwrap(), std::time::Duration::from_secs(3600))
        .unwrap()
}

#[test]
fn background_writes_wait_for_company_and_an_urgent_write_commits_them_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let writer = patient_writer(&dir);
    let reader = Store::open_reader(db(&dir)).unwrap();
    let (tx, done) = channel();
    for i in 0..3 {
        let new = task(&format!("b{i}"));
        let tx = tx.clone();
        writer.send_background(move |s| s.insert_task(&new), move |r| tx.send(r.unwrap()).unwrap());
    }
    // Each is applied as it arrives (its stamps are its arrival's), long
    // before its group commits.
    let (applied, was_applied) = channel();
    writer.send_background(
        move |_| {
            applied.send(()).unwrap();
            Ok(())
        },
        |_: Result<(), StoreError>| {},
    );
    was_applied
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("a background write waited to be applied");
    // Nothing of them is durable yet: no reply, nothing for a reader.
    assert!(
        done.recv_timeout(std::time::Duration::from_millis(200)).is_err(),
        "a background write committed alone"
    );
    assert_eq!(writer.groups(), 0);
    assert!(reader.get_task(TaskId(1)).unwrap().is_none());
    // The first write somebody waits for commits the whole group at once.
    let id = writer.call(|s| s.insert_task(&task("urgent"))).unwrap();
    assert_eq!(writer.groups(), 1);
    assert_eq!(writer.writes(), 5);
    let mut ids: Vec<TaskId> = (0..3).map(|_| done.recv().unwrap()).collect();
    ids.push(id);
    for id in ids {
        assert!(reader.get_task(id).unwrap().is_some(), "task {id} not durable");
    }
}

#[test]
fn a_lone_background_write_commits_after_the_linger_and_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let writer = StoreWriter::spawn(Store::open(db(&dir)).unwrap()).unwrap();
    assert_eq!(writer.linger(), lardon_daemon::store::LINGER);
    let (tx, done) = channel();
    let new = task("alone");
    writer.send_background(move |s| s.insert_task(&new), move |r| tx.send(r).unwrap());
    // Committed by the clock (5 ms), not by anything that follows it.
    let id = done.recv_timeout(std::time::Duration::from_secs(10)).unwrap().unwrap();
    assert_eq!(writer.groups(), 1);
    // Closing does not wait out the linger: a patient writer closes at once
    // and commits what it held.
    let patient_dir = tempfile::tempdir().unwrap();
    let patient = patient_writer(&patient_dir);
    let new = task("held");
    patient.send_background(move |s| s.insert_task(&new), |_| {});
    let start = std::time::Instant::now();
    patient.close();
    assert!(start.elapsed() < std::time::Duration::from_secs(60), "close waited out the linger");
    assert_eq!(patient.groups(), 1);
    let reader = Store::open_reader(db(&patient_dir)).unwrap();
    assert!(reader.get_task(id).unwrap().is_some());
}
