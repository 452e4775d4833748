//! How agents and submitters reach the broker: plain or mutual TLS with
//! the cluster CA (`lardon cert`), plus the join token in every request's
//! metadata when the cluster has one. Both are optional so that a broker
//! on loopback for tests and demos needs no set-up; a broker started with
//! `--tls-dir` refuses anyone without a certificate from its CA, and one
//! with `--join-token-file` anyone without the token.

use lardon_proto::cluster::broker_client::BrokerClient;
use lardon_tls::{Identity, JoinToken, TokenAttach};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

/// Adds the join token, when there is one, to every request.
#[derive(Debug, Clone, Default)]
pub struct MaybeToken(Option<JoinToken>);

impl tonic::service::Interceptor for MaybeToken {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        match &self.0 {
            Some(t) => TokenAttach::new(t.clone()).call(request),
            None => Ok(request),
        }
    }
}

/// A connected broker client.
pub type Client = BrokerClient<InterceptedService<Channel, MaybeToken>>;

/// The credentials a peer dials with.
#[derive(Debug, Clone, Default)]
pub struct Dial {
    /// This peer's certificate and the cluster CA: the connection is
    /// mutual TLS (`https`), and the broker must present a certificate
    /// from that CA naming the host dialled.
    pub tls: Option<Identity>,
    /// The cluster's join token.
    pub token: Option<JoinToken>,
}

impl Dial {
    /// Connects to `broker` (`HOST:PORT` or a URI).
    ///
    /// # Errors
    /// A malformed address or a failed connection (including a TLS
    /// handshake the broker refused).
    pub async fn connect(&self, broker: &str) -> Result<Client, tonic::transport::Error> {
        let channel = self.channel(broker).await?;
        Ok(BrokerClient::with_interceptor(channel, self.interceptor()))
    }

    /// A connected channel to `broker` (`HOST:PORT` or a URI), for the
    /// other services on the broker's port (its CAS); wrap its clients in
    /// [`Dial::interceptor`] so they present the join token.
    ///
    /// # Errors
    /// A malformed address or a failed connection (including a TLS
    /// handshake the broker refused).
    pub async fn channel(&self, broker: &str) -> Result<Channel, tonic::transport::Error> {
        let host_port = broker.split("://").last().unwrap_or(broker);
        match &self.tls {
            Some(id) => {
                let domain =
                    host_port.rsplit_once(':').map_or(host_port, |(h, _)| h).trim_matches(['[', ']']);
                Endpoint::from_shared(format!("https://{host_port}"))?
                    .tls_config(id.client_config(domain))?
                    .connect()
                    .await
            }
            None => Endpoint::from_shared(format!("http://{host_port}"))?.connect().await,
        }
    }

    /// What is wrong with these credentials for this broker, in terms of
    /// the flags that fix it, when `failure` (a failed connection, or the
    /// status of a first call) shows a TLS mismatch: a plain client
    /// talking to a TLS broker, a TLS client talking to a plain one, a
    /// broker certificate from another CA or for another name, or a client
    /// certificate the broker refused. `None` when it is something else
    /// (nothing listening, a refusal of the call itself).
    #[must_use]
    pub fn diagnose(&self, failure: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
        let said = error_chain(failure).to_ascii_lowercase();
        let any = |words: &[&str]| words.iter().any(|w| said.contains(w));
        if self.tls.is_none() {
            // A TLS server answers a plain HTTP/2 preface with a TLS alert,
            // which h2 reads as a malformed frame.
            return any(&["frame with invalid size", "h2 protocol error", "connection reset", "broken pipe"])
                .then_some(
                    "the broker speaks mutual TLS: give --tls-dir DIR holding a client certificate from its CA \
                     (`lardon cert issue NAME --ca CA --out DIR`) and --tls-name NAME",
                );
        }
        if any(&["unknownissuer", "unknown issuer", "badsignature"]) {
            Some(
                "the broker's certificate is not signed by the CA in --tls-dir (its ca.pem): use the cluster's CA",
            )
        } else if any(&["notvalidforname", "not valid for name"]) {
            Some(
                "the broker's certificate does not name the address dialled: issue it with `--host` that name",
            )
        } else if any(&["invalidcontenttype", "corrupt message", "invalid content type"]) {
            Some("the broker does not speak TLS: drop --tls-dir, or start the broker with --tls-dir")
        } else if any(&[
            "unknownca",
            "unknown ca",
            "badcertificate",
            "bad certificate",
            "certificaterequired",
            "alert",
        ]) {
            Some(
                "the broker refused this client's certificate: it must come from the broker's CA \
                 (`lardon cert issue NAME --ca CA --out DIR`), named with --tls-dir and --tls-name",
            )
        } else {
            None
        }
    }

    /// What adds this peer's join token (if any) to every request.
    #[must_use]
    pub fn interceptor(&self) -> MaybeToken {
        MaybeToken(self.token.clone())
    }
}

/// Why a peer that keeps redialling (an agent, an offloading daemon)
/// cannot reach its broker, logged at warn once per distinct reason, so a
/// wrong certificate says so in the log without a line per retry.
#[derive(Debug, Default)]
pub struct UnreachedLog {
    last: Option<String>,
}

impl UnreachedLog {
    /// A dial of `broker` with `dial` failed with `failure`.
    pub fn failed(&mut self, broker: &str, dial: &Dial, failure: &(dyn std::error::Error + 'static)) {
        let text = match dial.diagnose(failure) {
            Some(hint) => format!("{hint} (it failed with: {})", root_cause(failure)),
            None => error_chain(failure),
        };
        if self.last.as_deref() != Some(text.as_str()) {
            tracing::warn!("cannot reach the broker at {broker}: {text}");
            self.last = Some(text);
        }
    }

    /// The broker answered: the next failure is logged again.
    pub fn reached(&mut self) {
        self.last = None;
    }
}

/// The innermost reason under `failure` (a TLS alert, a refused
/// connection), without the layers' own words.
#[must_use]
pub fn root_cause(failure: &(dyn std::error::Error + 'static)) -> String {
    let mut last = failure;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

/// `failure` and every error under it, joined with `: ` (a transport
/// error's own text is only "transport error"; the reason is below it).
#[must_use]
pub fn error_chain(failure: &(dyn std::error::Error + 'static)) -> String {
    let mut text = failure.to_string();
    let mut next = failure.source();
    while let Some(e) = next {
        let said = e.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        next = e.source();
    }
    text
}
