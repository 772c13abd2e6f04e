//! A local HTTP server that speaks like a provider, for tests.
//!
//! It binds 127.0.0.1 only, answers each connection with the next scripted
//! [`Reply`] — an SSE stream sent in timed chunks (optionally cut short), an
//! error status, a body of any content type, silence, or raw bytes that are
//! not HTTP at all — and records every request so a test can assert the
//! exact body an adapter sent. HTTP/1.1 with `Connection: close`: the body
//! ends when the server closes the connection, as providers' streams do.
//! Dropping the server stops it and every connection it still holds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// One scripted response.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Reply {
    /// `200 OK`, `text/event-stream`, the chunks after their delays.
    Sse {
        /// `(delay before, bytes)` pairs.
        chunks: Vec<(Duration, Vec<u8>)>,
    },
    /// Any status with a body and extra headers.
    Status {
        /// The HTTP status.
        status: u16,
        /// Extra headers, e.g. `("retry-after", "2")`.
        headers: Vec<(String, String)>,
        /// The body.
        body: String,
    },
    /// Any status with a body of any content type (e.g. an HTML page with
    /// status 200, as a captive portal or a misrouted proxy sends).
    Body {
        /// The HTTP status.
        status: u16,
        /// The `content-type` header.
        content_type: String,
        /// The body.
        body: Vec<u8>,
    },
    /// Reads the request, then never answers (until the server is dropped).
    Silent,
    /// Writes these bytes as soon as the connection opens, without reading
    /// a request (e.g. plain HTTP where the client expects TLS), then closes.
    Raw(Vec<u8>),
}

impl Reply {
    /// An SSE stream sent as one chunk.
    pub fn sse(text: &str) -> Self {
        Self::Sse {
            chunks: vec![(Duration::ZERO, text.as_bytes().to_vec())],
        }
    }

    /// An error status with a JSON body.
    pub fn error(status: u16, body: &str) -> Self {
        Self::Status {
            status,
            headers: Vec::new(),
            body: body.to_owned(),
        }
    }
}

/// A request as the server received it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedRequest {
    /// `POST /v1/chat/completions` etc.
    pub method: String,
    /// The request path.
    pub path: String,
    /// Header names (lower-case) and values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl RecordedRequest {
    /// The value of header `name` (lower-case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body parsed as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_default()
    }
}

/// The running server; it stops when dropped.
pub struct TestServer {
    address: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    connections: Arc<AtomicUsize>,
    stop: CancellationToken,
}

impl TestServer {
    /// Starts serving `replies`, one per request, in order (later requests
    /// get a 500).
    pub async fn start(replies: Vec<Reply>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = CancellationToken::new();
        let (recorded, accepted, stopped) = (
            Arc::clone(&requests),
            Arc::clone(&connections),
            stop.clone(),
        );
        tokio::spawn(async move {
            let mut replies = replies.into_iter();
            loop {
                let socket = tokio::select! {
                    () = stopped.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok((socket, _)) => socket,
                        Err(_) => return,
                    },
                };
                accepted.fetch_add(1, Ordering::SeqCst);
                let reply = replies
                    .next()
                    .unwrap_or_else(|| Reply::error(500, "no more scripted replies"));
                let (recorded, stopped) = (Arc::clone(&recorded), stopped.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        () = stopped.cancelled() => {}
                        _ = serve(socket, reply, recorded) => {}
                    }
                });
            }
        });
        Ok(Self {
            address,
            requests,
            connections,
            stop,
        })
    }

    /// The base URL, e.g. `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// How many connections were accepted so far (one per attempt, whether
    /// or not a request was read on it).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests
            .lock()
            .map(|requests| requests.clone())
            .unwrap_or_default()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve(
    mut socket: TcpStream,
    reply: Reply,
    recorded: Arc<Mutex<Vec<RecordedRequest>>>,
) -> std::io::Result<()> {
    if let Reply::Raw(bytes) = &reply {
        socket.write_all(bytes).await?;
        socket.flush().await?;
        // Let the client's first bytes arrive before closing, so it reads
        // ours instead of a reset.
        let mut sink = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_millis(200), socket.read(&mut sink)).await;
        return socket.shutdown().await;
    }
    let request = read_request(&mut socket).await?;
    if let Ok(mut requests) = recorded.lock() {
        requests.push(request);
    }
    match reply {
        Reply::Sse { chunks } => {
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n")
                .await?;
            for (delay, bytes) in chunks {
                tokio::time::sleep(delay).await;
                socket.write_all(&bytes).await?;
                socket.flush().await?;
            }
        }
        Reply::Status {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} Status\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(body.as_bytes()).await?;
        }
        Reply::Body {
            status,
            content_type,
            body,
        } => {
            let head = format!(
                "HTTP/1.1 {status} Status\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(&body).await?;
        }
        Reply::Silent => std::future::pending::<()>().await,
        Reply::Raw(_) => {}
    }
    socket.shutdown().await
}

async fn read_request(socket: &mut TcpStream) -> std::io::Result<RecordedRequest> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        let read = socket.read(&mut chunk).await?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(at) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_owned();
    let path = first.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    while buffer.len() < header_end + length {
        let read = socket.read(&mut chunk).await?;
        if read == 0 {
            break;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    let body = String::from_utf8_lossy(buffer.get(header_end..).unwrap_or_default()).into_owned();
    Ok(RecordedRequest {
        method,
        path,
        headers,
        body,
    })
}
