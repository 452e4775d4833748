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

    /// What adds this peer's join token (if any) to every request.
    #[must_use]
    pub fn interceptor(&self) -> MaybeToken {
        MaybeToken(self.token.clone())
    }
}
