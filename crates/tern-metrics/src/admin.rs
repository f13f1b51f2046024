//! The admin HTTP endpoint: an index of what it serves at `/`, `/metrics`, `/healthz`, `/stats`,
//! a live dashboard at `/dashboard` and service-supplied JSON routes, served by hyper on its own thread with its own
//! current-thread tokio runtime, so scrapes never run on (or wait for) the service's hot threads.

mod index;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, ALLOW, CONTENT_SECURITY_POLICY, CONTENT_TYPE, VARY};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{oneshot, Semaphore};

use index::{prefers_plain_text, IndexPage};

/// Produces the JSON body of a route on each request.
pub type JsonSource = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// Produces the JSON body of a path under a prefix route, given the rest of the path after the prefix
/// (e.g. the `42` of `/campaigns/42`); `None` answers 404.
pub type JsonPrefixSource = Arc<dyn Fn(&str) -> Option<serde_json::Value> + Send + Sync>;

/// Parses an `--admin` flag's value, the same in every tern command: `ADDR:PORT`, or a bare `PORT` meaning
/// `127.0.0.1:PORT` (so the endpoint is not exposed beyond the host unless an address says so). For clap's
/// `value_parser`.
pub fn parse_admin_addr(text: &str) -> Result<SocketAddr, String> {
    match text.parse::<u16>() {
        Ok(port) => Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
        Err(_) => text
            .parse()
            .map_err(|_| format!("{text:?} is not ADDR:PORT (e.g. 127.0.0.1:9400) or a port")),
    }
}

/// `Content-Type` of `/metrics`.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Hyper refuses a read buffer smaller than this.
const MIN_HEADER_BYTES: usize = 8192;

/// Resource bounds of the admin server.
#[derive(Clone, Debug)]
pub struct AdminLimits {
    /// Connections served at once; further connections are closed on accept.
    pub max_connections: usize,
    /// Time allowed to receive a request's headers, also the keep-alive idle timeout.
    pub header_read_timeout: Duration,
    /// Largest request head (request line + headers) accepted; at least 8192.
    pub max_header_bytes: usize,
    /// A connection is closed after this long, whatever it is doing.
    pub max_connection_age: Duration,
}

impl Default for AdminLimits {
    fn default() -> Self {
        Self {
            max_connections: 32,
            header_read_timeout: Duration::from_secs(5),
            max_header_bytes: MIN_HEADER_BYTES,
            max_connection_age: Duration::from_secs(60),
        }
    }
}

/// Entry point: `AdminServer::builder(addr)...start()`.
pub struct AdminServer;

impl AdminServer {
    /// A server on `127.0.0.1:port`: the admin endpoint is not exposed beyond the host unless a
    /// service passes another address to [`AdminServer::builder`]. Port 0 picks a free port.
    pub fn localhost(port: u16) -> AdminServerBuilder {
        Self::builder(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
    }

    /// A server to bind at `addr`.
    pub fn builder(addr: SocketAddr) -> AdminServerBuilder {
        AdminServerBuilder {
            addr,
            routes: Vec::new(),
            prefix_routes: Vec::new(),
            stats_extra: None,
            limits: AdminLimits::default(),
            per_thread_series: false,
        }
    }
}

/// Configures and starts the admin server.
pub struct AdminServerBuilder {
    addr: SocketAddr,
    routes: Vec<(String, String, JsonSource)>,
    prefix_routes: Vec<(String, String, JsonPrefixSource)>,
    stats_extra: Option<JsonSource>,
    limits: AdminLimits,
    per_thread_series: bool,
}

impl AdminServerBuilder {
    /// Serves `source()` as JSON at `GET path` (e.g. the pacer's `/campaigns`), listed at `/` with
    /// `description` (what the JSON tells).
    pub fn json_route(
        mut self,
        path: impl Into<String>,
        description: impl Into<String>,
        source: JsonSource,
    ) -> Self {
        self.routes.push((path.into(), description.into(), source));
        self
    }

    /// Serves `source(rest)` as JSON at `GET prefix` + `rest` for any non-empty `rest` (e.g. the pacer's
    /// `/campaigns/{id}` for whatever campaigns exist at the time of the request); `None` is a 404. The prefix
    /// starts and ends with '/'; an exact route wins over a prefix route. Listed at `/` as `prefix*` with
    /// `description`.
    pub fn json_prefix_route(
        mut self,
        prefix: impl Into<String>,
        description: impl Into<String>,
        source: JsonPrefixSource,
    ) -> Self {
        self.prefix_routes
            .push((prefix.into(), description.into(), source));
        self
    }

    /// Adds `source()` to `/stats` under the key `"service"`.
    pub fn stats_extra(mut self, source: JsonSource) -> Self {
        self.stats_extra = Some(source);
        self
    }

    /// Replaces the resource limits.
    pub fn limits(mut self, limits: AdminLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Whether `/metrics` also exports each named thread's series (`thread="io-0"`) by default;
    /// `?per_thread=1` or `?per_thread=0` overrides per request. Off by default, because
    /// summing a family that holds both totals and per-thread series double-counts.
    pub fn per_thread_series(mut self, enabled: bool) -> Self {
        self.per_thread_series = enabled;
        self
    }

    /// Binds the listener and starts the server thread. Errors if the address cannot be bound,
    /// a route path is invalid or duplicated, or a limit is out of range.
    pub fn start(self) -> anyhow::Result<AdminHandle> {
        let mut routes = HashMap::new();
        let mut listed = Vec::new();
        for (path, description, source) in self.routes {
            if !path.starts_with('/') || path.contains('?') {
                bail!("admin route {path:?} must start with '/' and have no query");
            }
            if BUILTIN_ROUTES.contains(&path.as_str())
                || routes.insert(path.clone(), source).is_some()
            {
                bail!("admin route {path:?} is already served");
            }
            listed.push((path, description));
        }
        let mut prefix_routes: Vec<(String, JsonPrefixSource)> = Vec::new();
        let mut listed_prefixes = Vec::new();
        for (prefix, description, source) in self.prefix_routes {
            if !prefix.starts_with('/') || !prefix.ends_with('/') || prefix.contains('?') {
                bail!(
                    "admin prefix route {prefix:?} must start and end with '/' and have no query"
                );
            }
            if prefix_routes.iter().any(|(p, _)| *p == prefix) {
                bail!("admin prefix route {prefix:?} is already served");
            }
            listed_prefixes.push((prefix.clone(), description));
            prefix_routes.push((prefix, source));
        }
        if self.limits.max_connections == 0 {
            bail!("admin max_connections must be at least 1");
        }
        if self.limits.max_header_bytes < MIN_HEADER_BYTES {
            bail!("admin max_header_bytes must be at least {MIN_HEADER_BYTES}");
        }

        let listener = std::net::TcpListener::bind(self.addr)
            .with_context(|| format!("binding admin endpoint to {}", self.addr))?;
        listener.set_nonblocking(true)?;
        let local_addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building admin runtime")?;
        let listener = {
            let _context = runtime.enter();
            tokio::net::TcpListener::from_std(listener).context("registering admin listener")?
        };

        let index = IndexPage::new(listed, listed_prefixes, self.stats_extra.is_some());
        let draining = Arc::new(AtomicBool::new(false));
        let state = Arc::new(ServerState {
            index,
            routes,
            prefix_routes,
            stats_extra: self.stats_extra,
            per_thread_series: self.per_thread_series,
            draining: draining.clone(),
        });
        let limits = self.limits;
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("tern-admin".into())
            .spawn(move || {
                runtime.block_on(serve(listener, state, limits, shutdown_rx));
                // Dropping the runtime here cancels connections still open.
            })
            .context("spawning admin thread")?;
        Ok(AdminHandle {
            local_addr,
            draining,
            shutdown_tx: Some(shutdown_tx),
            thread: Some(thread),
        })
    }
}

/// A running admin server. Dropping it shuts the server down too.
pub struct AdminHandle {
    local_addr: SocketAddr,
    draining: Arc<AtomicBool>,
    shutdown_tx: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl AdminHandle {
    /// The bound address (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// From now on `/healthz` answers 503 "draining", so load balancers stop sending traffic
    /// while the service finishes in-flight work.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Stops accepting, closes open connections and joins the server thread.
    pub fn shutdown(mut self) -> anyhow::Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.shutdown_tx.take() {
            // The receiver is gone only if the server loop already ended; joining still applies.
            let _ = tx.send(());
        }
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .map_err(|_| anyhow::anyhow!("admin server thread panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for AdminHandle {
    fn drop(&mut self) {
        if let Err(error) = self.stop() {
            tracing::error!(%error, "admin server did not shut down cleanly");
        }
    }
}

const BUILTIN_ROUTES: [&str; 5] = ["/", "/metrics", "/healthz", "/stats", "/dashboard"];

/// The live dashboard: one page, its script and styles inline (nothing fetched from elsewhere), that reads
/// `/metrics` once a second.
const DASHBOARD_HTML: &str = include_str!("admin/dashboard.html");

struct ServerState {
    index: IndexPage,
    routes: HashMap<String, JsonSource>,
    prefix_routes: Vec<(String, JsonPrefixSource)>,
    stats_extra: Option<JsonSource>,
    per_thread_series: bool,
    draining: Arc<AtomicBool>,
}

async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<ServerState>,
    limits: AdminLimits,
    mut shutdown: oneshot::Receiver<()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Typically EMFILE: back off instead of spinning on a readable listener.
                    tracing::warn!(%error, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let state = state.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(&state, &request)) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .max_buf_size(limits.max_header_bytes)
                .serve_connection(TokioIo::new(stream), service);
            // Errors here are the client's doing (reset, timeout, malformed request).
            let _ = tokio::time::timeout(limits.max_connection_age, connection).await;
        });
    }
}

fn route(state: &ServerState, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let under_prefix = state
        .prefix_routes
        .iter()
        .find(|(prefix, _)| path.len() > prefix.len() && path.starts_with(prefix.as_str()));
    let known =
        BUILTIN_ROUTES.contains(&path) || state.routes.contains_key(path) || under_prefix.is_some();
    if !known {
        return text(StatusCode::NOT_FOUND, "not found\n");
    }
    if request.method() != Method::GET {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    let rendered = catch_unwind(AssertUnwindSafe(|| match path {
        "/" => {
            let accept = request.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
            let mut response = if prefers_plain_text(accept) {
                body(
                    StatusCode::OK,
                    "text/plain; charset=utf-8",
                    state.index.text.clone(),
                )
            } else {
                body(
                    StatusCode::OK,
                    "text/html; charset=utf-8",
                    state.index.html.clone(),
                )
            };
            // The answer depends on Accept, so caches must not hand one client's to another.
            response
                .headers_mut()
                .insert(VARY, HeaderValue::from_static("accept"));
            response
        }
        "/metrics" => {
            let per_thread =
                query_flag(request.uri().query(), "per_thread").unwrap_or(state.per_thread_series);
            body(
                StatusCode::OK,
                PROMETHEUS_CONTENT_TYPE,
                crate::gather().to_prometheus(per_thread),
            )
        }
        "/dashboard" => {
            let mut response = body(
                StatusCode::OK,
                "text/html; charset=utf-8",
                DASHBOARD_HTML.to_owned(),
            );
            // Its script may run only what the page holds, and fetch only from this endpoint.
            response.headers_mut().insert(
                CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                     connect-src 'self'; img-src data:",
                ),
            );
            response
        }
        "/healthz" if state.draining.load(Ordering::Relaxed) => {
            text(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/stats" => {
            let mut stats = serde_json::json!({ "metrics": crate::gather().to_json() });
            if let Some(extra) = &state.stats_extra {
                stats["service"] = extra();
            }
            json(&stats)
        }
        _ => match state.routes.get(path) {
            Some(source) => json(&source()),
            // Under a prefix route: its source says whether the rest names something.
            None => match under_prefix.and_then(|(prefix, source)| source(&path[prefix.len()..])) {
                Some(value) => json(&value),
                None => text(StatusCode::NOT_FOUND, "not found\n"),
            },
        },
    }));
    rendered.unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n"))
}

/// `Some(true)` for `name=1|true`, `Some(false)` for `name=0|false`, else `None`.
fn query_flag(query: Option<&str>, name: &str) -> Option<bool> {
    query?
        .split('&')
        .find_map(|pair| match pair.split_once('=') {
            Some((key, "1" | "true")) if key == name => Some(true),
            Some((key, "0" | "false")) if key == name => Some(false),
            _ => None,
        })
}

fn json(value: &serde_json::Value) -> Response<Full<Bytes>> {
    body(StatusCode::OK, "application/json", value.to_string())
}

fn text(status: StatusCode, message: &'static str) -> Response<Full<Bytes>> {
    body(status, "text/plain; charset=utf-8", message.to_owned())
}

fn body(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::query_flag;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn query_flag_never_panics_and_finds_exact_pairs(query in ".{0,64}", flag in any::<bool>()) {
            let _ = query_flag(Some(&query), "per_thread");
            let with_flag = format!("{query}&per_thread={}", if flag { "1" } else { "0" });
            let found = query_flag(Some(&with_flag), "per_thread");
            // An earlier valid pair in the arbitrary prefix may win; otherwise ours is found.
            prop_assert!(found.is_some());
            if !query.contains("per_thread=") {
                prop_assert_eq!(found, Some(flag));
            }
        }
    }

    #[test]
    fn admin_addresses_are_addr_port_or_a_local_port() {
        use super::parse_admin_addr;
        assert_eq!(
            parse_admin_addr("9400").unwrap().to_string(),
            "127.0.0.1:9400"
        );
        assert_eq!(
            parse_admin_addr("0.0.0.0:9400").unwrap().to_string(),
            "0.0.0.0:9400"
        );
        assert_eq!(
            parse_admin_addr("[::1]:9400").unwrap().to_string(),
            "[::1]:9400"
        );
        for bad in ["", "localhost:9400", "70000", "127.0.0.1"] {
            let error = parse_admin_addr(bad).unwrap_err();
            assert!(error.contains("is not ADDR:PORT"), "{bad}: {error}");
        }
    }

    #[test]
    fn query_flag_parses_pairs() {
        assert_eq!(query_flag(None, "per_thread"), None);
        assert_eq!(query_flag(Some("per_thread=1"), "per_thread"), Some(true));
        assert_eq!(
            query_flag(Some("a=b&per_thread=false"), "per_thread"),
            Some(false)
        );
        assert_eq!(query_flag(Some("per_thread=maybe"), "per_thread"), None);
        assert_eq!(query_flag(Some("xper_thread=1"), "per_thread"), None);
    }
}
