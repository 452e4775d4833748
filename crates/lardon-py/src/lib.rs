//! `lardon._native`: the native half of the `lardon` Python package.
//!
//! Deliberately thin (pueue's shape: the daemon owns state, the client
//! only asks): [`conn::Connection`] speaks the daemon's gRPC API over its
//! Unix socket, [`engine::Engine`] starts the same daemon in-process for
//! `lardon.Executor`, and the two parsers are the engine's own
//! ([`lardon::parse_bytes`], [`lardon::parse_cpus`]) so that `mem="2GiB"`
//! means in Python exactly what `--mem 2GiB` means on the command line.
//! Everything a Python user touches (typed results, the executor, the
//! worker) is Python, in `python/lardon/`.

mod conn;
mod engine;
mod errors;
mod views;

use pyo3::prelude::*;

/// The module `lardon._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<conn::Connection>()?;
    m.add_class::<conn::Watcher>()?;
    m.add_class::<engine::Engine>()?;
    m.add_function(wrap_pyfunction!(parse_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(parse_cpus, m)?)?;
    m.add_function(wrap_pyfunction!(default_socket, m)?)?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Bytes from an `int` or a size text (`"2GiB"`, `"512M"`); a bad value
/// raises `lardon.InvalidRequest` naming `field`.
#[pyfunction]
fn parse_bytes(py: Python<'_>, value: &Bound<'_, PyAny>, field: &str) -> PyResult<u64> {
    if let Ok(n) = value.extract::<u64>() {
        return Ok(n);
    }
    match value.extract::<String>() {
        Ok(text) => lardon::parse_bytes(&text).map_err(|e| {
            errors::invalid(py, format!("{field}: {e} (e.g. 2GiB, 512MiB or a number of bytes)"))
        }),
        Err(_) => Err(errors::invalid(
            py,
            format!("{field}: expected a size in bytes (an int, or text such as \"2GiB\")"),
        )),
    }
}

/// CPUs in thousandths from an `int`, a `float` or a text (`"0.5"`,
/// `"750m"`); a bad value raises `lardon.InvalidRequest` naming `field`.
#[pyfunction]
fn parse_cpus(py: Python<'_>, value: &Bound<'_, PyAny>, field: &str) -> PyResult<u32> {
    let text = if let Ok(n) = value.extract::<u64>() {
        n.to_string()
    } else if let Ok(f) = value.extract::<f64>() {
        format!("{f}")
    } else if let Ok(s) = value.extract::<String>() {
        s
    } else {
        return Err(errors::invalid(py, format!("{field}: expected a number of CPUs (1, 0.5 or \"750m\")")));
    };
    match lardon::parse_cpus(&text) {
        Ok(0) => Err(errors::invalid(py, format!("{field}: must be more than 0 CPUs"))),
        Ok(millis) => Ok(millis),
        Err(e) => Err(errors::invalid(py, format!("{field}: {e} (e.g. 1, 0.5 or \"750m\")"))),
    }
}

/// The daemon socket the CLI would use for this state dir (`--state-dir`,
/// else `$LARDON_STATE_DIR`, `$LARDON_SOCKET`, `$XDG_RUNTIME_DIR`, `$HOME`).
#[pyfunction]
#[pyo3(signature = (state_dir=None))]
fn default_socket(py: Python<'_>, state_dir: Option<std::path::PathBuf>) -> PyResult<std::path::PathBuf> {
    lardon_proto::Paths::resolve(state_dir.as_deref())
        .map(|p| p.socket)
        .map_err(|e| errors::raise(py, "LardonError", e.to_string()))
}
