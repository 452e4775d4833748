//! The `lardon` binary (under construction).
fn main() {}
