//! The cluster's certificate authority and the certificates it issues.
//!
//! A CA directory holds `ca.pem` (the certificate every party trusts) and
//! `ca.key` (mode 0600; only `lardon cert issue` reads it). An identity
//! directory holds `NAME.pem`, `NAME.key` and a copy of `ca.pem`, which is
//! all a broker or a client needs.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use tonic::transport::{Certificate, ClientTlsConfig, ServerTlsConfig};

use crate::TlsError;

/// File name of the CA certificate, in the CA directory and in every
/// identity directory.
pub const CA_CERT: &str = "ca.pem";
const CA_KEY: &str = "ca.key";
/// The CA's subject. Fixed, so that the issuer can be rebuilt from the
/// key alone (no certificate parser needed) and match `ca.pem` exactly.
const CA_NAME: &str = "Lardon cluster CA";
const CA_DAYS: i64 = 3650;

/// What a certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The broker: presents it to clients (TLS server authentication).
    Server,
    /// An agent or an offloading daemon: presents it to the broker (TLS
    /// client authentication).
    Client,
}

fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    p
}

fn cert_err(what: &'static str) -> impl FnOnce(rcgen::Error) -> TlsError {
    move |e| TlsError::Certificate { what, message: e.to_string() }
}

fn random_serial() -> Result<SerialNumber, TlsError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| TlsError::Random("serial number", e.to_string()))?;
    bytes[0] &= 0x7f; // a positive INTEGER
    Ok(SerialNumber::from_slice(&bytes))
}

fn validity(p: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    // An hour back: a peer whose clock is a little behind still accepts it.
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + time::Duration::days(days);
}

/// Writes `contents` to a new file (never over an existing one), readable
/// by its owner only when `private`.
fn write_new(path: &Path, contents: &str, private: bool) -> Result<(), TlsError> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).mode(if private { 0o600 } else { 0o644 });
    let mut file = options.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => TlsError::Exists(path.to_path_buf()),
        _ => TlsError::Io { path: path.to_path_buf(), source: e },
    })?;
    file.write_all(contents.as_bytes()).map_err(|e| TlsError::Io { path: path.to_path_buf(), source: e })
}

fn read(path: &Path, hint: &'static str) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => TlsError::Missing { path: path.to_path_buf(), hint },
        _ => TlsError::Io { path: path.to_path_buf(), source: e },
    })
}

fn create_dir(dir: &Path) -> Result<(), TlsError> {
    std::fs::create_dir_all(dir).map_err(|e| TlsError::Io { path: dir.to_path_buf(), source: e })
}

/// Creates a new CA in `dir` (created if needed): `ca.pem` and `ca.key`.
/// Returns the path of `ca.pem`.
///
/// # Errors
/// [`TlsError::Exists`] when `dir` already holds a CA (a CA is never
/// replaced silently: every certificate it issued would stop working);
/// I/O and generation errors.
pub fn init_ca(dir: &Path) -> Result<PathBuf, TlsError> {
    create_dir(dir)?;
    let (cert_path, key_path) = (dir.join(CA_CERT), dir.join(CA_KEY));
    for p in [&cert_path, &key_path] {
        if p.exists() {
            return Err(TlsError::Exists(p.clone()));
        }
    }
    let key = KeyPair::generate().map_err(cert_err("generate the CA key"))?;
    let mut params = ca_params();
    params.serial_number = Some(random_serial()?);
    validity(&mut params, CA_DAYS);
    let cert = params.self_signed(&key).map_err(cert_err("sign the CA certificate"))?;
    write_new(&key_path, &key.serialize_pem(), true)?;
    write_new(&cert_path, &cert.pem(), false)?;
    Ok(cert_path)
}

/// A name usable as a file name and a certificate subject.
fn check_name(name: &str) -> Result<(), TlsError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != CA_CERT.trim_end_matches(".pem")
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(TlsError::Invalid {
            field: "name",
            message: format!(
                "`{name}` must be 1–64 letters, digits, `-`, `_` or `.`, not start with `.`, and not be `ca`"
            ),
        })
    }
}

/// A host name of dot-separated labels of letters, digits and inner `-`.
fn is_dns_name(host: &str) -> bool {
    host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Issues a certificate for `name` signed by the CA in `ca_dir`, valid
/// `days` days, and writes `NAME.pem`, `NAME.key` (0600) and a copy of
/// `ca.pem` into `out` (created if needed). A server certificate names
/// the `hosts` it answers as (DNS names or IP addresses; at least one). A
/// client certificate carries `name` as its identity. Returns `out`.
///
/// # Errors
/// [`TlsError::Invalid`] naming `name`, `hosts` or `days`;
/// [`TlsError::Missing`] when `ca_dir` holds no CA; [`TlsError::Exists`]
/// when `out` already holds this name; I/O and generation errors.
pub fn issue(
    ca_dir: &Path,
    name: &str,
    role: Role,
    hosts: &[String],
    days: u32,
    out: &Path,
) -> Result<PathBuf, TlsError> {
    check_name(name)?;
    if days == 0 || days > 3650 {
        return Err(TlsError::Invalid { field: "days", message: format!("{days} is not within 1–3650") });
    }
    if role == Role::Server && hosts.is_empty() {
        return Err(TlsError::Invalid {
            field: "hosts",
            message: "a server certificate needs at least one host name or address its clients dial".into(),
        });
    }
    let hint = "create one with `lardon cert init`";
    let ca_key =
        KeyPair::from_pem(&read(&ca_dir.join(CA_KEY), hint)?).map_err(cert_err("read the CA key"))?;
    let ca_pem = read(&ca_dir.join(CA_CERT), hint)?;
    let issuer = Issuer::new(ca_params(), ca_key);

    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.serial_number = Some(random_serial()?);
    validity(&mut params, i64::from(days));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![match role {
        Role::Server => ExtendedKeyUsagePurpose::ServerAuth,
        Role::Client => ExtendedKeyUsagePurpose::ClientAuth,
    }];
    let mut sans = Vec::new();
    for host in hosts {
        let san = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) if is_dns_name(host) => SanType::DnsName(host.as_str().try_into().map_err(|_| {
                TlsError::Invalid { field: "hosts", message: format!("`{host}` is not usable as a DNS name") }
            })?),
            Err(_) => {
                return Err(TlsError::Invalid {
                    field: "hosts",
                    message: format!("`{host}` is neither an IP address nor a DNS name"),
                });
            }
        };
        sans.push(san);
    }
    if role == Role::Client && sans.is_empty() {
        // rustls verifies a client certificate's chain, not its names;
        // the name still says who it is in the broker's logs.
        sans.push(SanType::DnsName(name.try_into().map_err(|_| TlsError::Invalid {
            field: "name",
            message: format!("`{name}` is not usable as a certificate name"),
        })?));
    }
    params.subject_alt_names = sans;
    let key = KeyPair::generate().map_err(cert_err("generate the key"))?;
    let cert = params.signed_by(&key, &issuer).map_err(cert_err("sign the certificate"))?;

    create_dir(out)?;
    let (cert_path, key_path) = (out.join(format!("{name}.pem")), out.join(format!("{name}.key")));
    for p in [&cert_path, &key_path] {
        if p.exists() {
            return Err(TlsError::Exists(p.clone()));
        }
    }
    write_new(&key_path, &key.serialize_pem(), true)?;
    write_new(&cert_path, &cert.pem(), false)?;
    let ca_copy = out.join(CA_CERT);
    match read(&ca_copy, "") {
        Ok(existing) if existing == ca_pem => {}
        Ok(_) => {
            return Err(TlsError::Invalid {
                field: "out",
                message: format!("{} holds another CA's certificate", ca_copy.display()),
            });
        }
        Err(TlsError::Missing { .. }) => write_new(&ca_copy, &ca_pem, false)?,
        Err(e) => return Err(e),
    }
    Ok(out.to_path_buf())
}

/// A party's certificate, key and the CA it trusts, as PEM.
#[derive(Clone)]
pub struct Identity {
    cert: String,
    key: String,
    ca: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the private key.
        f.debug_struct("Identity").field("cert_bytes", &self.cert.len()).finish_non_exhaustive()
    }
}

impl Identity {
    /// Loads `NAME.pem`, `NAME.key` and `ca.pem` from `dir`.
    ///
    /// # Errors
    /// [`TlsError::Missing`] naming the absent file; I/O errors.
    pub fn load(dir: &Path, name: &str) -> Result<Self, TlsError> {
        check_name(name)?;
        let hint = "issue one with `lardon cert issue`";
        Ok(Identity {
            cert: read(&dir.join(format!("{name}.pem")), hint)?,
            key: read(&dir.join(format!("{name}.key")), hint)?,
            ca: read(&dir.join(CA_CERT), hint)?,
        })
    }

    /// The broker's TLS: presents this certificate and requires every
    /// client to present one issued by the same CA.
    #[must_use]
    pub fn server_config(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(&self.cert, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
            .client_auth_optional(false)
    }

    /// A client's TLS: trusts only the cluster CA, expects the broker to
    /// be `domain` (a name or address in its certificate) and presents
    /// this certificate.
    #[must_use]
    pub fn client_config(&self, domain: &str) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(tonic::transport::Identity::from_pem(&self.cert, &self.key))
            .domain_name(domain)
    }
}
