//! Join tokens: a shared secret an agent or daemon presents in every
//! request's metadata, on top of its certificate. A token file holds one
//! line of 64 hexadecimal digits (256 random bits), mode 0600.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

use crate::TlsError;

/// The metadata key carrying the token.
pub const TOKEN_HEADER: &str = "lardon-join-token";
const TOKEN_HEX: usize = 64;

/// A join token. Its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinToken(String);

impl std::fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JoinToken(…)")
    }
}

impl JoinToken {
    /// A new random token.
    ///
    /// # Errors
    /// [`TlsError::Random`] when the system has no randomness to give.
    pub fn generate() -> Result<Self, TlsError> {
        let mut bytes = [0u8; TOKEN_HEX / 2];
        getrandom::fill(&mut bytes).map_err(|e| TlsError::Random("join token", e.to_string()))?;
        Ok(JoinToken(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// Parses a token as written by [`JoinToken::write_new`] (surrounding
    /// whitespace ignored).
    ///
    /// # Errors
    /// [`TlsError::Invalid`] naming `token` for anything but 64 hex digits.
    pub fn parse(text: &str) -> Result<Self, TlsError> {
        let t = text.trim();
        if t.len() == TOKEN_HEX && t.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(JoinToken(t.to_ascii_lowercase()))
        } else {
            Err(TlsError::Invalid {
                field: "token",
                message: "a join token is 64 hexadecimal digits (create one with `lardon cert token`)".into(),
            })
        }
    }

    /// Reads a token file.
    ///
    /// # Errors
    /// [`TlsError::Missing`], I/O errors, or [`TlsError::Invalid`].
    pub fn load(path: &Path) -> Result<Self, TlsError> {
        let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                TlsError::Missing { path: path.to_path_buf(), hint: "create one with `lardon cert token`" }
            }
            _ => TlsError::Io { path: path.to_path_buf(), source: e },
        })?;
        Self::parse(&text).map_err(|_| TlsError::Invalid {
            field: "token",
            message: format!("{} does not hold a join token (64 hexadecimal digits)", path.display()),
        })
    }

    /// Writes the token to a new file, mode 0600 (never over an existing one).
    ///
    /// # Errors
    /// [`TlsError::Exists`]; I/O errors.
    pub fn write_new(&self, path: &Path) -> Result<(), TlsError> {
        let mut file =
            OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(|e| {
                match e.kind() {
                    std::io::ErrorKind::AlreadyExists => TlsError::Exists(path.to_path_buf()),
                    _ => TlsError::Io { path: path.to_path_buf(), source: e },
                }
            })?;
        file.write_all(format!("{}\n", self.0).as_bytes())
            .map_err(|e| TlsError::Io { path: path.to_path_buf(), source: e })
    }

    /// Whether `presented` is this token, in time independent of where
    /// they differ.
    #[must_use]
    pub fn matches(&self, presented: &[u8]) -> bool {
        let mine = self.0.as_bytes();
        if presented.len() != mine.len() {
            return false;
        }
        mine.iter().zip(presented).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

/// A server-side interceptor: refuses, with `UNAUTHENTICATED`, every
/// request whose [`TOKEN_HEADER`] is missing or wrong.
#[derive(Debug, Clone)]
pub struct TokenCheck(JoinToken);

impl TokenCheck {
    /// Checks requests against `token`.
    #[must_use]
    pub fn new(token: JoinToken) -> Self {
        TokenCheck(token)
    }
}

impl tonic::service::Interceptor for TokenCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        match request.metadata().get(TOKEN_HEADER) {
            Some(v) if self.0.matches(v.as_bytes()) => Ok(request),
            Some(_) => Err(Status::unauthenticated("wrong join token")),
            None => Err(Status::unauthenticated(format!("no join token (metadata `{TOKEN_HEADER}`)"))),
        }
    }
}

/// A client-side interceptor: adds the token to every request.
#[derive(Debug, Clone)]
pub struct TokenAttach(JoinToken);

impl TokenAttach {
    /// Attaches `token` to requests.
    #[must_use]
    pub fn new(token: JoinToken) -> Self {
        TokenAttach(token)
    }
}

impl tonic::service::Interceptor for TokenAttach {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let value = MetadataValue::try_from(self.0.0.as_str())
            .map_err(|_| Status::internal("a join token is not valid metadata"))?;
        request.metadata_mut().insert(TOKEN_HEADER, value);
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tokens_round_trip_and_only_the_same_token_matches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let t = JoinToken::generate().unwrap();
        t.write_new(&path).unwrap();
        assert!(matches!(t.write_new(&path), Err(TlsError::Exists(_))), "never overwritten");
        let mode = std::fs::metadata(&path)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()))
            .unwrap();
        assert_eq!(mode & 0o777, 0o600);
        let back = JoinToken::load(&path).unwrap();
        assert_eq!(back, t);
        assert!(back.matches(t.0.as_bytes()));
        let other = JoinToken::generate().unwrap();
        assert!(!back.matches(other.0.as_bytes()));
        assert!(!back.matches(&t.0.as_bytes()[1..]), "a prefix is not the token");
        assert!(format!("{t:?}").find(&t.0).is_none(), "Debug hides the secret");
    }

    #[test]
    fn a_malformed_token_is_refused_naming_the_field() {
        for bad in ["", "abc", &"g".repeat(64), &"a".repeat(65)] {
            let e = JoinToken::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("token: "), "{e}");
        }
    }
}
