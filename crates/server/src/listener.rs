//! The tokio listener: binds `--bind-ip`/`--port`, admits at most
//! `max_connections` connections at once (a semaphore, as mini-redis
//! does), spawns one task per connection, and on shutdown stops accepting
//! and waits (bounded) for in-flight requests to be answered. A connection
//! beyond the limit is accepted and closed at once, logged and counted
//! (`serverStatus.connections.rejected`), as MongoDB does: left in the
//! kernel's backlog, its client would wait for its own timeout on a node
//! that looks hung.

use std::io;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::connection;
use crate::state::ServerState;

/// How long shutdown waits for connections to finish their current
/// request before the engine is shut down anyway.
pub const SHUTDOWN_GRACE_MS: u64 = 10_000;

/// Pause after a failed `accept` (e.g. out of file descriptors) so that a
/// persistent failure does not spin.
const ACCEPT_ERROR_BACKOFF_MS: u64 = 50;

/// Binds every address of `bind_ip` (comma-separated, as MongoDB accepts).
pub async fn bind(bind_ip: &str, port: u16) -> io::Result<Vec<TcpListener>> {
    let mut listeners = Vec::new();
    for host in bind_ip.split(',').map(str::trim).filter(|host| !host.is_empty()) {
        listeners.push(TcpListener::bind((host, port)).await?);
    }
    if listeners.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "--bind-ip names no address"));
    }
    Ok(listeners)
}

/// Serves until the state's shutdown signal is set, then returns once
/// every connection has finished (or the grace period has passed).
pub async fn serve(state: Arc<ServerState>, listeners: Vec<TcpListener>) {
    let limit = Arc::new(Semaphore::new(state.options.max_connections));
    let next_connection_id = Arc::new(AtomicI64::new(1));
    let mut accept_loops = JoinSet::new();
    for listener in listeners {
        let address = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
        state.log.info("NETWORK", 23016, "listener", "Waiting for connections", json!({"address": address}));
        accept_loops.spawn(accept_loop(state.clone(), listener, limit.clone(), next_connection_id.clone()));
    }
    // The TTL monitor lives as long as the node serves; it ends on the
    // same shutdown signal.
    let ttl_monitor = tokio::spawn(crate::ttl_monitor::run(state.clone()));
    while accept_loops.join_next().await.is_some() {}
    let _ = ttl_monitor.await;
}

async fn accept_loop(state: Arc<ServerState>, listener: TcpListener, limit: Arc<Semaphore>, next_id: Arc<AtomicI64>) {
    let mut connections = JoinSet::new();
    loop {
        // Reap finished connection tasks so the set stays as small as the
        // number of open connections.
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = state.shutdown.wait() => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(err) => {
                state.log.warning("NETWORK", 23021, "listener", "accept failed", json!({"error": err.to_string()}));
                tokio::time::sleep(Duration::from_millis(ACCEPT_ERROR_BACKOFF_MS)).await;
                continue;
            }
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            state.metrics.connection_rejected();
            state.log.info(
                "NETWORK",
                22942,
                "listener",
                "Connection refused because there are too many open connections",
                json!({"remote": peer.to_string(), "connectionCount": state.options.max_connections}),
            );
            drop(stream);
            continue;
        };
        let connection_id = next_id.fetch_add(1, Ordering::Relaxed);
        let state = state.clone();
        connections.spawn(async move {
            connection::run(state, stream, peer, connection_id).await;
            drop(permit);
        });
    }
    drop(listener);
    let grace = Duration::from_millis(SHUTDOWN_GRACE_MS);
    let drained = tokio::time::timeout(grace, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        state.log.warning("NETWORK", 4784901, "listener", "connections still open after the shutdown grace period", json!({"open": connections.len()}));
        connections.abort_all();
    }
}
