//! Serving a [`ControlPlane`] as HTTP/JSON (the routes are in the
//! [module doc](super)).
//!
//! Each request is handled on a thread of its own: an upgrade or a savepoint
//! can block for seconds, and `GET /jobs` must still answer meanwhile.

use std::io::Read;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tiny_http::{ConfigListenAddr, Header, Method, Request, Response, Server, ServerConfig};

use super::{ApiToken, ControlError, ControlPlane, ErrorReply, ForkRequest, SavepointRequest, TOKEN_ENV, UpgradeRequest, metrics};

/// The largest request body accepted (requests are a few paths and names).
const MAX_BODY: u64 = 1 << 20;

/// The routes, for the message of a 404 or 405.
const ROUTES: &str = "GET /jobs, GET /jobs/{name}, POST /jobs/{name}/savepoint, POST /jobs/{name}/cancel, \
                      POST /jobs/{name}/upgrade, POST /forks, GET /metrics";

/// The control API of a running host, served on a background thread until
/// it is stopped or dropped.
pub struct ApiServer {
    addr: SocketAddr,
    server: Option<Arc<Server>>,
    stopping: Arc<AtomicBool>,
    /// Requests being handled (each on a thread of its own).
    in_flight: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

/// How long a read from a client may wait: a request that sends less than
/// its `Content-Length` is answered 408 then (a body of up to 1 KiB, which
/// tiny_http reads before handing the request over, without a text), and
/// an idle kept-alive connection closed, so that no client holds a thread
/// of the host.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How many connections are served at once: each holds a thread and file
/// descriptors, which idle clients would otherwise use up, and the job's
/// checkpoints and sinks with them.
const MAX_CONNECTIONS: usize = 64;

/// How long stopping waits for the answers of requests being handled.
const ANSWER_PATIENCE: Duration = Duration::from_secs(10);

impl ApiServer {
    /// Listens on `addr` (`127.0.0.1:7070`, or `127.0.0.1:0` for any free
    /// port; an `http://` prefix is allowed) and serves `plane` there — to
    /// requests that present `token`, if there is one.
    pub fn start(addr: &str, plane: Arc<dyn ControlPlane>, token: Option<ApiToken>) -> std::io::Result<ApiServer> {
        Self::start_with(addr, plane, READ_TIMEOUT, token)
    }

    /// [`ApiServer::start`], a read from a client waiting at most `read_timeout`.
    fn start_with(
        addr: &str,
        plane: Arc<dyn ControlPlane>,
        read_timeout: Duration,
        token: Option<ApiToken>,
    ) -> std::io::Result<ApiServer> {
        let listen = addr.trim().trim_start_matches("http://").trim_end_matches('/');
        let config = |addr| ServerConfig { addr, ssl: None, read_timeout: Some(read_timeout), max_connections: Some(MAX_CONNECTIONS) };
        let server = ConfigListenAddr::from_socket_addrs(listen).map_err(Into::into).map(config).and_then(Server::new).map_err(|error| {
            let kind = error.downcast_ref::<std::io::Error>().map_or(std::io::ErrorKind::Other, |e| e.kind());
            std::io::Error::new(kind, format!("cannot serve the control API on {listen}: {error}"))
        })?;
        let bound = server.server_addr().to_ip().ok_or_else(|| {
            std::io::Error::other(format!("cannot serve the control API on {listen}: not an IP address"))
        })?;
        if !bound.ip().is_loopback() && token.is_none() {
            // Anyone who reaches it can cancel, fork or upgrade the jobs.
            tracing::warn!(
                addr = %bound,
                "the control API is served beyond this machine without a token: set {TOKEN_ENV} to require one"
            );
        }
        let server = Arc::new(server);
        let stopping = Arc::new(AtomicBool::new(false));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let thread = std::thread::Builder::new().name("weir-api".into()).spawn({
            let server = Arc::clone(&server);
            let stopping = Arc::clone(&stopping);
            let in_flight = Arc::clone(&in_flight);
            move || accept_loop(&server, &stopping, &in_flight, plane, read_timeout, token)
        })?;
        tracing::debug!(addr = %bound, "control API listening");
        Ok(ApiServer { addr: bound, server: Some(server), stopping, in_flight, thread: Some(thread) })
    }

    /// The address it listens on (with the real port when started on port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting requests and closes the listening socket. Requests
    /// already being handled are still answered: it waits for them (up to
    /// 10 s), so that a host exiting right after — the last job stopped
    /// with a savepoint — does not cut off the answer to the request that
    /// stopped it. Dropping the server does the same.
    pub fn stop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(server) = &self.server {
            server.unblock();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let deadline = Instant::now() + ANSWER_PATIENCE;
        while self.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        // The last reference: dropping it closes the listener, on
        // tiny_http's accept thread, soon after.
        if self.server.take().is_some() {
            self.await_port_closed();
        }
    }

    /// Waits (a little, at most) until the listening socket is closed, so
    /// that the port is free and connecting to it fails once `stop` returns.
    fn await_port_closed(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            match std::net::TcpListener::bind(self.addr) {
                Ok(_) => return,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                Err(_) => return,
            }
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// Counts a request as being handled until it is dropped.
struct Handling(Arc<AtomicUsize>);

impl Handling {
    fn start(in_flight: &Arc<AtomicUsize>) -> Self {
        in_flight.fetch_add(1, Ordering::SeqCst);
        Handling(Arc::clone(in_flight))
    }
}

impl Drop for Handling {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(
    server: &Server,
    stopping: &AtomicBool,
    in_flight: &Arc<AtomicUsize>,
    plane: Arc<dyn ControlPlane>,
    read_timeout: Duration,
    token: Option<ApiToken>,
) {
    loop {
        let received = server.recv();
        if stopping.load(Ordering::SeqCst) {
            break;
        }
        match received {
            Ok(request) => {
                let plane = Arc::clone(&plane);
                let token = token.clone();
                let handling = Handling::start(in_flight);
                let spawned = std::thread::Builder::new().name("weir-api-request".into()).spawn(move || {
                    let _handling = handling;
                    serve(plane.as_ref(), request, read_timeout, token.as_ref())
                });
                if let Err(error) = spawned {
                    tracing::error!(%error, "control API: cannot start a thread for a request");
                }
            }
            Err(error) => {
                // A failed accept: keep serving, but don't spin on a
                // persistent failure.
                tracing::warn!(%error, "control API: accepting a connection failed");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Handles one request and logs it; its body must arrive within
/// `read_timeout`, and it must present `token` if there is one.
fn serve(plane: &dyn ControlPlane, mut request: Request, read_timeout: Duration, token: Option<&ApiToken>) {
    let start = Instant::now();
    let method = request.method().clone();
    let url = request.url().to_owned();
    let path = url.split(['?', '#']).next().unwrap_or("").to_owned();
    let authorization = request.headers().iter().find(|h| h.field.equiv("Authorization")).map(|h| h.value.as_str().to_owned());
    let admitted = token.is_none_or(|token| token.admits(authorization.as_deref()));
    let (status, body) = match read_body(&mut request, Instant::now() + read_timeout) {
        Ok(_) if !admitted => error(401, unauthorized(authorization.is_some())),
        Ok(body) => match std::panic::catch_unwind(AssertUnwindSafe(|| handle(plane, &method, &path, &body))) {
            Ok(reply) => reply,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".into());
                error(500, format!("the host failed handling {method} {path}: {what}"))
            }
        },
        Err(reply) => reply,
    };
    let content_type = match resolve(&path) {
        Ok(Some((Route::Metrics, _))) if status == 200 => metrics::CONTENT_TYPE,
        _ => "application/json",
    };
    let mut response = Response::from_string(body).with_status_code(status);
    response.add_header(Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes()).expect("a valid header"));
    if status == 401 {
        response.add_header(Header::from_bytes(&b"WWW-Authenticate"[..], &b"Bearer"[..]).expect("a valid header"));
    }
    if status == 405
        && let Ok(Some((_, allow))) = resolve(&path)
    {
        response.add_header(Header::from_bytes(&b"Allow"[..], allow.as_str().as_bytes()).expect("a valid header"));
    }
    let sent = request.respond(response);
    // To the hundredth of a millisecond, so that logs don't show 0.10052000000000001.
    let ms = (start.elapsed().as_secs_f64() * 100_000.0).round() / 100.0;
    let method = method.as_str();
    if status >= 500 {
        tracing::warn!(method, path = %path, status, ms, "control request");
    } else if method == "GET" {
        // Status and metrics polls, every few seconds from a scraper.
        tracing::debug!(method, path = %path, status, ms, "control request");
    } else {
        tracing::info!(method, path = %path, status, ms, "control request");
    }
    if let Err(error) = sent {
        tracing::debug!(method, path = %path, %error, "control API: the reply could not be sent");
    }
}

/// Why a request without the host's token (`presented`: with another) is
/// refused.
fn unauthorized(presented: bool) -> String {
    let which = if presented { "the token this request gave is not this host's" } else { "this request gave none" };
    format!(
        "this host's control API takes requests with its token only, and {which}: set {TOKEN_ENV} to the token \
         the host was started with (the commands send it as `Authorization: Bearer TOKEN`)"
    )
}

/// The request's body, which must have arrived by `deadline`: each read
/// waits at most the read timeout, but a client trickling a byte at a time
/// would otherwise hold a thread for as long as it likes.
fn read_body(request: &mut Request, deadline: Instant) -> Result<Vec<u8>, (u16, String)> {
    // (tiny_http takes a Content-Length it cannot read for no body at all,
    // and the first of several.)
    let declared: Vec<&str> =
        request.headers().iter().filter(|h| h.field.equiv("Content-Length")).map(|h| h.value.as_str().trim()).collect();
    if let Some(unreadable) = declared.iter().find(|value| value.parse::<u64>().is_err()) {
        return Err(error(400, format!("Content-Length {unreadable:?} is not a length in bytes")));
    }
    if declared.windows(2).any(|pair| pair[0] != pair[1]) {
        return Err(error(400, format!("the request gives different lengths ({}); give one Content-Length", declared.join(", "))));
    }
    if request.body_length().is_some_and(|n| n as u64 > MAX_BODY) {
        return Err(error(413, format!("the request body is larger than {MAX_BODY} bytes")));
    }
    let declared = declared.first().map_or_else(String::new, |length| format!(" of the {length} its Content-Length declares"));
    let mut body = Vec::new();
    Until { inner: request.as_reader(), deadline }
        .take(MAX_BODY + 1)
        .read_to_end(&mut body)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => error(408, format!(
                "the request body stopped coming ({} bytes{}); send it whole",
                body.len(),
                declared,
            )),
            _ => error(400, format!("cannot read the request body: {e}")),
        })?;
    if body.len() as u64 > MAX_BODY {
        return Err(error(413, format!("the request body is larger than {MAX_BODY} bytes")));
    }
    Ok(body)
}

/// A reader that fails with `TimedOut` once `deadline` has passed.
struct Until<R> {
    inner: R,
    deadline: Instant,
}

impl<R: Read> Read for Until<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if Instant::now() > self.deadline {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the request body came too slowly"));
        }
        self.inner.read(buf)
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq)]
enum Route {
    Jobs,
    Job(String),
    Savepoint(String),
    Cancel(String),
    Upgrade(String),
    Fork,
    Metrics,
}

/// Finds the route of a request, or the error reply (404, 405) for a path
/// or method that has none.
fn route(method: &Method, path: &str) -> Result<Route, (u16, String)> {
    match resolve(path)? {
        None => Err(error(404, format!("no route for {method} {path}; the routes are: {ROUTES}"))),
        Some((_, expected)) if *method != expected => {
            Err(error(405, format!("{path} takes {expected}, not {method}; the routes are: {ROUTES}")))
        }
        Some((route, _)) => Ok(route),
    }
}

/// The route of a path and the method it takes; `None` for a path that
/// has no route.
fn resolve(path: &str) -> Result<Option<(Route, Method)>, (u16, String)> {
    let trimmed = path.trim_matches('/');
    let segments: Vec<&str> = if trimmed.is_empty() { Vec::new() } else { trimmed.split('/').collect() };
    let name = |segment: &str| -> Result<String, (u16, String)> {
        percent_decode(segment)
            .ok_or_else(|| error(400, format!("the job name in {path} is not valid percent-encoded UTF-8")))
    };
    Ok(Some(match segments.as_slice() {
        ["jobs"] => (Route::Jobs, Method::Get),
        ["jobs", job] => (Route::Job(name(job)?), Method::Get),
        ["jobs", job, "savepoint"] => (Route::Savepoint(name(job)?), Method::Post),
        ["jobs", job, "cancel"] => (Route::Cancel(name(job)?), Method::Post),
        ["jobs", job, "upgrade"] => (Route::Upgrade(name(job)?), Method::Post),
        ["forks"] => (Route::Fork, Method::Post),
        ["metrics"] => (Route::Metrics, Method::Get),
        _ => return Ok(None),
    }))
}

/// Carries out one request: its status and JSON reply.
fn handle(plane: &dyn ControlPlane, method: &Method, path: &str, body: &[u8]) -> (u16, String) {
    let route = match route(method, path) {
        Ok(route) => route,
        Err(reply) => return reply,
    };
    match route {
        Route::Jobs => json(200, &plane.jobs()),
        Route::Metrics => (200, metrics::prometheus(&plane.jobs())),
        Route::Job(job) => reply(plane.job(&job)),
        Route::Savepoint(job) => {
            // An empty body asks for the defaults.
            let request = if body.iter().all(u8::is_ascii_whitespace) {
                SavepointRequest::default()
            } else {
                match parse::<SavepointRequest>(body, "SavepointRequest") {
                    Ok(request) => request,
                    Err(reply) => return reply,
                }
            };
            reply(plane.savepoint(&job, request))
        }
        Route::Cancel(job) => reply(plane.cancel(&job)),
        Route::Upgrade(job) => match parse::<UpgradeRequest>(body, "UpgradeRequest") {
            Ok(request) => reply(plane.upgrade(&job, request)),
            Err(reply) => reply,
        },
        Route::Fork => match parse::<ForkRequest>(body, "ForkRequest") {
            Ok(request) => reply(plane.fork(request)),
            Err(reply) => reply,
        },
    }
}

fn parse<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T, (u16, String)> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(error(400, format!("the request needs a JSON {what} body, and it had none")));
    }
    // serde takes a struct from an array of its fields too; the API's
    // bodies are objects, so `[]` is a mistake, not a request.
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| error(400, format!("bad {what} body: {e}")))?;
    if !value.is_object() {
        return Err(error(400, format!("bad {what} body: a JSON object is expected, not {value}")));
    }
    serde_json::from_value(value).map_err(|e| error(400, format!("bad {what} body: {e}")))
}

fn reply<T: Serialize>(result: Result<T, ControlError>) -> (u16, String) {
    match result {
        Ok(value) => json(200, &value),
        Err(e) => error(e.status(), e.to_string()),
    }
}

fn json<T: Serialize>(status: u16, value: &T) -> (u16, String) {
    match serde_json::to_string(value) {
        Ok(mut text) => {
            text.push('\n');
            (status, text)
        }
        Err(e) => error(500, format!("cannot encode the reply: {e}")),
    }
}

fn error(status: u16, message: String) -> (u16, String) {
    let mut text = serde_json::to_string(&ErrorReply { error: message }).expect("a string encodes");
    text.push('\n');
    (status, text)
}

/// Decodes `%XX` escapes; `None` if they are malformed or not UTF-8.
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::PathBuf;
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::control::client::{ApiClient, ClientError};
    use crate::control::{ForkInfo, JobInfo, OperatorInfo, SavepointInfo, UpgradeInfo};

    /// A host with one job, `words`, that records what it was asked.
    #[derive(Default)]
    struct FakePlane {
        calls: Mutex<Vec<String>>,
        /// How long an upgrade takes.
        upgrade_delay: Duration,
    }

    fn job(name: &str, status: &str) -> JobInfo {
        JobInfo {
            name: name.into(),
            status: status.into(),
            uptime_s: 12.5,
            read: 1000,
            written: 990,
            operators: vec![
                OperatorInfo { uid: "tokenize".into(), plugin: "/p/tokenize.wasm".into(), parallelism: 2 },
                OperatorInfo { uid: "count".into(), plugin: "/p/word_count.wasm".into(), parallelism: 2 },
            ],
            checkpoint: None,
            nodes: Vec::new(),
            error: None,
            restarts: 0,
            last_failure: None,
            checkpoints_failed: 0,
            epochs_behind: 0,
        }
    }

    fn savepoint(job: &str, dir: PathBuf) -> SavepointInfo {
        SavepointInfo { job: job.into(), dir, checkpoint: 7, size_bytes: 4096, entries: 42, duration_ms: 3.5, uncommitted: 0 }
    }

    impl FakePlane {
        fn known(&self, name: &str) -> Result<(), ControlError> {
            if name == "words" { Ok(()) } else { Err(ControlError::NoSuchJob(name.into())) }
        }
        fn record(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }
    }

    impl ControlPlane for FakePlane {
        fn jobs(&self) -> Vec<JobInfo> {
            self.record("jobs".into());
            vec![job("words", "running")]
        }
        fn job(&self, name: &str) -> Result<JobInfo, ControlError> {
            self.known(name)?;
            Ok(job(name, "running"))
        }
        fn savepoint(&self, name: &str, request: SavepointRequest) -> Result<SavepointInfo, ControlError> {
            self.known(name)?;
            self.record(format!("savepoint {name} {:?} {}", request.dir, request.stop));
            Ok(savepoint(name, request.dir.unwrap_or_else(|| "/sp/default".into())))
        }
        fn cancel(&self, name: &str) -> Result<JobInfo, ControlError> {
            self.known(name)?;
            Ok(job(name, "cancelled"))
        }
        fn upgrade(&self, name: &str, request: UpgradeRequest) -> Result<UpgradeInfo, ControlError> {
            self.known(name)?;
            if request.operator != "count" {
                return Err(ControlError::Rejected(format!("job `{name}` has no operator `{}`", request.operator)));
            }
            self.record(format!("upgrade started {name}"));
            std::thread::sleep(self.upgrade_delay);
            self.record(format!("upgrade done {name}"));
            Ok(UpgradeInfo {
                job: name.into(),
                operator: request.operator,
                plugin: request.plugin,
                savepoint: savepoint(name, "/sp/up".into()),
                downtime_ms: 123.4,
                checked_entries: 42,
            })
        }
        fn fork(&self, request: ForkRequest) -> Result<ForkInfo, ControlError> {
            if request.name == "words" {
                return Err(ControlError::Conflict("there is already a job `words`".into()));
            }
            self.record(format!("fork {} {} {:?} {:?}", request.from, request.name, request.operators, request.sinks));
            Ok(ForkInfo { job: job(&request.name, "running"), savepoint: "/sp/fork".into(), job_file: None })
        }
    }

    fn start(plane: FakePlane) -> (ApiServer, Arc<FakePlane>) {
        let plane = Arc::new(plane);
        let server = ApiServer::start("127.0.0.1:0", plane.clone(), None).expect("the server starts");
        (server, plane)
    }

    /// A client that sends less of a body than it declares is answered
    /// once its reads wait too long, and holds no thread of the host.
    #[test]
    fn a_request_body_that_stops_coming_is_answered_408() {
        use std::io::Write;
        let plane = Arc::new(FakePlane::default());
        let server = ApiServer::start_with("127.0.0.1:0", plane, Duration::from_millis(300), None).expect("the server starts");
        let send_part = |declared: usize, sent: usize| {
            let mut client = std::net::TcpStream::connect(server.addr()).unwrap();
            client.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let head = format!("POST /forks HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n");
            client.write_all(head.as_bytes()).unwrap();
            client.write_all(&vec![b' '; sent]).unwrap();
            let mut reply = String::new();
            let _ = client.read_to_string(&mut reply);
            reply
        };
        // Up to 1 KiB, tiny_http reads the body itself.
        let reply = send_part(100, 4);
        assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
        let reply = send_part(5000, 2000);
        assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
        assert!(reply.contains("the request body stopped coming (2000 bytes of the 5000 its Content-Length declares)"), "{reply}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.in_flight.load(Ordering::SeqCst) > 0 {
            assert!(Instant::now() < deadline, "the request's thread ends");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A raw request (for what ApiClient never sends): status and body,
    /// which must be JSON.
    fn raw(server: &ApiServer, method: &str, path: &str, body: &str) -> (u16, String) {
        let (status, content_type, body) = raw_typed(server, method, path, body);
        assert_eq!(content_type.as_deref(), Some("application/json"));
        (status, body)
    }

    /// A raw request: status, content type and body.
    fn raw_typed(server: &ApiServer, method: &str, path: &str, body: &str) -> (u16, Option<String>, String) {
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).proxy(None).build().into();
        let url = format!("http://{}{path}", server.addr());
        let mut response = match method {
            "GET" => agent.get(&url).call(),
            "DELETE" => agent.delete(&url).call(),
            _ => agent.post(&url).content_type("application/json").send(body),
        }
        .expect("the request is answered");
        let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
        (response.status().as_u16(), content_type, response.body_mut().read_to_string().unwrap())
    }

    /// A host with a token answers only requests that present it — with
    /// a 401 saying what to set, and nothing done — metrics included.
    #[test]
    fn a_host_with_a_token_answers_only_its_bearers() {
        let plane = Arc::new(FakePlane::default());
        let token = ApiToken::new("s3cret");
        let server = ApiServer::start("127.0.0.1:0", plane.clone(), token.clone()).expect("the server starts");
        let addr = server.addr().to_string();
        for client in [ApiClient::new(&addr), ApiClient::new(&addr).with_token(ApiToken::new("guess"))] {
            let refused = client.cancel("words").unwrap_err();
            assert_eq!(refused.status(), Some(401), "{refused}");
            assert!(refused.to_string().contains("set WEIR_API_TOKEN to the token the host was started with"), "{refused}");
            assert_eq!(client.metrics().unwrap_err().status(), Some(401));
        }
        assert!(plane.calls.lock().unwrap().is_empty(), "nothing was done");
        let bearer = ApiClient::new(&addr).with_token(token);
        assert_eq!(bearer.jobs().unwrap().len(), 1);
        bearer.cancel("words").unwrap();
        assert!(bearer.metrics().is_ok());
    }

    #[test]
    fn metrics_are_served_as_prometheus_text() {
        let (server, _plane) = start(FakePlane::default());
        let (status, content_type, body) = raw_typed(&server, "GET", "/metrics", "");
        assert_eq!((status, content_type.as_deref()), (200, Some(metrics::CONTENT_TYPE)));
        assert!(body.lines().any(|l| l.starts_with("weir_job_records_read_total{job=\"words\"} ")), "{body}");
        assert_eq!(ApiClient::new(&server.addr().to_string()).metrics().unwrap(), body);
        let (status, body) = raw(&server, "POST", "/metrics", "");
        assert!(status == 405 && error_text(&body).contains("takes GET"), "{body}");
    }

    fn error_text(body: &str) -> String {
        serde_json::from_str::<ErrorReply>(body).expect("an ErrorReply").error
    }

    #[test]
    fn every_route_answers_through_the_client() {
        let (server, plane) = start(FakePlane::default());
        let client = ApiClient::new(&server.addr().to_string());

        let jobs = client.jobs().unwrap();
        assert_eq!(jobs, vec![job("words", "running")]);
        assert_eq!(client.job("words").unwrap(), job("words", "running"));

        let sp = client.savepoint("words", &SavepointRequest { dir: Some("/tmp/sp1".into()), stop: true }).unwrap();
        assert_eq!(sp, savepoint("words", "/tmp/sp1".into()));

        assert_eq!(client.cancel("words").unwrap().status, "cancelled");

        let upgrade = client
            .upgrade(
                "words",
                &UpgradeRequest { operator: "count".into(), plugin: "/p/new.wasm".into(), savepoint_dir: None },
            )
            .unwrap();
        assert_eq!(upgrade.operator, "count");
        assert_eq!(upgrade.plugin, PathBuf::from("/p/new.wasm"));
        assert_eq!(upgrade.checked_entries, 42);

        let fork = client
            .fork(&ForkRequest {
                from: "words".into(),
                name: "words-b".into(),
                operators: vec![("count".into(), "/p/b.wasm".into())],
                sinks: vec![("out".into(), "/tmp/b.txt".into())],
                topics: vec![],
                checkpoint_dir: None,
            })
            .unwrap();
        assert_eq!(fork.job.name, "words-b");
        assert_eq!(fork.savepoint, PathBuf::from("/sp/fork"));

        let calls = plane.calls.lock().unwrap().clone();
        assert_eq!(
            calls,
            vec![
                "jobs".to_string(),
                "savepoint words Some(\"/tmp/sp1\") true".into(),
                "upgrade started words".into(),
                "upgrade done words".into(),
                "fork words words-b [(\"count\", \"/p/b.wasm\")] [(\"out\", \"/tmp/b.txt\")]".into(),
            ]
        );
    }

    #[test]
    fn errors_carry_their_status_and_text() {
        let (server, _plane) = start(FakePlane::default());
        let client = ApiClient::new(&format!("http://{}/", server.addr()));

        let missing = client.job("nope").unwrap_err();
        assert_eq!(missing.status(), Some(404));
        let asked = format!("asked the host at http://{}/; pass --api or set WEIR_API to ask another", server.addr());
        assert_eq!(missing.to_string(), format!("there is no job `nope` in this host ({asked})"));
        assert_eq!(client.cancel("nope").unwrap_err().status(), Some(404));

        let rejected = client
            .upgrade("words", &UpgradeRequest { operator: "nope".into(), plugin: "/x.wasm".into(), savepoint_dir: None })
            .unwrap_err();
        assert!(matches!(&rejected, ClientError::Reply { status: 400, message } if message == "job `words` has no operator `nope`"));

        let conflict = client
            .fork(&ForkRequest {
                from: "/sp/x".into(),
                name: "words".into(),
                operators: vec![],
                sinks: vec![],
                topics: vec![],
                checkpoint_dir: None,
            })
            .unwrap_err();
        assert_eq!(conflict.status(), Some(409));
    }

    #[test]
    fn unknown_jobs_routes_and_methods() {
        let (server, _plane) = start(FakePlane::default());

        let (status, body) = raw(&server, "GET", "/jobs/nope", "");
        assert_eq!(status, 404);
        assert_eq!(error_text(&body), "there is no job `nope` in this host");

        let (status, body) = raw(&server, "GET", "/nothing/here", "");
        assert_eq!(status, 404);
        let text = error_text(&body);
        assert!(text.contains("GET /nothing/here") && text.contains("POST /jobs/{name}/upgrade"), "{text}");

        let (status, body) = raw(&server, "POST", "/jobs/words/frobnicate", "{}");
        assert_eq!(status, 404, "{body}");

        let (status, body) = raw(&server, "DELETE", "/jobs/words", "");
        assert_eq!(status, 405, "{body}");
        assert!(error_text(&body).contains("takes GET"), "{body}");

        let (status, _) = raw(&server, "GET", "/jobs/words/cancel", "");
        assert_eq!(status, 405);

        // A query string and a trailing slash don't matter; names are percent-decoded.
        assert_eq!(raw(&server, "GET", "/jobs/?pretty", "").0, 200);
        assert_eq!(raw(&server, "GET", "/jobs/w%6Frds", "").0, 200);
    }

    /// The status of a request written as `head` (its lines, without the
    /// blank one), with no body sent.
    fn raw_head(server: &ApiServer, head: &str) -> String {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
        stream.write_all(format!("{head}\r\n\r\n").as_bytes()).unwrap();
        let mut reply = Vec::new();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0; 4096];
        while !reply.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => reply.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&reply).lines().next().unwrap_or_default().to_owned()
    }

    /// A body declared far larger than the host has memory is refused, and
    /// the host serves on (tiny_http, as published, allocated the declared
    /// length to drain it and aborted the process); a length that is not
    /// one is refused, not taken for an empty body.
    #[test]
    fn declared_lengths_too_large_or_unreadable_are_refused() {
        let (server, plane) = start(FakePlane::default());
        for path in ["/jobs/words/savepoint", "/jobs"] {
            let status = raw_head(&server, &format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999"));
            assert!(status.contains(" 413 "), "{status}");
        }
        for length in ["-5", "abc", "0\r\nContent-Length: 99999999999"] {
            let status = raw_head(&server, &format!("POST /jobs/words/savepoint HTTP/1.1\r\nHost: x\r\nContent-Length: {length}"));
            assert!(status.contains(" 400 "), "{length}: {status}");
        }
        assert!(!plane.calls.lock().unwrap().iter().any(|c| c.starts_with("savepoint")), "no savepoint was taken");
        assert_eq!(ApiClient::new(&server.addr().to_string()).jobs().unwrap().len(), 1, "the host serves on");
    }

    #[test]
    fn bad_bodies_are_rejected_with_the_reason() {
        let (server, plane) = start(FakePlane::default());

        let (status, body) = raw(&server, "POST", "/jobs/words/upgrade", "{\"operator\": \"count\"");
        assert_eq!(status, 400);
        let text = error_text(&body);
        assert!(text.starts_with("bad UpgradeRequest body: "), "{text}");

        let (status, body) = raw(&server, "POST", "/jobs/words/upgrade", "{\"operator\": \"count\"}");
        assert_eq!(status, 400);
        assert!(error_text(&body).contains("missing field `plugin`"), "{body}");

        let (status, body) = raw(&server, "POST", "/forks", "");
        assert_eq!(status, 400);
        assert!(error_text(&body).contains("ForkRequest"), "{body}");

        // serde would read `[]` as a struct of its fields' defaults.
        let (status, body) = raw(&server, "POST", "/jobs/words/savepoint", "[]");
        assert_eq!(status, 400);
        assert!(error_text(&body).contains("a JSON object is expected, not []"), "{body}");

        // A misspelt field is refused, not taken for its default (as in job files).
        let (status, body) = raw(&server, "POST", "/jobs/words/savepoint", "{\"dri\": \"/sp/x\"}");
        assert_eq!(status, 400);
        assert!(error_text(&body).contains("unknown field `dri`, expected `dir` or `stop`"), "{body}");
        let (status, body) = raw(&server, "POST", "/jobs/words/upgrade", "{\"operator\": \"count\", \"plugin\": \"v2.wasm\", \"savepoint_dri\": \"/x\"}");
        assert_eq!(status, 400);
        assert!(error_text(&body).contains("unknown field `savepoint_dri`"), "{body}");

        let (status, body) = raw(&server, "POST", "/jobs/words/savepoint", "{\"stop\": \"yes\"}");
        assert_eq!(status, 400);
        assert!(error_text(&body).contains("SavepointRequest"), "{body}");

        // An empty savepoint body means the defaults.
        let (status, body) = raw(&server, "POST", "/jobs/words/savepoint", "");
        assert_eq!(status, 200, "{body}");
        let info: SavepointInfo = serde_json::from_str(&body).unwrap();
        assert_eq!(info.dir, PathBuf::from("/sp/default"));
        assert!(plane.calls.lock().unwrap().contains(&"savepoint words None false".to_string()));
    }

    /// Starts an upgrade of `words` through `server` on a thread of its own
    /// and returns once `plane` is handling it.
    fn upgrade_under_way(
        server: &ApiServer,
        plane: &FakePlane,
    ) -> std::thread::JoinHandle<Result<UpgradeInfo, ClientError>> {
        let addr = server.addr().to_string();
        let upgrade = std::thread::spawn(move || {
            ApiClient::new(&addr).upgrade(
                "words",
                &UpgradeRequest { operator: "count".into(), plugin: "/p/new.wasm".into(), savepoint_dir: None },
            )
        });
        while !plane.calls.lock().unwrap().iter().any(|c| c == "upgrade started words") {
            std::thread::sleep(Duration::from_millis(5));
        }
        upgrade
    }

    #[test]
    fn a_slow_upgrade_does_not_block_other_requests() {
        let (server, plane) =
            start(FakePlane { upgrade_delay: Duration::from_secs(1), ..FakePlane::default() });
        let upgrade = upgrade_under_way(&server, &plane);
        let client = ApiClient::new(&server.addr().to_string());
        assert_eq!(client.jobs().unwrap().len(), 1);
        assert_eq!(upgrade.join().unwrap().unwrap().downtime_ms, 123.4);
        // `jobs` was answered while the upgrade was still in progress.
        let calls = plane.calls.lock().unwrap().clone();
        assert_eq!(calls, vec!["upgrade started words", "jobs", "upgrade done words"]);
    }

    /// Idle clients beyond the cap are closed as they come, and the API
    /// answers again once they are gone: they neither use up the host's
    /// file descriptors nor end its listener.
    #[test]
    fn idle_connections_beyond_the_cap_are_closed_and_the_api_answers_once_they_go() {
        let plane = Arc::new(FakePlane::default());
        let server = ApiServer::start_with("127.0.0.1:0", plane, Duration::from_secs(30), None).expect("the server starts");
        let idle: Vec<std::net::TcpStream> =
            (0..MAX_CONNECTIONS + 20).map(|_| std::net::TcpStream::connect(server.addr()).unwrap()).collect();
        // The last ones were closed by the server: a read sees their end.
        let mut last = idle.last().unwrap();
        last.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 1];
        assert!(matches!(last.read(&mut buf), Ok(0)), "a connection beyond the cap is closed at once");
        drop(idle);
        let client = ApiClient::new(&server.addr().to_string());
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.jobs().is_err() {
            assert!(Instant::now() < deadline, "the API answers again");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A client trickling its request — a byte at a time, each within the
    /// read timeout — is answered 408 once the head or the body has taken
    /// longer than that in all; an endless header line or endless headers
    /// are answered 431 instead of growing the host's memory.
    #[test]
    fn trickling_and_endless_requests_are_cut_off() {
        let plane = Arc::new(FakePlane::default());
        let server = ApiServer::start_with("127.0.0.1:0", plane, Duration::from_millis(400), None).expect("the server starts");
        // Sends `at_once`, then `trickled` a byte every 150 ms (each well
        // within the read timeout); the reply's first line and how long it
        // took to come.
        let trickle = |at_once: &[u8], trickled: &'static [u8]| {
            let mut socket = std::net::TcpStream::connect(server.addr()).unwrap();
            socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            socket.write_all(at_once).unwrap();
            let started = Instant::now();
            let mut writer = socket.try_clone().unwrap();
            std::thread::spawn(move || {
                for byte in trickled {
                    std::thread::sleep(Duration::from_millis(150));
                    if writer.write_all(&[*byte]).is_err() {
                        break;
                    }
                }
            });
            let mut reply = Vec::new();
            let mut byte = [0u8; 1];
            while !reply.ends_with(b"\r\n") && socket.read(&mut byte).is_ok_and(|n| n == 1) {
                reply.push(byte[0]);
            }
            (String::from_utf8_lossy(&reply).into_owned(), started.elapsed())
        };
        // Without a bound on the whole, these would take 6 s and 60 s.
        let (reply, took) = trickle(b"", b"GET /jobs HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 408"), "a trickled head: {reply:?}");
        assert!(took < Duration::from_secs(3), "cut off after about the read timeout: {took:?}");
        let (reply, took) = trickle(b"POST /jobs/x/cancel HTTP/1.1\r\nContent-Length: 4000\r\n\r\n", &[b'x'; 400]);
        assert!(reply.starts_with("HTTP/1.1 408"), "a trickled body: {reply:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");

        let endless = |head: Vec<u8>| {
            let mut socket = std::net::TcpStream::connect(server.addr()).unwrap();
            socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = socket.write_all(&head);
            let mut reply = [0u8; 12];
            let _ = socket.read_exact(&mut reply);
            String::from_utf8_lossy(&reply).into_owned()
        };
        let mut long_line = b"GET /jobs HTTP/1.1\r\nX-Long: ".to_vec();
        long_line.resize(long_line.len() + 64 * 1024, b'a');
        assert_eq!(endless(long_line), "HTTP/1.1 431");
        let many: String = (0..200).map(|i| format!("X-{i}: y\r\n")).collect();
        assert_eq!(endless(format!("GET /jobs HTTP/1.1\r\n{many}").into_bytes()), "HTTP/1.1 431");
        let client = ApiClient::new(&server.addr().to_string());
        assert!(client.jobs().is_ok(), "and the API answers others");
    }

    /// The read timeout bounds waiting for a client, not for the host: an
    /// upgrade that takes longer than it is still answered.
    #[test]
    fn a_request_slower_than_the_read_timeout_is_answered() {
        let plane = Arc::new(FakePlane { upgrade_delay: Duration::from_secs(1), ..FakePlane::default() });
        let server = ApiServer::start_with("127.0.0.1:0", plane.clone(), Duration::from_millis(200), None).expect("the server starts");
        let upgrade = upgrade_under_way(&server, &plane);
        assert_eq!(upgrade.join().unwrap().unwrap().downtime_ms, 123.4);
    }

    #[test]
    fn stopping_waits_for_the_answers_of_requests_being_handled() {
        // As when the request stops the host's last job, and the host exits.
        let (mut server, plane) =
            start(FakePlane { upgrade_delay: Duration::from_millis(300), ..FakePlane::default() });
        let upgrade = upgrade_under_way(&server, &plane);
        server.stop();
        assert!(plane.calls.lock().unwrap().iter().any(|c| c == "upgrade done words"), "stop waited for the request");
        assert_eq!(upgrade.join().unwrap().unwrap().downtime_ms, 123.4, "and its answer arrived");
    }

    #[test]
    fn stopping_closes_the_port() {
        let (mut server, _plane) = start(FakePlane::default());
        let addr = server.addr();
        assert_ne!(addr.port(), 0);
        assert!(ApiClient::new(&addr.to_string()).jobs().is_ok());
        server.stop();
        let error = ApiClient::new(&addr.to_string()).jobs().unwrap_err();
        assert!(matches!(error, ClientError::Unreachable { .. }), "{error}");
        drop(server);
    }

    #[test]
    fn routes_and_names() {
        assert_eq!(route(&Method::Get, "/jobs"), Ok(Route::Jobs));
        assert_eq!(route(&Method::Get, "/jobs/a%20b"), Ok(Route::Job("a b".into())));
        assert_eq!(route(&Method::Post, "/jobs/x/savepoint"), Ok(Route::Savepoint("x".into())));
        assert_eq!(route(&Method::Post, "/forks"), Ok(Route::Fork));
        assert_eq!(route(&Method::Get, "/metrics"), Ok(Route::Metrics));
        assert_eq!(route(&Method::Get, "/").unwrap_err().0, 404);
        assert_eq!(route(&Method::Get, "/jobs/%zz").unwrap_err().0, 400);
        assert_eq!(percent_decode("%E2%9C%93ok"), Some("✓ok".into()));
        assert_eq!(percent_decode("%2"), None);
    }

    #[test]
    fn a_busy_port_is_an_addr_in_use_error() {
        let (server, plane) = start(FakePlane::default());
        let error = ApiServer::start(&server.addr().to_string(), plane, None).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse);
        assert!(error.to_string().contains(&server.addr().to_string()), "{error}");
    }
}
