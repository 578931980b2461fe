//! A layer-4 load balancer: each accepted connection goes to the next backend in turn, skipping
//! any that refuses the connection, and is then spliced byte for byte. It carries HTTP/1.1,
//! HTTP/2 (gRPC) and SSE alike; a killed backend resets the connections it held, and the next
//! connection goes elsewhere — what an L4 balancer in front of a real fleet does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::net::IpAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// How long a backend may take to accept a connection before the next one is tried (a
/// partitioned replica drops it silently).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A running balancer: its address, and how many connections found no backend up.
pub struct Balancer {
    pub addr: SocketAddr,
    pub no_backend: Arc<AtomicUsize>,
    _task: AbortOnDrop,
}

impl Balancer {
    /// Listens on `ip` (a free port) in front of `backends`.
    pub async fn start(ip: IpAddr, backends: Vec<SocketAddr>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let no_backend = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&no_backend);
        let backends = Arc::new(backends);
        let next = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let backends = Arc::clone(&backends);
                let next = Arc::clone(&next);
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    let _ = client.set_nodelay(true);
                    let start = next.fetch_add(1, Ordering::Relaxed);
                    for i in 0..backends.len() {
                        let Some(backend) = backends.get((start + i) % backends.len()) else {
                            break;
                        };
                        if let Ok(Ok(mut upstream)) =
                            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(backend)).await
                        {
                            let _ = upstream.set_nodelay(true);
                            let mut client = client;
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                            return;
                        }
                    }
                    counter.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        Ok(Self {
            addr,
            no_backend,
            _task: AbortOnDrop(task),
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Aborts the accept loop when the balancer is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
