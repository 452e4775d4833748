//! `lardon cert init|issue|token`: the cluster's private CA, the
//! certificates it issues and join tokens (no daemon involved).

use anyhow::Result;
use lardon_tls::{JoinToken, Role, TlsError};

use crate::cli::CertCommand;
use crate::error::usage;

/// Every refusal is the user's to fix (a path, a name, an existing file):
/// exit 2 with the field or file named.
fn input(e: TlsError) -> anyhow::Error {
    usage(e.to_string())
}

pub(crate) fn run(cmd: &CertCommand) -> Result<u8> {
    match cmd {
        CertCommand::Init { dir } => {
            let cert = lardon_tls::init_ca(dir).map_err(input)?;
            super::out(&format!(
                "created the cluster CA: {} (give it to every party) and {} (keep it private)\n",
                cert.display(),
                dir.join("ca.key").display()
            ))?;
        }
        CertCommand::Issue { name, ca, hosts, out, days } => {
            let role = if hosts.is_empty() { Role::Client } else { Role::Server };
            lardon_tls::issue(ca, name, role, hosts, *days, out).map_err(input)?;
            let what = match role {
                Role::Server => format!("a broker certificate for {}", hosts.join(", ")),
                Role::Client => "a client certificate".to_owned(),
            };
            super::out(&format!(
                "issued {what}: {}, {} and {}\n",
                out.join(format!("{name}.pem")).display(),
                out.join(format!("{name}.key")).display(),
                out.join(lardon_tls::CA_CERT).display()
            ))?;
        }
        CertCommand::Token { out } => {
            let token = JoinToken::generate().map_err(input)?;
            token.write_new(out).map_err(input)?;
            super::out(&format!("created a join token in {} (mode 0600)\n", out.display()))?;
        }
    }
    Ok(0)
}
