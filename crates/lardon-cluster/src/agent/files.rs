//! A task with files (docs/DESIGN.md §14): the agent makes a fresh
//! directory for it, fetches its inputs from the broker's CAS into it,
//! runs it there, uploads the declared outputs it produced and reports
//! their digests; the directory is removed afterwards, whatever happened.
//!
//! Paths were validated on receipt ([`lardon_cluster_core::wire::relative_path`]: plain
//! names only) and are checked again here before anything is written, so
//! no input lands outside the task's directory. Outputs must be regular
//! files: a symlink the task made (to `/etc/shadow`, say) is refused, not
//! followed.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lardon_proto::cluster as pb;
use tokio::sync::oneshot;

use super::exec::Executor;
use crate::cache::key::digest_of;
use lardon_submit::blobs::{self, BlobClient};
use lardon_submit::dial::Dial;

/// Where and how an agent stages tasks' files.
#[derive(Debug, Clone)]
pub(crate) struct Staging {
    /// The broker, whose port serves the CAS.
    pub(crate) broker: String,
    /// The credentials to dial it with.
    pub(crate) dial: Dial,
    /// The directory under which each task gets its own.
    pub(crate) root: PathBuf,
}

/// Whether `spec` names files (and so runs through [`run_staged`]).
pub(crate) fn has_files(spec: &pb::TaskSpec) -> bool {
    !spec.inputs.is_empty() || !spec.outputs.is_empty()
}

fn failed(reason: String) -> pb::TaskEnded {
    pb::TaskEnded { success: false, reason, ..Default::default() }
}

/// A fresh directory for `task` under `root` (never one that exists).
fn fresh_dir(root: &Path, task: &str) -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(root)?;
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = root.join(format!("task-{task}-{}-{n}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// `dir/path` for a validated relative path; refuses anything else again.
fn inside(dir: &Path, field: &str, path: &str) -> Result<PathBuf, String> {
    lardon_cluster_core::wire::relative_path(field, path).map_err(|e| e.to_string())?;
    Ok(dir.join(path))
}

/// Writes the inputs (already fetched, by hash) into `dir`.
fn write_inputs(
    dir: &Path,
    inputs: &[pb::InputFile],
    blobs: &std::collections::HashMap<String, Vec<u8>>,
) -> Result<(), String> {
    for (i, f) in inputs.iter().enumerate() {
        let field = format!("inputs[{i}].path");
        let path = inside(dir, &field, &f.path)?;
        let hash = f.digest.as_ref().map(|d| d.hash.as_str()).unwrap_or_default();
        let data = blobs.get(hash).ok_or_else(|| format!("inputs[{i}]: blob {hash} was not fetched"))?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{field}: `{}`: {e}", f.path))?;
        }
        let mode = if f.executable { 0o700 } else { 0o600 };
        // create_new: never through a link or over a file already there.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(|e| format!("{field}: `{}`: {e}", f.path))?;
        file.write_all(data).map_err(|e| format!("{field}: `{}`: {e}", f.path))?;
    }
    Ok(())
}

/// Reads the declared outputs from `dir`: each must be a regular file.
fn read_outputs(dir: &Path, outputs: &[String]) -> Result<Vec<(String, Vec<u8>)>, String> {
    outputs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let field = format!("outputs[{i}]");
            let path = inside(dir, &field, p)?;
            // Every component, not only the last, must be no link.
            let mut at = dir.to_path_buf();
            for part in p.split('/') {
                at.push(part);
                match std::fs::symlink_metadata(&at) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Err(format!("{field}: `{p}` was not produced"));
                    }
                    Err(e) => return Err(format!("{field}: `{p}`: {e}")),
                    Ok(m) if m.file_type().is_symlink() => {
                        return Err(format!("{field}: `{p}` is a symbolic link; outputs are regular files"));
                    }
                    Ok(_) => {}
                }
            }
            let meta = std::fs::symlink_metadata(&path).map_err(|e| format!("{field}: `{p}`: {e}"))?;
            if !meta.file_type().is_file() {
                return Err(format!("{field}: `{p}` is not a regular file"));
            }
            let data = std::fs::read(&path).map_err(|e| format!("{field}: `{p}`: {e}"))?;
            Ok((p.clone(), data))
        })
        .collect()
}

/// Runs `spec` with its files: stage, run in the task's directory,
/// collect. A failure to stage or collect ends the task failed with no
/// exit code, saying which file.
pub(crate) async fn run_staged(
    staging: Staging,
    executor: Arc<dyn Executor>,
    spec: pb::TaskSpec,
    cancel: oneshot::Receiver<()>,
) -> pb::TaskEnded {
    let dir = {
        let (root, task) = (staging.root.clone(), spec.task_id.clone());
        match tokio::task::spawn_blocking(move || fresh_dir(&root, &task)).await {
            Ok(Ok(dir)) => dir,
            Ok(Err(e)) => return failed(format!("cannot make the task's directory: {e}")),
            Err(e) => return failed(format!("cannot make the task's directory: {e}")),
        }
    };
    let ended = staged_in(&staging, executor, spec, cancel, &dir).await;
    let gone = dir.clone();
    // Removed whatever happened; a leftover directory is only logged.
    match tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&gone)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("cannot remove {}: {e}", dir.display()),
        Err(e) => tracing::warn!("cannot remove {}: {e}", dir.display()),
    }
    ended
}

async fn staged_in(
    staging: &Staging,
    executor: Arc<dyn Executor>,
    spec: pb::TaskSpec,
    cancel: oneshot::Receiver<()>,
    dir: &Path,
) -> pb::TaskEnded {
    let mut cas = None;
    if !spec.inputs.is_empty() {
        let client = match BlobClient::connect(&staging.broker, &staging.dial).await {
            Ok(c) => cas.insert(c),
            Err(e) => return failed(format!("inputs: {e}")),
        };
        let digests: Vec<_> =
            spec.inputs.iter().map(|f| f.digest.as_ref().map(blobs::from_pb).unwrap_or_default()).collect();
        let fetched = match client.download(&digests).await {
            Ok(f) => f,
            Err(e) => return failed(format!("inputs: {e}")),
        };
        let (to, inputs) = (dir.to_path_buf(), spec.inputs.clone());
        match tokio::task::spawn_blocking(move || write_inputs(&to, &inputs, &fetched)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return failed(e),
            Err(e) => return failed(format!("inputs: {e}")),
        }
    }
    let outputs = spec.outputs.clone();
    let mut ended = executor.run_in(spec, dir, cancel).await;
    if !ended.success || outputs.is_empty() {
        return ended;
    }
    let from = dir.to_path_buf();
    let files = match tokio::task::spawn_blocking(move || read_outputs(&from, &outputs)).await {
        Ok(Ok(files)) => files,
        Ok(Err(e)) => return pb::TaskEnded { success: false, reason: e, ..ended },
        Err(e) => return pb::TaskEnded { success: false, reason: format!("outputs: {e}"), ..ended },
    };
    let client = match cas {
        Some(c) => c,
        None => match BlobClient::connect(&staging.broker, &staging.dial).await {
            Ok(c) => c,
            Err(e) => return pb::TaskEnded { success: false, reason: format!("outputs: {e}"), ..ended },
        },
    };
    let mut client = client;
    let blobs: Vec<_> = files.iter().map(|(_, data)| (digest_of(data), data.as_slice())).collect();
    if let Err(e) = client.upload(&blobs).await {
        return pb::TaskEnded { success: false, reason: format!("outputs: {e}"), ..ended };
    }
    ended.outputs = files
        .iter()
        .map(|(path, data)| pb::OutputFile {
            path: path.clone(),
            digest: Some(blobs::to_pb(&digest_of(data))),
        })
        .collect();
    ended
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn inputs_are_written_only_inside_the_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = fresh_dir(root.path(), "t").unwrap();
        let data = b"int x;".to_vec();
        let d = blobs::to_pb(&digest_of(&data));
        let blobs = std::collections::HashMap::from([(d.hash.clone(), data.clone())]);
        let input =
            |path: &str| pb::InputFile { path: path.into(), digest: Some(d.clone()), executable: false };
        write_inputs(&dir, &[input("a/b/x.i")], &blobs).unwrap();
        assert_eq!(std::fs::read(dir.join("a/b/x.i")).unwrap(), data);
        let e = write_inputs(&dir, &[input("../escape")], &blobs).unwrap_err();
        assert!(e.starts_with("inputs[0].path: "), "{e}");
        let e = write_inputs(&dir, &[input("/tmp/escape")], &blobs).unwrap_err();
        assert!(e.contains("absolute"), "{e}");
        assert!(!root.path().join("escape").exists());
        // A file already there (or a link planted there) is never written through.
        std::os::unix::fs::symlink(root.path().join("target"), dir.join("link")).unwrap();
        assert!(write_inputs(&dir, &[input("link")], &blobs).is_err());
        assert!(!root.path().join("target").exists());
    }

    #[test]
    fn outputs_must_be_regular_files_inside_the_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = fresh_dir(root.path(), "t").unwrap();
        std::fs::write(dir.join("x.o"), b"obj").unwrap();
        std::fs::write(root.path().join("secret"), b"secret").unwrap();
        std::os::unix::fs::symlink(root.path().join("secret"), dir.join("leak.o")).unwrap();
        std::os::unix::fs::symlink(root.path(), dir.join("up")).unwrap();
        assert_eq!(read_outputs(&dir, &["x.o".into()]).unwrap(), [("x.o".to_owned(), b"obj".to_vec())]);
        let e = read_outputs(&dir, &["leak.o".into()]).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        let e = read_outputs(&dir, &["up/secret".into()]).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        let e = read_outputs(&dir, &["y.o".into()]).unwrap_err();
        assert_eq!(e, "outputs[0]: `y.o` was not produced");
    }
}
