//! The `lardon` binary; everything lives in the library ([`lardon_cli::main`]).

fn main() -> std::process::ExitCode {
    lardon_cli::main()
}
