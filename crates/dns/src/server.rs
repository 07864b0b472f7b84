//! `server`: the sockets `skiff dns` serves on: UDP and TCP on the same address (a port of 0
//! picks one free for both), run by hickory's server, and the HTTP endpoints `/metrics`,
//! `/health` and `/ready`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_server::Server;
use hickory_server::server::RequestHandler;

use crate::metrics::Metrics;
use crate::{Error, Result};

/// How long a TCP client may stay idle between queries before hickory closes the connection.
pub const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a free port is looked for when `listen` has port 0 and TCP finds UDP's port taken.
const BIND_ATTEMPTS: usize = 16;

/// A running DNS server and where it listens.
pub struct Listening<H: RequestHandler> {
    pub server: Server<H>,
    pub addr: SocketAddr,
}

/// Binds UDP and TCP on `listen` and starts serving them with `handler`.
pub async fn listen<H: RequestHandler>(handler: H, listen: SocketAddr) -> Result<Listening<H>> {
    let (udp, tcp) = bind_pair(listen).await?;
    let addr = udp.local_addr().map_err(|e| Error::Bind(listen, e))?;
    let mut server = Server::new(handler);
    server.register_socket(udp);
    server.register_listener(tcp, TCP_IDLE_TIMEOUT, 64 * 1024);
    Ok(Listening { server, addr })
}

async fn bind_pair(listen: SocketAddr) -> Result<(tokio::net::UdpSocket, tokio::net::TcpListener)> {
    let mut last = None;
    for _ in 0..BIND_ATTEMPTS {
        let udp = tokio::net::UdpSocket::bind(listen)
            .await
            .map_err(|e| Error::Bind(listen, e))?;
        let addr = udp.local_addr().map_err(|e| Error::Bind(listen, e))?;
        match tokio::net::TcpListener::bind(addr).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if listen.port() == 0 => last = Some(Error::Bind(addr, e)),
            Err(e) => return Err(Error::Bind(addr, e)),
        }
    }
    Err(last.unwrap_or_else(|| Error::Bind(listen, std::io::ErrorKind::AddrInUse.into())))
}

/// Serves `/metrics`, `/health` (the process is up) and `/ready` (records synced, sockets
/// bound; always true once this runs) on `addr`, returning where it listens.
pub async fn serve_http(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Bind(addr, e))?;
    let bound = listener.local_addr().map_err(|e| Error::Bind(addr, e))?;
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let metrics = metrics.clone();
                async move { metrics.encode() }
            }),
        )
        .route("/health", axum::routing::get(|| async { "OK" }))
        .route("/ready", axum::routing::get(|| async { "OK" }));
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::warn!(%error, "serving /metrics");
        }
    });
    Ok(bound)
}
