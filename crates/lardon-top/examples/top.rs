//! Runs the dashboard against a daemon socket:
//! `cargo run -p lardon-top --example top -- SOCKET [--no-color]`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(socket) = args.next().map(PathBuf::from) else {
        eprintln!("usage: top SOCKET [--no-color]");
        return ExitCode::from(2);
    };
    let no_color = args.any(|a| a == "--no-color");
    match lardon_top::run_top(lardon_top::TopOptions { socket, no_color }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
