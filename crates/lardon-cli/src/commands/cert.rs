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
        CertCommand::Trial { dir, hosts } => trial(dir, hosts)?,
    }
    Ok(0)
}

/// `lardon cert trial`: the CA, a broker certificate, one client
/// certificate and a join token under `dir`, then the commands to use them.
fn trial(dir: &std::path::Path, hosts: &[String]) -> Result<()> {
    let (ca, broker, client, token) =
        (dir.join("ca"), dir.join("broker"), dir.join("client"), dir.join("join.token"));
    lardon_tls::init_ca(&ca).map_err(input)?;
    lardon_tls::issue(&ca, "broker", Role::Server, hosts, DAYS, &broker).map_err(input)?;
    lardon_tls::issue(&ca, "client", Role::Client, &[], DAYS, &client).map_err(input)?;
    JoinToken::generate().and_then(|t| t.write_new(&token)).map_err(input)?;
    let host = hosts.first().map_or("127.0.0.1", String::as_str);
    let (b, c, t) = (broker.display(), client.display(), token.display());
    let creds = format!("--tls-dir {c} --tls-name client --join-token-file {t}");
    super::out(&format!(
        "created {ca} (keep ca/ca.key private), {b}, {c} and {t}\n\
         start the broker:  lardon broker --listen {host}:7710 --tls-dir {b} --join-token-file {t} --state ./broker-state\n\
         start an agent:    lardon agent --broker {host}:7710 --capability CAP {creds}\n\
         submit:            lardon cluster submit --broker {host}:7710 --capability CAP {creds} -- COMMAND\n\
         offload a daemon:  lardon daemon --broker {host}:7710 {creds}\n",
        ca = ca.display()
    ))?;
    Ok(())
}

/// How long a trial's certificates last.
const DAYS: u32 = 365;
