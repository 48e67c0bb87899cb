//! What the machine itself costs, measured in the same run as the load so
//! that a write's latency can be judged against it: the latency of a 1 KB
//! append made durable with `fdatasync` on the data directory's disk (what
//! one journal commit costs at least), and the round trip of a message on
//! loopback, both through the server (`ping`, what a member-to-member
//! command costs at least) and bare (a TCP echo between two threads).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Instant;

use bson::doc;

use super::client::{reply_ok, Client};
use super::histogram::Histogram;

/// The most samples one probe may take.
pub const PROBE_SAMPLES_MAX: usize = 100_000;
/// Unmeasured rounds before each probe (file allocation, connection setup,
/// first-touch page faults).
const WARMUP_ROUNDS: usize = 10;
/// Bytes appended before each `fdatasync`: one 1 KB document's journal
/// record, roughly.
pub const FDATASYNC_WRITE_BYTES: usize = 1024;
/// Bytes sent each way by the TCP echo probe.
const ECHO_BYTES: usize = 64;

/// The probe file, removed when dropped (whatever happened to the probe).
struct ProbeFile {
    path: PathBuf,
    file: File,
}

impl Drop for ProbeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `samples` rounds of "append 1 KB, then `fdatasync`" on a new file in
/// `dir`; each round's latency in microseconds. The file grows as a journal
/// segment does (appends change its size, which `fdatasync` must make
/// durable too).
pub fn fdatasync_latency(dir: &Path, samples: usize) -> io::Result<Histogram> {
    assert!((1..=PROBE_SAMPLES_MAX).contains(&samples));
    let path = dir.join(format!(".slipstream-bench-fdatasync-probe-{}", std::process::id()));
    let file = OpenOptions::new().write(true).create_new(true).open(&path)?;
    let mut probe = ProbeFile { path, file };
    let block = vec![0x5a_u8; FDATASYNC_WRITE_BYTES];
    let mut histogram = Histogram::default();
    for round in 0..WARMUP_ROUNDS + samples {
        let started = Instant::now();
        probe.file.write_all(&block)?;
        probe.file.sync_data()?;
        if round >= WARMUP_ROUNDS {
            histogram.record(started.elapsed().as_micros() as u64);
        }
    }
    Ok(histogram)
}

/// `samples` `ping` round trips to `address` on one connection.
pub async fn ping_round_trip(address: &str, samples: usize) -> Result<Histogram, String> {
    assert!((1..=PROBE_SAMPLES_MAX).contains(&samples));
    let mut client = Client::connect(address).await.map_err(|err| format!("connect to {address}: {err}"))?;
    let ping = doc! {"ping": 1, "$db": "admin"};
    let mut histogram = Histogram::default();
    for round in 0..WARMUP_ROUNDS + samples {
        let started = Instant::now();
        let reply = client.command(&ping, &[]).await.map_err(|err| format!("ping {address}: {err}"))?;
        if !reply_ok(&reply) {
            return Err(format!("ping {address} failed: {reply}"));
        }
        if round >= WARMUP_ROUNDS {
            histogram.record(started.elapsed().as_micros() as u64);
        }
    }
    Ok(histogram)
}

/// `samples` round trips of 64 bytes between two threads over a loopback
/// TCP connection: the floor under any message between two processes here.
pub fn tcp_echo_round_trip(samples: usize) -> io::Result<Histogram> {
    assert!((1..=PROBE_SAMPLES_MAX).contains(&samples));
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let echo = std::thread::Builder::new().name("bench-echo".into()).spawn(move || -> io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        let mut buffer = [0u8; ECHO_BYTES];
        // The client closing its end ends the loop.
        while stream.read_exact(&mut buffer).is_ok() {
            stream.write_all(&buffer)?;
        }
        Ok(())
    })?;
    let mut stream = TcpStream::connect(address)?;
    stream.set_nodelay(true)?;
    let message = [0xa5_u8; ECHO_BYTES];
    let mut answer = [0u8; ECHO_BYTES];
    let mut histogram = Histogram::default();
    for round in 0..WARMUP_ROUNDS + samples {
        let started = Instant::now();
        stream.write_all(&message)?;
        stream.read_exact(&mut answer)?;
        if round >= WARMUP_ROUNDS {
            histogram.record(started.elapsed().as_micros() as u64);
        }
    }
    assert_eq!(answer, message);
    drop(stream);
    echo.join().map_err(|_| io::Error::other("the echo thread panicked"))??;
    Ok(histogram)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdatasync_probe_measures_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let histogram = fdatasync_latency(dir.path(), 20).unwrap();
        assert_eq!(histogram.count(), 20);
        assert!(histogram.quantile(0.5) > 0, "a durable write takes time");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the probe file is removed");
    }

    #[test]
    fn fdatasync_probe_reports_a_missing_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(fdatasync_latency(&dir.path().join("absent"), 5).is_err());
    }

    #[test]
    fn tcp_echo_probe_counts_every_round() {
        let histogram = tcp_echo_round_trip(50).unwrap();
        assert_eq!(histogram.count(), 50);
    }
}
