//! The broker's result cache (docs/DESIGN.md §14): kubecc's cache hook in
//! the standard form of the Bazel Remote Execution API (REAPI). A task
//! marked cacheable is keyed by its REAPI *action digest* — the sha256 of
//! an `Action` naming its `Command` (argv and allow-listed environment),
//! its input root and its capability (never a path) — and a pre-route hook
//! answers it from the action cache before any agent is asked, even when
//! no agent is connected. Inputs and outputs live in a content-addressed
//! store, served over REAPI's `ContentAddressableStorage` and
//! `ActionCache` services so that existing REAPI clients can use it too.
//!
//! * [`key`]: the action digest of a task.
//! * [`store`]: the bounded stores (CAS by bytes, action cache by entries
//!   and age), least recently used evicted first.
//! * [`hooks`]: the pre-route chain (intercept / reject / pass), its cache
//!   hook, and the hit rate that raises advertised capacity.
//! * [`service`]: the REAPI gRPC services over the stores.

pub mod hooks;
pub mod key;
pub mod service;
pub mod store;

/// The REAPI v2 types (`Digest`, `Action`, `Command`, `ActionResult`, …).
pub use lardon_submit::blobs::reapi;
