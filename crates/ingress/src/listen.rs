//! The node's HTTP and HTTPS ports: accept loops handing each connection, in turn, to one of
//! the [`Workers`], where hyper's automatic HTTP/1.1 + HTTP/2 server serves it (h2c by prior
//! knowledge on the HTTP port; ALPN `h2` on the HTTPS port), with upgrades enabled for
//! WebSocket; on the HTTP port, [`crate::h1`]'s fast path serves plain HTTP/1.1 requests
//! first and hands the connection to hyper at the first request of another shape.
//! Connections read the configuration per request, so a new configuration never drops one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

use crate::config::Config;
use crate::proxy::{Peer, Proxy};
use crate::{Error, Result};

/// How often a port that could not be bound is tried again.
pub const BIND_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// One bound port: plain HTTP, or HTTPS with the given rustls configuration.
pub struct Listener {
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
}

impl Listener {
    /// Binds `addr` (port 0 picks a free port); `tls` makes it an HTTPS port.
    pub async fn bind(addr: SocketAddr, tls: Option<rustls::ServerConfig>) -> Result<Listener> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr, source })?;
        Ok(Listener {
            listener,
            tls: tls.map(|c| TlsAcceptor::from(Arc::new(c))),
        })
    }

    /// Binds `addr` once it is free: while another server holds the port (or binding fails
    /// otherwise), `busy` is called once with the error and binding is tried again every
    /// [`BIND_RETRY`], so that a taken port 80 keeps the node's other components running (k3s's
    /// Traefik, behind host ports, never stops its node either) and is served once freed.
    pub async fn bind_when_free(
        addr: SocketAddr,
        tls: Option<rustls::ServerConfig>,
        busy: impl FnOnce(&Error),
    ) -> Listener {
        let mut busy = Some(busy);
        loop {
            match Listener::bind(addr, tls.clone()).await {
                Ok(listener) => return listener,
                Err(e) => {
                    tracing::warn!(error = %e, "the ingress port is unavailable; retrying");
                    if let Some(busy) = busy.take() {
                        busy(&e);
                    }
                    tokio::time::sleep(BIND_RETRY).await;
                }
            }
        }
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Accepts connections until the workers stop, handing each to the next worker.
    pub async fn serve(self, workers: Workers) {
        let port = self.local_addr().port();
        loop {
            let (stream, client) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // out of file descriptors and the like: keep serving the others
                    tracing::warn!(port, error = %e, "accepting a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let peer = Arc::new(Peer::new(client, port, self.tls.is_some()));
            // off this runtime's reactor, onto the worker's
            let stream = match stream.into_std() {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::debug!(%client, error = %e, "handing a connection over");
                    continue;
                }
            };
            let accepted = Accepted {
                stream,
                peer,
                tls: self.tls.clone(),
            };
            if !workers.hand(accepted) {
                tracing::error!(port, "the ingress worker threads stopped");
                return;
            }
        }
    }
}

/// One accepted connection on its way to a worker.
struct Accepted {
    stream: std::net::TcpStream,
    peer: Arc<Peer>,
    tls: Option<TlsAcceptor>,
}

/// The threads that serve the accepted connections: one per core, each a single-threaded
/// runtime with an upstream connection pool of its own, as nginx's worker processes are. A
/// connection, every request on it and the upstream connections they use stay on the thread
/// the connection was handed to, so forwarding a request never wakes a task on another core:
/// on a work-stealing runtime the client's connection, the handler and the pooled upstream
/// connection are tasks that wake one another across threads for every request. Connections
/// are handed out in turn; the threads end when the last handle is dropped.
#[derive(Clone)]
pub struct Workers {
    queues: Arc<[mpsc::UnboundedSender<Accepted>]>,
    next: Arc<AtomicUsize>,
}

impl Workers {
    /// Starts `threads` workers (at least one) proxying by the newest `config`.
    pub fn start(config: watch::Receiver<Arc<Config>>, threads: usize) -> std::io::Result<Workers> {
        let mut queues = Vec::new();
        for n in 0..threads.max(1) {
            let (queue, mut accepted) = mpsc::unbounded_channel::<Accepted>();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let config = config.clone();
            std::thread::Builder::new()
                .name(format!("ingress-{n}"))
                .spawn(move || {
                    runtime.block_on(async move {
                        let proxy = Arc::new(Proxy::new(config));
                        while let Some(next) = accepted.recv().await {
                            tokio::spawn(accept(next, proxy.clone()));
                        }
                    })
                })?;
            queues.push(queue);
        }
        Ok(Workers {
            queues: queues.into(),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Gives `accepted` to the next worker; false when the workers have stopped.
    fn hand(&self, accepted: Accepted) -> bool {
        let n = self.next.fetch_add(1, Ordering::Relaxed) % self.queues.len();
        self.queues[n].send(accepted).is_ok()
    }
}

/// Serves one handed-over connection (after its TLS handshake on an HTTPS port).
async fn accept(accepted: Accepted, proxy: Arc<Proxy>) {
    let Accepted { stream, peer, tls } = accepted;
    let stream = match TcpStream::from_std(stream) {
        Ok(stream) => stream,
        Err(e) => {
            tracing::debug!(client = %peer.client, error = %e, "taking a connection over");
            return;
        }
    };
    match tls {
        None => crate::h1::serve(stream, peer, proxy).await,
        Some(acceptor) => match acceptor.accept(stream).await {
            Ok(stream) => connection(stream, peer, proxy).await,
            Err(e) => tracing::debug!(client = %peer.client, error = %e, "TLS handshake failed"),
        },
    }
}

/// Serves HTTP/1.1 or HTTP/2 on one connection until the client closes it.
pub(crate) async fn connection<S>(stream: S, peer: Arc<Peer>, proxy: Arc<Proxy>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let client = peer.client;
    let service = service_fn(move |req| proxy.clone().serve(req, peer.clone()));
    let builder = auto::Builder::new(TokioExecutor::new());
    if let Err(e) = builder
        .serve_connection_with_upgrades(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%client, error = %e, "connection ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_taken_port_is_reported_once_and_bound_when_freed() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = holder.local_addr().unwrap();
        let (tx, mut reported) = tokio::sync::mpsc::unbounded_channel();
        let binding = tokio::spawn(Listener::bind_when_free(addr, None, move |e: &Error| {
            tx.send(e.to_string()).unwrap();
        }));
        let report = reported.recv().await.expect("the busy port is reported");
        assert!(report.starts_with(&format!("binding {addr}: ")), "{report}");
        assert!(!binding.is_finished());
        drop(holder);
        let listener = binding.await.unwrap();
        assert_eq!(listener.local_addr(), addr);
        // reported once, however many attempts failed
        assert!(reported.recv().await.is_none());
    }
}
