//! The `/metrics` and `/healthz` endpoint of the components that run on their own next to the
//! API server (`skiff scheduler`, `skiff controller-manager`, `skiff proxy`): plain HTTP on a
//! `--metrics-bind-address`, where upstream's serve them on an HTTPS secure port with
//! authentication and authorization delegated to the API server (kube-proxy's is plain HTTP too).

use std::net::SocketAddr;

use anyhow::Context as _;

use super::lifecycle::Lifecycle;

/// Binds `addr` (port 0 picks a free one) and serves, until the component stops, `/metrics`
/// (what `encode` returns at each scrape, Prometheus' text format) and `/healthz` (`ok`). Returns
/// the address bound, for the component's ready line.
pub async fn serve<F>(
    addr: SocketAddr,
    lifecycle: &Lifecycle,
    encode: F,
) -> anyhow::Result<SocketAddr>
where
    F: Fn() -> String + Clone + Send + Sync + 'static,
{
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let bound = listener.local_addr()?;
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let encode = encode.clone();
                async move { encode() }
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok" }));
    let lifecycle = lifecycle.clone();
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { lifecycle.stopped().await })
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "serving /metrics");
        }
    });
    Ok(bound)
}
