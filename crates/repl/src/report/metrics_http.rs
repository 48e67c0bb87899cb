//! The metrics endpoint: a deliberately tiny HTTP/1.1 server on its own
//! port (`serve --metrics-port`), enough for a Prometheus scrape and
//! nothing else.
//!
//! - `GET /metrics` (a query string is ignored) answers 200 with the
//!   render function's text as `text/plain; version=0.0.4`;
//! - any other method or path answers 404, a request line that is not
//!   `METHOD SP /target SP HTTP/1.x` answers 400, a request head larger
//!   than `REQUEST_HEAD_BYTES_MAX` answers 431, a client that does not
//!   finish its head within `REQUEST_READ_TIMEOUT_MS` gets 408;
//! - one request per connection (`Connection: close`), at most
//!   `CONNECTIONS_MAX` connections at a time (the next wait to be
//!   accepted).
//!
//! Each connection:
//! 1. read until the blank line ending the head (bounded in bytes and time);
//! 2. route on the request line only (headers are not needed);
//! 3. write the whole response, then shut down our side;
//! 4. drain what the client still sends (bounded), so that closing with
//!    unread bytes does not reset the connection before it read the answer.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// Largest request head (request line and headers) read; larger gets 431.
pub const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;
/// How long a client has to send its request head.
pub const REQUEST_READ_TIMEOUT_MS: u64 = 5_000;
/// Connections served at once.
pub const CONNECTIONS_MAX: usize = 16;
/// After answering, at most this many further bytes are read and dropped.
const DRAIN_BYTES_MAX: usize = 64 * 1024;
/// How long the drain waits for the client to close.
const DRAIN_TIMEOUT_MS: u64 = 1_000;
/// Pause after a failed `accept` (e.g. out of file descriptors), so the
/// loop does not spin.
const ACCEPT_RETRY_MS: u64 = 100;

/// Renders the body of a scrape.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Why a request head could not be read.
#[derive(Debug, PartialEq, Eq)]
enum HeadError {
    /// More than `REQUEST_HEAD_BYTES_MAX` bytes without the blank line.
    TooLarge,
    /// Not finished within `REQUEST_READ_TIMEOUT_MS`.
    TimedOut,
    /// The client closed or the socket failed first: nothing to answer.
    Gone,
}

/// Serves `GET /metrics` on `listener` until the task is aborted.
pub fn serve(listener: TcpListener, render: Render) -> JoinHandle<()> {
    serve_with_read_timeout(listener, render, Duration::from_millis(REQUEST_READ_TIMEOUT_MS))
}

/// `serve` with another request head timeout (tests).
fn serve_with_read_timeout(listener: TcpListener, render: Render, read_timeout: Duration) -> JoinHandle<()> {
    tokio::spawn(accept_loop(listener, render, read_timeout))
}

async fn accept_loop(listener: TcpListener, render: Render, read_timeout: Duration) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return; // The semaphore is never closed; nothing left to serve if it were.
        };
        match listener.accept().await {
            Ok((stream, _peer)) => {
                let render = render.clone();
                tokio::spawn(async move {
                    answer(stream, &render, read_timeout).await;
                    drop(slot);
                });
            }
            Err(error) => {
                tracing::warn!(%error, "metrics endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
            }
        }
    }
}

/// Steps 1-4 of the module doc for one connection.
async fn answer(mut stream: TcpStream, render: &Render, read_timeout: Duration) {
    let response = match read_head(&mut stream, read_timeout).await {
        Ok(head) => route(&head, render),
        Err(HeadError::TooLarge) => response(431, "Request Header Fields Too Large", "request head too large\n"),
        Err(HeadError::TimedOut) => response(408, "Request Timeout", "request head not received in time\n"),
        Err(HeadError::Gone) => return,
    };
    if stream.write_all(&response).await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    drain(&mut stream).await;
}

/// Reads up to and including the blank line that ends the head.
async fn read_head(stream: &mut TcpStream, read_timeout: Duration) -> Result<Vec<u8>, HeadError> {
    match tokio::time::timeout(read_timeout, read_head_unbounded_in_time(stream)).await {
        Ok(result) => result,
        Err(_) => Err(HeadError::TimedOut),
    }
}

async fn read_head_unbounded_in_time(stream: &mut TcpStream) -> Result<Vec<u8>, HeadError> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let read = stream.read(&mut chunk).await.map_err(|_| HeadError::Gone)?;
        if read == 0 {
            return Err(HeadError::Gone);
        }
        head.extend_from_slice(&chunk[..read]);
        if let Some(end) = find_head_end(&head) {
            head.truncate(end);
            return Ok(head);
        }
        if head.len() > REQUEST_HEAD_BYTES_MAX {
            return Err(HeadError::TooLarge);
        }
    }
}

/// The length of the head including its terminating blank line, once
/// present and within the limit.
fn find_head_end(bytes: &[u8]) -> Option<usize> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    (end <= REQUEST_HEAD_BYTES_MAX).then_some(end)
}

/// Answers from the request line alone.
fn route(head: &[u8], render: &Render) -> Vec<u8> {
    let Some((method, target)) = parse_request_line(head) else {
        return response(400, "Bad Request", "malformed request line\n");
    };
    let path = target.split('?').next().unwrap_or(target);
    if method == "GET" && path == "/metrics" {
        return response(200, "OK", &render());
    }
    response(404, "Not Found", "only GET /metrics is served here\n")
}

/// `(method, target)` of `METHOD SP /target SP HTTP/1.x CRLF`; `None` for
/// anything else.
fn parse_request_line(head: &[u8]) -> Option<(&str, &str)> {
    let line_end = head.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&head[..line_end]).ok()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let method_ok = !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase());
    let target_ok = target.starts_with('/') && target.bytes().all(|b| b.is_ascii_graphic());
    let version_ok = matches!(version, "HTTP/1.0" | "HTTP/1.1");
    (method_ok && target_ok && version_ok).then_some((method, target))
}

/// A complete response with a body and `Connection: close`.
fn response(status: u16, reason: &str, body: &str) -> Vec<u8> {
    let content_type = if status == 200 {
        "text/plain; version=0.0.4; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Step 4: reads (and drops) what the client still sends, bounded in bytes
/// and time.
async fn drain(stream: &mut TcpStream) {
    let mut drained = 0usize;
    let mut chunk = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_millis(DRAIN_TIMEOUT_MS);
    while drained < DRAIN_BYTES_MAX {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(read)) if read > 0 => drained += read,
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn start(render: Render) -> (std::net::SocketAddr, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        (address, serve(listener, render))
    }

    /// Sends `request` on a fresh connection and reads until the server closes.
    async fn exchange(address: std::net::SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream.write_all(request).await.expect("send");
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut reply))
            .await
            .expect("server closes the connection")
            .expect("read");
        String::from_utf8(reply).expect("utf-8")
    }

    fn status_line(reply: &str) -> &str {
        reply.split("\r\n").next().expect("status line")
    }

    fn body(reply: &str) -> &str {
        reply.split_once("\r\n\r\n").expect("head and body").1
    }

    #[tokio::test]
    async fn get_metrics_answers_the_rendered_text() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let render: Render = Arc::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            "# HELP x y\n# TYPE x gauge\nx 1\n".to_string()
        });
        let (address, server) = start(render).await;
        let reply = exchange(
            address,
            b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n",
        )
        .await;
        assert_eq!(status_line(&reply), "HTTP/1.1 200 OK");
        assert!(
            reply.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            "{reply}"
        );
        assert!(reply.contains("\r\nConnection: close\r\n"));
        assert!(reply.contains("\r\nContent-Length: 30\r\n"), "{reply}");
        assert_eq!(body(&reply), "# HELP x y\n# TYPE x gauge\nx 1\n");
        let with_query = exchange(address, b"GET /metrics?name[]=x HTTP/1.0\r\n\r\n").await;
        assert_eq!(status_line(&with_query), "HTTP/1.1 200 OK");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        server.abort();
    }

    #[tokio::test]
    async fn other_paths_methods_garbage_and_oversize_requests_are_refused() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let render: Render = Arc::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            String::new()
        });
        let (address, server) = start(render).await;
        let not_found = exchange(address, b"GET / HTTP/1.1\r\n\r\n").await;
        assert_eq!(status_line(&not_found), "HTTP/1.1 404 Not Found");
        assert!(not_found.contains("Content-Length: 33\r\n"), "{not_found}");
        let post = exchange(address, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
        assert_eq!(status_line(&post), "HTTP/1.1 404 Not Found");
        for garbage in [
            &b"garbage\r\n\r\n"[..],
            b"GET /metrics\r\n\r\n",
            b"GET  /metrics HTTP/1.1\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/2.0\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
        ] {
            let reply = exchange(address, garbage).await;
            assert_eq!(status_line(&reply), "HTTP/1.1 400 Bad Request", "{garbage:?}");
        }
        let mut oversize = b"GET /metrics HTTP/1.1\r\nX-Filler: ".to_vec();
        oversize.resize(REQUEST_HEAD_BYTES_MAX + 100, b'a');
        let reply = exchange(address, &oversize).await;
        assert_eq!(status_line(&reply), "HTTP/1.1 431 Request Header Fields Too Large");
        assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing rendered for refused requests");
        // The server still serves after all that.
        let ok = exchange(address, b"GET /metrics HTTP/1.1\r\n\r\n").await;
        assert_eq!(status_line(&ok), "HTTP/1.1 200 OK");
        server.abort();
    }

    #[tokio::test]
    async fn a_client_that_closes_early_gets_nothing_and_harms_nothing() {
        let (address, server) = start(Arc::new(|| "x 1\n".to_string())).await;
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream.write_all(b"GET /met").await.expect("send");
        drop(stream);
        let ok = exchange(address, b"GET /metrics HTTP/1.1\r\n\r\n").await;
        assert_eq!(body(&ok), "x 1\n");
        server.abort();
    }

    #[tokio::test]
    async fn a_client_too_slow_with_its_head_gets_408() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let server = serve_with_read_timeout(listener, Arc::new(String::new), Duration::from_millis(100));
        let reply = exchange(address, b"GET /metrics HTTP/1.1\r\n").await;
        assert_eq!(status_line(&reply), "HTTP/1.1 408 Request Timeout");
        server.abort();
    }

    #[test]
    fn request_line_parsing() {
        assert_eq!(
            parse_request_line(b"GET /metrics HTTP/1.1\r\n\r\n"),
            Some(("GET", "/metrics"))
        );
        assert_eq!(parse_request_line(b"HEAD /x HTTP/1.0\r\n\r\n"), Some(("HEAD", "/x")));
        assert_eq!(parse_request_line(b"get /metrics HTTP/1.1\r\n\r\n"), None);
        assert_eq!(parse_request_line(b"GET /metrics HTTP/1.1 extra\r\n\r\n"), None);
        assert_eq!(parse_request_line(b"GET /m\x01 HTTP/1.1\r\n\r\n"), None);
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
    }
}
