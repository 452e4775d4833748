//! A shipped task's files on the submitter's side (an offloading daemon,
//! or `lardon cluster submit`): its inputs read from its working directory
//! when it ships, its outputs written back into it when its run at an
//! agent succeeded. Paths were checked at submit (relative, plain names:
//! [`lardon_cluster_core::wire::relative_path`]), so none leaves the
//! directory by `..`; only declared outputs are ever written.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use crate::client::InputData;

/// Reads each input, relative to `cwd`, as the agent will write it (the
/// owner's execute bit kept). A missing or unreadable one, or one that is
/// not a regular file, is an error naming it.
///
/// # Errors
/// One line naming the input.
pub fn read_inputs(cwd: &Path, inputs: &[String]) -> Result<Vec<InputData>, String> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, rel)| {
            let path = cwd.join(rel);
            let named = |e: &dyn std::fmt::Display| format!("inputs[{i}] `{}`: {e}", path.display());
            let meta = std::fs::metadata(&path).map_err(|e| named(&e))?;
            if !meta.is_file() {
                return Err(named(&"not a regular file"));
            }
            let data = std::fs::read(&path).map_err(|e| named(&e))?;
            Ok(InputData { path: rel.clone(), data, executable: meta.permissions().mode() & 0o100 != 0 })
        })
        .collect()
}

/// Writes each `(path, bytes)` whose path the task declared (`declared`,
/// checked at submit) into `cwd` (parent directories made as needed),
/// each atomically: into a temporary file beside it, flushed to disk, then
/// renamed over the path — a reader sees the old file or the whole new
/// one, never a part. Stops at the first failure. A path the task did not
/// declare (what an agent or broker reported on its own) is never written:
/// it is logged and returned.
///
/// # Errors
/// One line naming the output and what failed.
pub fn write_outputs(
    cwd: &Path,
    files: &[(String, Vec<u8>)],
    declared: &[String],
    tag: &str,
) -> Result<Vec<String>, String> {
    let (files, refused): (Vec<_>, Vec<_>) = files.iter().partition(|(rel, _)| declared.contains(rel));
    let refused: Vec<String> = refused.into_iter().map(|(rel, _)| rel.clone()).collect();
    for rel in &refused {
        tracing::warn!("output `{rel}` was reported but never declared (--output): not written");
    }
    for (rel, data) in files {
        let path = cwd.join(rel);
        let named = |e: &dyn std::fmt::Display| format!("output `{}`: {e}", path.display());
        let dir = path.parent().unwrap_or(cwd);
        std::fs::create_dir_all(dir).map_err(|e| named(&e))?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = dir.join(format!(".{name}.{tag}.lardon-tmp"));
        let written = std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(data).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(named(&e));
        }
    }
    Ok(refused)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_read_with_their_execute_bit_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), b"alpha").unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        let tool = dir.path().join("bin/tool");
        std::fs::write(&tool, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let got = read_inputs(dir.path(), &["a.txt".into(), "bin/tool".into()]).unwrap();
        assert_eq!(got[0], InputData::new("a.txt", b"alpha".to_vec()));
        assert!(got[1].executable && got[1].path == "bin/tool");
        let e = read_inputs(dir.path(), &["a.txt".into(), "gone.txt".into()]).unwrap_err();
        assert!(e.starts_with("inputs[1] `") && e.contains("gone.txt"), "{e}");
        let e = read_inputs(dir.path(), &["bin".into()]).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn outputs_replace_whole_files_and_leave_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("out.txt"), b"old").unwrap();
        let files =
            vec![("out.txt".to_owned(), b"new".to_vec()), ("sub/dir/x.o".to_owned(), b"obj".to_vec())];
        let declared = ["out.txt".to_owned(), "sub/dir/x.o".to_owned()];
        assert!(write_outputs(dir.path(), &files, &declared, "t1").unwrap().is_empty());
        assert_eq!(std::fs::read(dir.path().join("out.txt")).unwrap(), b"new");
        assert_eq!(std::fs::read(dir.path().join("sub/dir/x.o")).unwrap(), b"obj");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("lardon-tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        // A directory where the file should go: named, nothing half-written.
        std::fs::create_dir(dir.path().join("taken")).unwrap();
        std::fs::write(dir.path().join("taken/inside"), b"x").unwrap();
        let taken = ["taken".to_owned()];
        let e = write_outputs(dir.path(), &[("taken".to_owned(), b"y".to_vec())], &taken, "t1").unwrap_err();
        assert!(e.starts_with("output `") && e.contains("taken"), "{e}");
    }

    #[test]
    fn only_declared_outputs_are_written_and_the_others_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let files = vec![
            ("out.txt".to_owned(), b"ok".to_vec()),
            ("../escaped".to_owned(), b"x".to_vec()),
            (".bashrc".to_owned(), b"x".to_vec()),
        ];
        let refused = write_outputs(&work, &files, &["out.txt".to_owned()], "t1").unwrap();
        assert_eq!(refused, ["../escaped", ".bashrc"]);
        assert_eq!(std::fs::read(work.join("out.txt")).unwrap(), b"ok");
        assert!(!dir.path().join("escaped").exists() && !work.join(".bashrc").exists());
    }
}
