//! Shared helpers of the binary's tests: start a real `slipstream serve`
//! on a temporary data directory and a free port, and a small blocking
//! client over `slipstream-wire`.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use bson::{doc, Document};
use slipstream_wire::{check_frame, encode_op_msg, parse_message, Message, WireError};

/// Longest a node may take to start answering `ping`.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a node may take to exit after SIGTERM or `shutdown`.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub struct Node {
    pub port: u16,
    pub dbpath: PathBuf,
    pub child: Option<Child>,
    _dir: Option<tempfile::TempDir>,
}

pub fn serve_command(dbpath: &Path, port: u16, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_slipstream"));
    command
        .args(["serve", "--port", &port.to_string(), "--bind-ip", "127.0.0.1", "--dbpath"])
        .arg(dbpath)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

impl Node {
    pub fn start(extra: &[&str]) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let dbpath = dir.path().join("db");
        let mut node = Node::start_at(&dbpath, extra);
        node._dir = Some(dir);
        node
    }

    pub fn start_at(dbpath: &Path, extra: &[&str]) -> Node {
        let port = free_port();
        // The node's log (stdout, without --logpath) and stderr go to a
        // file, not a pipe nobody drains: a full pipe would block the node's
        // writes.
        std::fs::create_dir_all(dbpath).unwrap();
        let output = std::fs::File::create(dbpath.with_extension("output.log")).unwrap();
        let child = serve_command(dbpath, port, extra)
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .spawn()
            .expect("spawn slipstream serve");
        let mut node = Node { port, dbpath: dbpath.to_owned(), child: Some(child), _dir: None };
        node.wait_ready();
        node
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                let output = std::fs::read_to_string(self.dbpath.with_extension("output.log")).unwrap_or_default();
                panic!("node exited during startup with {status}: {output}");
            }
            if let Ok(mut client) = Client::connect(self.port) {
                if let Ok(reply) = client.command(&doc! {"ping": 1, "$db": "admin"}) {
                    if reply.get_f64("ok").ok() == Some(1.0) {
                        return;
                    }
                }
            }
            assert!(Instant::now() < deadline, "node did not answer ping within {STARTUP_TIMEOUT:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What the node has logged so far (its stdout and stderr).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dbpath.with_extension("output.log")).unwrap_or_default()
    }

    pub fn client(&self) -> Client {
        Client::connect(self.port).expect("connect to the node")
    }

    pub fn signal(&self, signal: i32) {
        let pid = self.child.as_ref().unwrap().id() as i32;
        // SAFETY: kill(2) with a child's pid and a valid signal number.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0);
    }

    /// Waits (bounded) for the node to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + EXIT_TIMEOUT;
        let child = self.child.as_mut().unwrap();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(Instant::now() < deadline, "node did not exit within {EXIT_TIMEOUT:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub struct Client {
    pub stream: TcpStream,
    buffer: Vec<u8>,
    next_request_id: i32,
}

impl Client {
    pub fn connect(port: u16) -> std::io::Result<Client> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_nodelay(true)?;
        Ok(Client { stream, buffer: Vec::new(), next_request_id: 1 })
    }

    pub fn request_id(&mut self) -> i32 {
        self.next_request_id += 1;
        self.next_request_id
    }

    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads one whole message.
    pub fn receive(&mut self) -> std::io::Result<Message> {
        loop {
            match check_frame(&self.buffer) {
                Ok(length) => {
                    let message = parse_message(&self.buffer[..length]);
                    self.buffer.drain(..length);
                    return message.map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidData, err.to_string()));
                }
                Err(WireError::Incomplete) => {
                    let mut chunk = [0u8; 64 * 1024];
                    let read = self.stream.read(&mut chunk)?;
                    if read == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    self.buffer.extend_from_slice(&chunk[..read]);
                }
                Err(err) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, err.to_string())),
            }
        }
    }

    /// One OP_MSG command with flags; returns the reply's header
    /// responseTo and body.
    pub fn command_with_flags(&mut self, body: &Document, flags: u32) -> std::io::Result<(i32, i32, Document)> {
        let request_id = self.request_id();
        self.send(&encode_op_msg(request_id, 0, flags, body, &[]).unwrap())?;
        match self.receive()? {
            Message::Msg(reply) => Ok((request_id, reply.header.response_to, reply.body)),
            other => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not an OP_MSG: {other:?}"))),
        }
    }

    pub fn command(&mut self, body: &Document) -> std::io::Result<Document> {
        let (request_id, response_to, reply) = self.command_with_flags(body, 0)?;
        assert_eq!(response_to, request_id, "reply answers another request");
        Ok(reply)
    }
}
