//! The daemon crate's entry points, re-exported in one place so that the
//! verbs (`daemon`, `run`) depend on a small surface.

pub(crate) use lardon_daemon::{DaemonConfig, EnforceMode, ProbeChoice, run, start_in_process};
