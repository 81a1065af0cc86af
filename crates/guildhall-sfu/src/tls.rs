//! The voice gateway's own TLS listener: discord.py and discord.js only
//! connect with `wss://`, so a self-hoster without a TLS proxy in front
//! needs one here. rustls with the `ring` provider; PEM files parsed by
//! rustls' own pki-types.
//!
//! Bounds: at most `sfu_connections_max` connections (one task each; a
//! connection over the cap is closed at once and counted), a handshake
//! timeout, and the same timeout for the HTTP request head that follows.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::stats::Counters;
use crate::{Inner, SfuError, Slot};

pub(crate) fn acceptor(cert_pem: &Path, key_pem: &Path) -> Result<TlsAcceptor, SfuError> {
    let certs = CertificateDer::pem_file_iter(cert_pem)
        .map_err(|e| SfuError::Tls(format!("certificate {}: {e}", cert_pem.display())))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SfuError::Tls(format!("certificate {}: {e}", cert_pem.display())))?;
    if certs.is_empty() {
        return Err(SfuError::Tls(format!(
            "certificate {}: no certificate",
            cert_pem.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key_pem)
        .map_err(|e| SfuError::Tls(format!("key {}: {e}", key_pem.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SfuError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| SfuError::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

pub(crate) async fn serve(
    inner: Arc<Inner>,
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
) {
    let max = inner.limits().sfu_connections_max;
    let timeout = Duration::from_millis(inner.limits().sfu_tls_handshake_timeout_ms);
    // After a failed accept (file descriptors exhausted) the loop pauses
    // as the node's own listener does, instead of spinning.
    let backoff = Duration::from_millis(inner.limits().http_accept_backoff_ms);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _peer)) => {
                // No Nagle: voice gateway messages are small and latency-bound.
                let _ = stream.set_nodelay(true);
                stream
            }
            Err(e) => {
                inner.warn("tls_accept", &e);
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        let Some(slot) = Slot::try_new(&inner.tls_connections, max) else {
            Counters::bump(&inner.counters.tls_refused_total);
            inner.warn("tls_full", &"voice gateway TLS connection cap reached");
            continue;
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        let inner = inner.clone();
        // One task per connection, bounded by the slot above.
        tokio::spawn(async move {
            let _slot = slot;
            let tls = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    Counters::bump(&inner.counters.tls_handshake_failures_total);
                    inner.warn("tls_handshake", &e);
                    return;
                }
                Err(_) => {
                    Counters::bump(&inner.counters.tls_handshake_failures_total);
                    inner.warn("tls_handshake", &"timed out");
                    return;
                }
            };
            let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                let mut router = router.clone();
                async move {
                    tower_service::Service::call(&mut router, request.map(axum::body::Body::new))
                        .await
                }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(timeout);
            // The connection's end (or error) is the client's business.
            let _ = builder
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades()
                .await;
        });
    }
}
