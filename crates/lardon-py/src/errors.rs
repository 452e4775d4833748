//! Errors as the Python exceptions of `lardon.errors` (defined in Python,
//! so that each can have two bases, such as `InvalidRequest(LardonError,
//! ValueError)`, and be documented where Python users read).

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// An instance of `lardon.errors.<kind>` with `message`; a plain
/// `RuntimeError` if the Python half is missing (a broken install).
pub(crate) fn raise(py: Python<'_>, kind: &str, message: impl Into<String>) -> PyErr {
    let message = message.into();
    match py.import("lardon.errors").and_then(|m| m.getattr(kind)) {
        Ok(class) => match class.call1((message.clone(),)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(e) => e,
        },
        Err(_) => PyRuntimeError::new_err(format!("{kind}: {message}")),
    }
}

/// `lardon.InvalidRequest`: a bad argument, named.
pub(crate) fn invalid(py: Python<'_>, message: impl Into<String>) -> PyErr {
    raise(py, "InvalidRequest", message)
}

/// The exception for a refusal or failure the daemon answered with.
pub(crate) fn from_status(py: Python<'_>, status: &tonic::Status, socket: &std::path::Path) -> PyErr {
    use tonic::Code;
    let message = status.message().to_owned();
    match status.code() {
        Code::NotFound => raise(py, "TaskNotFound", message),
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => invalid(py, message),
        Code::Unavailable | Code::Unknown if message.contains("transport") || message.is_empty() => {
            unreachable(py, socket)
        }
        Code::Unavailable => unreachable(py, socket),
        _ => raise(py, "LardonError", format!("{message} ({:?})", status.code())),
    }
}

/// `lardon.DaemonUnreachable`, naming the socket and the command that
/// starts a daemon there.
pub(crate) fn unreachable(py: Python<'_>, socket: &std::path::Path) -> PyErr {
    raise(
        py,
        "DaemonUnreachable",
        format!(
            "cannot reach the lardon daemon at {}: start it with `lardon daemon` (or use \
             lardon.Executor, which runs its own engine in this process)",
            socket.display()
        ),
    )
}
