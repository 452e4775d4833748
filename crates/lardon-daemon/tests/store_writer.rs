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

/// Holds the writer inside a group until the returned sender is dropped or
/// sent to; returns once that write is being applied.
fn hold(writer: &StoreWriter) -> std::sync::mpsc::Sender<()> {
    let (started, is_started) = channel();
    let (release, released) = channel::<()>();
    writer.send(
        move |_| {
            started.send(()).unwrap();
            let _ = released.recv();
            Ok(())
        },
        |_: Result<(), StoreError>| {},
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
    // The writer is busy inside the first group: all of these queue up.
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
