//! The HTTP edge: the accept loop and the bounds of every connection.
//!
//! Each accepted connection is admitted or refused before any task exists
//! for it: at most `http_connections_max` sockets per node (HTTP and the
//! gateway sockets upgraded from them; the cap fits the file-descriptor
//! limit minus `http_fd_reserve_min`) and `http_connections_per_ip_max`
//! HTTP connections per client address. A refused connection gets a fixed
//! 503 in one non-blocking write and is closed, so refusing stays cheap
//! whatever the number of attempts.
//!
//! An admitted connection is served by hyper's HTTP/1 connection with a
//! timer: the request head must arrive within `http_header_read_timeout_ms`
//! (also the keep-alive idle time) and within `http_header_bytes_max`
//! (431 beyond); a body must arrive within `http_body_read_timeout_ms` of
//! its head (408 and the connection closed). Upgrades (the gateway) keep
//! working: the upgraded socket carries the node-wide slot with it and
//! leaves the per-address count.
//!
//! Shutdown: once the drain is done, the loop stops accepting, every
//! connection is asked to finish its request in flight and close, and the
//! loop returns when they have.

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, StatusCode, header};
use guildhall_common::http::{client_key, json_response};
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// What a refused connection is sent before it is closed: one write on a
/// fresh socket, whose send buffer is empty, so it never waits.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: 94\r\n\r\n{\"message\": \"API resource is currently overloaded. Try again a little later.\", \"code\": 130000}";

/// Counters of the HTTP edge.
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// Connections refused at `http_connections_max`.
    pub refused_node_total: AtomicU64,
    /// Connections refused at `http_connections_per_ip_max`.
    pub refused_address_total: AtomicU64,
    /// Accept errors that paused the loop (EMFILE and the like).
    pub accept_errors_total: AtomicU64,
    /// Connections closed because no whole request head arrived in time
    /// (a slow head, or a keep-alive connection left idle).
    pub header_timeouts_total: AtomicU64,
    /// Requests answered 431 (head over `http_header_bytes_max`).
    pub headers_too_large_total: AtomicU64,
    /// Requests answered 408 (body slower than `http_body_read_timeout_ms`).
    pub body_timeouts_total: AtomicU64,
}

/// Connection accounting of one node.
pub struct Edge {
    /// Sockets held (HTTP and upgraded).
    open: AtomicUsize,
    /// HTTP connections per client address; an address leaves the map
    /// when its last connection ends, so the map holds at most
    /// `connections_max` entries.
    per_address: Mutex<HashMap<IpAddr, usize>>,
    /// The effective node-wide cap (fitted to the file-descriptor limit).
    connections_max: usize,
    per_address_max: usize,
    /// Counters.
    pub counters: HttpCounters,
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The node holds `http_connections_max` sockets.
    Node,
    /// The address holds `http_connections_per_ip_max` HTTP connections.
    Address,
}

/// A node-wide slot: released when the socket closes, which for a gateway
/// socket is long after its HTTP connection ended.
struct NodeSlot(Arc<Edge>);

impl Drop for NodeSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A per-address slot: released when the HTTP connection ends (closed, or
/// upgraded).
struct AddressSlot(Arc<Edge>, IpAddr);

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut map = lock(&self.0.per_address);
        if let Some(count) = map.get_mut(&self.1) {
            *count -= 1;
            if *count == 0 {
                map.remove(&self.1);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The node-wide cap: `configured`, lowered to fit `fd_limit` minus
/// `reserve` file descriptors (half the limit if the reserve does not
/// fit at all).
pub fn connections_cap(configured: usize, reserve: usize, fd_limit: Option<u64>) -> usize {
    let Some(limit) = fd_limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX)) else {
        return configured;
    };
    let fits = if limit > reserve {
        limit - reserve
    } else {
        limit / 2
    };
    configured.min(fits).max(1)
}

/// The process's file-descriptor limit, raised first from the soft to the
/// hard limit (as Go's runtime does): a server that holds sockets should
/// not stop at a shell's default of 1,024.
#[cfg(unix)]
fn fd_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if let (Some(current), Some(maximum)) = (limit.current, limit.maximum)
        && current < maximum
    {
        let raised = Rlimit {
            current: Some(maximum),
            maximum: Some(maximum),
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return Some(maximum);
        }
    }
    limit.current
}

#[cfg(not(unix))]
fn fd_limit() -> Option<u64> {
    None
}

impl Edge {
    /// Accounting for `limits`, the cap fitted to this process's
    /// file-descriptor limit.
    pub fn new(limits: &guildhall_limits::Limits) -> Arc<Self> {
        let fds = fd_limit();
        let connections_max =
            connections_cap(limits.http_connections_max, limits.http_fd_reserve_min, fds);
        if connections_max < limits.http_connections_max {
            tracing::warn!(
                configured = limits.http_connections_max,
                fd_limit = fds,
                reserve = limits.http_fd_reserve_min,
                connections_max,
                "connection cap lowered to fit the file-descriptor limit"
            );
        }
        Arc::new(Self {
            open: AtomicUsize::new(0),
            per_address: Mutex::new(HashMap::new()),
            connections_max,
            per_address_max: limits.http_connections_per_ip_max,
            counters: HttpCounters::default(),
        })
    }

    /// Takes a node slot and an address slot for a connection from `ip`.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<(NodeSlot, AddressSlot), Refusal> {
        if self.open.fetch_add(1, Ordering::Relaxed) >= self.connections_max {
            self.open.fetch_sub(1, Ordering::Relaxed);
            return Err(Refusal::Node);
        }
        let node = NodeSlot(self.clone());
        let mut map = lock(&self.per_address);
        let count = map.entry(ip).or_insert(0);
        if *count >= self.per_address_max {
            return Err(Refusal::Address);
        }
        *count += 1;
        Ok((node, AddressSlot(self.clone(), ip)))
    }

    /// The `/metrics` lines of the edge.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let c = &self.counters;
        for (name, kind, help, value) in [
            (
                "guildhall_http_connections_open",
                "gauge",
                "TCP connections held (HTTP and upgraded gateway sockets).",
                self.open.load(Ordering::Relaxed) as u64,
            ),
            (
                "guildhall_http_connections_max",
                "gauge",
                "The effective connection cap (fitted to the file-descriptor limit).",
                self.connections_max as u64,
            ),
            (
                "guildhall_http_refused_node_total",
                "counter",
                "Connections refused at http_connections_max.",
                c.refused_node_total.load(Ordering::Relaxed),
            ),
            (
                "guildhall_http_refused_address_total",
                "counter",
                "Connections refused at http_connections_per_ip_max.",
                c.refused_address_total.load(Ordering::Relaxed),
            ),
            (
                "guildhall_http_accept_errors_total",
                "counter",
                "Accept errors that paused the accept loop.",
                c.accept_errors_total.load(Ordering::Relaxed),
            ),
            (
                "guildhall_http_header_timeouts_total",
                "counter",
                "Connections closed with no whole request head within http_header_read_timeout_ms (slow or idle).",
                c.header_timeouts_total.load(Ordering::Relaxed),
            ),
            (
                "guildhall_http_headers_too_large_total",
                "counter",
                "Requests answered 431 (head over http_header_bytes_max).",
                c.headers_too_large_total.load(Ordering::Relaxed),
            ),
            (
                "guildhall_http_body_timeouts_total",
                "counter",
                "Requests answered 408 (body slower than http_body_read_timeout_ms).",
                c.body_timeouts_total.load(Ordering::Relaxed),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
    }
}

/// A socket that holds its node slot for as long as it is open, through an
/// upgrade to a WebSocket.
struct Counted {
    io: TcpStream,
    _slot: NodeSlot,
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// One connection's state shared with its requests (HTTP/1 serves one
/// request at a time, so one flag per connection suffices).
struct Connection {
    addr: SocketAddr,
    body_timed_out: AtomicBool,
}

/// A request body that must arrive by a deadline. Polling it after the
/// deadline fails, and the connection is marked so the response becomes
/// a 408.
struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    connection: Arc<Connection>,
}

/// The error a late body ends with.
#[derive(Debug, thiserror::Error)]
#[error("request body not received within http_body_read_timeout_ms")]
struct BodyTimeout;

impl hyper::body::Body for DeadlineBody {
    type Data = bytes::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.connection
                .body_timed_out
                .store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(BodyTimeout.into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn body_timeout_response() -> axum::response::Response {
    let mut response = json_response(
        StatusCode::REQUEST_TIMEOUT,
        &serde_json::json!({"message": "408: Request Timeout", "code": 0}),
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Serves `router` on `listener` under `edge`'s caps and `limits`' timeouts
/// until `shutdown` completes, then lets the connections finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    edge: Arc<Edge>,
    limits: &guildhall_limits::Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.http_header_read_timeout_ms))
        .max_header_size(limits.http_header_bytes_max)
        // The read buffer never needs more than one head: bodies are
        // streamed out of it as they arrive (validated to be at least
        // hyper's minimum of 8 KiB).
        .max_buf_size(limits.http_header_bytes_max);
    let body_timeout = Duration::from_millis(limits.http_body_read_timeout_ms);
    let backoff = Duration::from_millis(limits.http_accept_backoff_ms);
    // Dropping `signal_rx` tells every connection to shut down; every
    // connection holds a `close_rx`, so `close_tx.closed()` is "all done".
    let (signal_tx, signal_rx) = tokio::sync::watch::channel(());
    let (close_tx, close_rx) = tokio::sync::watch::channel(());
    tokio::spawn(async move {
        shutdown.await;
        drop(signal_rx);
    });
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = signal_tx.closed() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) if is_connection_error(&error) => continue,
            Err(error) => {
                edge.counters
                    .accept_errors_total
                    .fetch_add(1, Ordering::Relaxed);
                crate::throttled!(warn, "http.accept_failed", error = %error, "accept failed; pausing the accept loop");
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        let (node_slot, address_slot) = match edge.admit(client_key(peer.ip())) {
            Ok(slots) => slots,
            Err(refusal) => {
                let counter = match refusal {
                    Refusal::Node => &edge.counters.refused_node_total,
                    Refusal::Address => &edge.counters.refused_address_total,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                crate::throttled!(warn, "http.refused", ?refusal, peer = %peer, "connection refused at the connection cap");
                // Best effort: the close that follows is the refusal.
                let _ = stream.try_write(REFUSAL);
                continue;
            }
        };
        // No Nagle: a dispatch written while an earlier one is unacknowledged
        // would wait for the client's delayed ACK (about 40 ms). The writer
        // already coalesces frames per flush, so this adds no small packets.
        let _ = stream.set_nodelay(true);
        let connection = Arc::new(Connection {
            addr: peer,
            body_timed_out: AtomicBool::new(false),
        });
        let service = {
            let edge = edge.clone();
            let router = router.clone();
            hyper::service::service_fn(move |request: Request<Incoming>| {
                let mut router = router.clone();
                let connection = connection.clone();
                let edge = edge.clone();
                async move {
                    let (mut parts, body) = request.into_parts();
                    parts.extensions.insert(ConnectInfo(connection.addr));
                    let body = if body.is_end_stream() {
                        axum::body::Body::new(body)
                    } else {
                        connection.body_timed_out.store(false, Ordering::Relaxed);
                        axum::body::Body::new(DeadlineBody {
                            inner: body,
                            deadline: Box::pin(tokio::time::sleep(body_timeout)),
                            connection: connection.clone(),
                        })
                    };
                    let request = Request::from_parts(parts, body);
                    let response = match tower_service::Service::call(&mut router, request).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    };
                    if connection.body_timed_out.swap(false, Ordering::Relaxed) {
                        edge.counters
                            .body_timeouts_total
                            .fetch_add(1, Ordering::Relaxed);
                        return Ok::<_, std::convert::Infallible>(body_timeout_response());
                    }
                    Ok(response)
                }
            })
        };
        let io = TokioIo::new(Counted {
            io: stream,
            _slot: node_slot,
        });
        let conn = builder.serve_connection(io, service).with_upgrades();
        let signal_tx = signal_tx.clone();
        let close_rx = close_rx.clone();
        let edge = edge.clone();
        // One task per admitted connection: bounded by the connection cap.
        tokio::spawn(async move {
            let _address_slot = address_slot;
            let mut conn = pin!(conn);
            let mut signal = pin!(signal_tx.closed());
            let mut shutting_down = false;
            let result = loop {
                tokio::select! {
                    result = conn.as_mut() => break result,
                    () = &mut signal, if !shutting_down => {
                        shutting_down = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            };
            if let Err(error) = result {
                if error.is_timeout() {
                    edge.counters
                        .header_timeouts_total
                        .fetch_add(1, Ordering::Relaxed);
                } else if error.is_parse_too_large() {
                    edge.counters
                        .headers_too_large_total
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            drop(close_rx);
        });
    }
    drop(close_rx);
    drop(listener);
    close_tx.closed().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_fits_the_descriptor_limit() {
        assert_eq!(connections_cap(24_000, 512, None), 24_000);
        assert_eq!(connections_cap(24_000, 512, Some(1_048_576)), 24_000);
        assert_eq!(connections_cap(24_000, 512, Some(20_000)), 19_488);
        assert_eq!(connections_cap(24_000, 512, Some(256)), 128);
        assert_eq!(connections_cap(24_000, 512, Some(0)), 1);
    }

    #[test]
    fn ipv6_clients_count_per_64() {
        let a: IpAddr = "2001:db8:1:2:3:4:5:6"
            .parse()
            .unwrap_or(IpAddr::from([0; 4]));
        let b: IpAddr = "2001:db8:1:2:ffff::1"
            .parse()
            .unwrap_or(IpAddr::from([0; 4]));
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap_or(IpAddr::from([0; 4]));
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let mapped: IpAddr = "::ffff:127.0.0.2".parse().unwrap_or(IpAddr::from([0; 4]));
        assert_eq!(client_key(mapped), IpAddr::from([127, 0, 0, 2]));
    }

    #[test]
    fn the_refusal_is_one_well_formed_response() {
        let text = std::str::from_utf8(REFUSAL).unwrap_or("");
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or(("", ""));
        assert!(head.starts_with("HTTP/1.1 503"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(serde_json::from_str::<serde_json::Value>(body).is_ok());
    }
}
