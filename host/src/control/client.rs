//! Reaching a running host's control API: what the `weir jobs`,
//! `weir savepoint`, `weir cancel`, `weir upgrade` and `weir fork` commands
//! use.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{
    ApiToken, ErrorReply, ForkInfo, ForkRequest, JobInfo, SavepointInfo, SavepointRequest, UpgradeInfo, UpgradeRequest,
};

/// How long a request may take, all told: an upgrade or a savepoint of a
/// large state takes a while.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
/// How long to wait for the connection to the host.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a control request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No connection to the host: it is not running, or not at that address.
    #[error(
        "cannot reach the Weir host at {addr} (is `weir run` running? its address is printed at start; \
         pass --api or set WEIR_API): {cause}"
    )]
    Unreachable { addr: String, cause: String },
    /// The host answered with an error; `message` is its text, verbatim.
    #[error("{message}")]
    Reply { status: u16, message: String },
    /// The request was sent but no (complete) reply came back.
    #[error("no reply from the Weir host at {addr} ({cause}); the request may still be carried out: see `weir jobs`")]
    NoReply { addr: String, cause: String },
    /// A reply that is not what the control API sends.
    #[error("the Weir host at {addr} sent a reply this weir does not understand (status {status}): {cause}")]
    BadReply { addr: String, status: u16, cause: String },
    /// The address itself is unusable.
    #[error("`{addr}` is not an address of a Weir host (expected e.g. 127.0.0.1:7070): {cause}")]
    BadAddress { addr: String, cause: String },
}

impl ClientError {
    /// The HTTP status of an error reply.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Reply { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A blocking client of a host's control API.
#[derive(Debug, Clone)]
pub struct ApiClient {
    /// As given (for messages).
    addr: String,
    /// `http://host:port`, without a trailing slash.
    base: String,
    agent: ureq::Agent,
    /// Sent with every request, if the host takes requests with a token only.
    token: Option<ApiToken>,
}

impl ApiClient {
    /// A client of the host at `addr`: `127.0.0.1:7070` or
    /// `http://127.0.0.1:7070`. Nothing is sent until a request is made.
    pub fn new(addr: &str) -> Self {
        let addr = addr.trim().to_owned();
        let trimmed = addr.trim_end_matches('/');
        let base = if trimmed.contains("://") { trimmed.to_owned() } else { format!("http://{trimmed}") };
        let agent = ureq::Agent::config_builder()
            // Error replies are read, not turned into bare status codes.
            .http_status_as_error(false)
            // The host is reached directly, never through a proxy.
            .proxy(None)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .user_agent(concat!("weir/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        ApiClient { addr, base, agent, token: None }
    }

    /// The same client, presenting `token` with every request.
    pub fn with_token(self, token: Option<ApiToken>) -> Self {
        ApiClient { token, ..self }
    }

    /// The address the client was made with.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The jobs the host runs (or ran).
    pub fn jobs(&self) -> Result<Vec<JobInfo>, ClientError> {
        self.get("/jobs")
    }

    /// One job.
    pub fn job(&self, name: &str) -> Result<JobInfo, ClientError> {
        self.get(&format!("/jobs/{}", percent_encode(name)))
    }

    /// Takes a savepoint of a job (and stops it, if asked to).
    pub fn savepoint(&self, job: &str, request: &SavepointRequest) -> Result<SavepointInfo, ClientError> {
        self.post(&format!("/jobs/{}/savepoint", percent_encode(job)), Some(request))
    }

    /// Cancels a job.
    pub fn cancel(&self, job: &str) -> Result<JobInfo, ClientError> {
        self.post::<(), _>(&format!("/jobs/{}/cancel", percent_encode(job)), None)
    }

    /// Swaps the plugin of one of a job's operators, through a savepoint.
    pub fn upgrade(&self, job: &str, request: &UpgradeRequest) -> Result<UpgradeInfo, ClientError> {
        self.post(&format!("/jobs/{}/upgrade", percent_encode(job)), Some(request))
    }

    /// Starts a new job from a running job or a savepoint.
    pub fn fork(&self, request: &ForkRequest) -> Result<ForkInfo, ClientError> {
        self.post("/forks", Some(request))
    }

    /// The host's jobs as Prometheus metrics: the text of `GET /metrics`
    /// (see [`metrics`](super::metrics)).
    pub fn metrics(&self) -> Result<String, ClientError> {
        let sent = self.authorized(self.agent.get(format!("{}/metrics", self.base))).header("Accept", "text/plain").call();
        Ok(self.reply_text(sent)?.1)
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let sent = self.authorized(self.agent.get(format!("{}{path}", self.base))).header("Accept", "application/json").call();
        self.reply(sent)
    }

    fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: Option<&B>) -> Result<T, ClientError> {
        let request = self
            .authorized(self.agent.post(format!("{}{path}", self.base)))
            .header("Accept", "application/json")
            .content_type("application/json");
        let sent = match body {
            Some(body) => {
                let json = serde_json::to_string(body).expect("control requests encode as JSON");
                request.send(json)
            }
            None => request.send_empty(),
        };
        self.reply(sent)
    }

    /// `request`, with the token if the client has one.
    fn authorized<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(token) => request.header("Authorization", token.header_value()),
            None => request,
        }
    }

    fn reply<T: DeserializeOwned>(
        &self,
        sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T, ClientError> {
        let (status, text) = self.reply_text(sent)?;
        serde_json::from_str(&text).map_err(|e| ClientError::BadReply { addr: self.addr.clone(), status, cause: e.to_string() })
    }

    /// The status and text of a successful reply, or the error it carries.
    fn reply_text(&self, sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<(u16, String), ClientError> {
        let mut response = sent.map_err(|e| self.transport_error(e))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(|e| self.transport_error(e))?;
        if (200..300).contains(&status) {
            return Ok((status, text));
        }
        let message = match serde_json::from_str::<ErrorReply>(&text) {
            // The job may run in another host: say which one was asked.
            Ok(reply) if status == 404 => {
                format!("{} (asked the host at {}; pass --api or set WEIR_API to ask another)", reply.error, self.addr)
            }
            Ok(reply) => reply.error,
            // Not the control API's error (another server on that port?):
            // say what came back.
            Err(_) if text.trim().is_empty() => format!("HTTP status {status} without a message"),
            Err(_) => format!("HTTP status {status}: {}", text.trim()),
        };
        Err(ClientError::Reply { status, message })
    }

    fn transport_error(&self, error: ureq::Error) -> ClientError {
        use std::io::ErrorKind;
        let addr = self.addr.clone();
        // Nothing was sent to an address that does not resolve (ureq says
        // only "io: failed to lookup address").
        if let Err(unresolved) = std::net::ToSocketAddrs::to_socket_addrs(addr.as_str()) {
            return ClientError::BadAddress { addr, cause: unresolved.to_string() };
        }
        let cause = error.to_string();
        match &error {
            ureq::Error::BadUri(_) | ureq::Error::Http(_) => ClientError::BadAddress { addr, cause },
            ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => ClientError::Unreachable { addr, cause },
            ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve) => {
                ClientError::Unreachable { addr, cause }
            }
            ureq::Error::Io(io)
                if matches!(
                    io.kind(),
                    ErrorKind::ConnectionRefused
                        | ErrorKind::AddrNotAvailable
                        | ErrorKind::HostUnreachable
                        | ErrorKind::NetworkUnreachable
                        | ErrorKind::NotFound
                ) =>
            {
                ClientError::Unreachable { addr, cause }
            }
            _ => ClientError::NoReply { addr, cause },
        }
    }
}

/// Escapes a job name for a path segment.
fn percent_encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn addresses_with_or_without_a_scheme() {
        assert_eq!(ApiClient::new("127.0.0.1:7070").base, "http://127.0.0.1:7070");
        assert_eq!(ApiClient::new(" http://127.0.0.1:7070/ ").base, "http://127.0.0.1:7070");
        assert_eq!(ApiClient::new("localhost:1").addr(), "localhost:1");
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(percent_encode("word-count_2.v~1"), "word-count_2.v~1");
        assert_eq!(percent_encode("a b/c✓"), "a%20b%2Fc%E2%9C%93");
    }

    #[test]
    fn an_address_that_does_not_resolve_is_a_bad_address() {
        for addr in ["garbage", "no-such-host.invalid:7070"] {
            let error = ApiClient::new(addr).jobs().unwrap_err();
            assert!(matches!(error, ClientError::BadAddress { .. }), "{addr}: {error:?}");
            assert!(error.to_string().contains("(expected e.g. 127.0.0.1:7070)"), "{error}");
        }
    }

    #[test]
    fn no_host_is_unreachable_with_a_hint() {
        // A port that was free a moment ago.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let error = ApiClient::new(&addr).jobs().unwrap_err();
        assert!(matches!(error, ClientError::Unreachable { .. }), "{error:?}");
        let text = error.to_string();
        assert!(text.starts_with(&format!("cannot reach the Weir host at {addr} (is `weir run` running?")), "{text}");
        assert!(text.contains("--api") && text.contains("WEIR_API"), "{text}");
        assert_eq!(error.status(), None);
    }

    /// Answers one request with a canned HTTP reply.
    fn one_reply(reply: &'static str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            // The request's head (the requests of these tests have no body).
            let mut request = Vec::new();
            let mut buffer = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
            stream.write_all(reply.as_bytes()).unwrap();
            // Close gently: a close with unread input would be a reset.
            let _ = stream.shutdown(std::net::Shutdown::Write);
            let _ = stream.read_to_end(&mut request);
        });
        addr
    }

    #[test]
    fn error_replies_keep_status_and_text() {
        let addr = one_reply(
            "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: 38\r\nConnection: close\r\n\r\n\
             {\"error\":\"job `x` is being upgraded\"}\n",
        );
        let error = ApiClient::new(&addr).cancel("x").unwrap_err();
        assert!(matches!(&error, ClientError::Reply { status: 409, message } if message == "job `x` is being upgraded"));
        assert_eq!(error.to_string(), "job `x` is being upgraded");
    }

    #[test]
    fn a_foreign_server_is_reported_as_such() {
        let addr = one_reply("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot here\n");
        let error = ApiClient::new(&addr).jobs().unwrap_err();
        assert_eq!(error.status(), Some(404));
        assert_eq!(error.to_string(), "HTTP status 404: not here");

        let addr = one_reply("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n");
        let error = ApiClient::new(&addr).jobs().unwrap_err();
        assert!(matches!(error, ClientError::BadReply { status: 200, .. }), "{error:?}");
    }
}
