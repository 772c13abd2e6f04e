//! A local HTTP server that speaks like a provider, for tests.
//!
//! It binds 127.0.0.1 only, answers each request with the next scripted
//! [`Reply`] — an SSE stream sent in timed chunks (optionally cut short), or
//! a plain error body — and records every request so a test can assert the
//! exact body an adapter sent. HTTP/1.1 with `Connection: close`: the body
//! ends when the server closes the connection, as providers' streams do.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted response.
#[derive(Debug, Clone)]
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
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Starts serving `replies`, one per request, in order (later requests
    /// get a 500).
    pub async fn start(replies: Vec<Reply>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            let mut replies = replies.into_iter();
            while let Ok((socket, _)) = listener.accept().await {
                let reply = replies
                    .next()
                    .unwrap_or_else(|| Reply::error(500, "no more scripted replies"));
                let recorded = Arc::clone(&recorded);
                tokio::spawn(async move {
                    let _ = serve(socket, reply, recorded).await;
                });
            }
        });
        Ok(Self {
            address,
            requests,
            task,
        })
    }

    /// The base URL, e.g. `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
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
        self.task.abort();
    }
}

async fn serve(
    mut socket: TcpStream,
    reply: Reply,
    recorded: Arc<Mutex<Vec<RecordedRequest>>>,
) -> std::io::Result<()> {
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
