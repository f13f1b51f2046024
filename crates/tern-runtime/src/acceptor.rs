//! The `acceptor` spread mode: one thread accepts and hands sockets to the loops round-robin (fbthrift's
//! acceptor thread), pausing on EMFILE/ENFILE instead of spinning.

use std::io::{self, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use mio::{Events, Interest, Poll, Token};
use tokio::sync::mpsc::UnboundedSender;

use crate::config::RuntimeConfig;
use crate::control::ServerControl;
use crate::tls::Tls;

/// A connection the acceptor hands to a loop, with the TLS its listener serves (if any).
pub(crate) struct Handoff {
    pub stream: TcpStream,
    pub tls: Option<Tls>,
}

/// Accept errors that mean "out of descriptors or memory": retrying at once would spin, because the pending
/// connection stays in the queue and keeps the listener readable.
pub(crate) fn is_resource_exhaustion(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM)
    )
}

/// Writes the refusal (best effort: the socket is fresh, so a small reply fits its send buffer) and closes.
pub(crate) fn refuse(mut stream: impl Write, refusal: &[u8]) {
    if !refusal.is_empty() {
        let _ = stream.write(refusal);
    }
}

pub(crate) fn run_acceptor(
    listeners: Vec<(TcpListener, Option<Tls>)>,
    loops: Vec<UnboundedSender<Handoff>>,
    wakers: Vec<Arc<mio::Waker>>,
    refusal: Arc<[u8]>,
    control: ServerControl,
    cfg: Arc<RuntimeConfig>,
) {
    let min_backoff = cfg.accept_backoff_min;
    let max_backoff = cfg.accept_backoff_max;
    let (listeners, tls): (Vec<TcpListener>, Vec<Option<Tls>>) = listeners.into_iter().unzip();
    let mut listeners: Vec<mio::net::TcpListener> = listeners
        .into_iter()
        .map(mio::net::TcpListener::from_std)
        .collect();
    let (mut poll, mut events) = match Poll::new() {
        Ok(p) => (p, Events::with_capacity(4)),
        Err(e) => {
            tracing::error!("acceptor: cannot create poll: {e}");
            control.shutdown();
            return;
        }
    };
    for (i, listener) in listeners.iter_mut().enumerate() {
        if let Err(e) = poll
            .registry()
            .register(listener, Token(i), Interest::READABLE)
        {
            tracing::error!("acceptor: cannot register listener: {e}");
            control.shutdown();
            return;
        }
    }
    let mut next = 0usize;
    let mut backoff = min_backoff;
    // The poll timeout is how fast the acceptor notices a shutdown.
    while !control.is_shutting_down() {
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(50))) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!("acceptor: poll failed: {e}");
                break;
            }
        }
        // Edge-triggered: accept from every listener until its queue is empty.
        for (listener, tls) in listeners.iter().zip(&tls) {
            loop {
                match listener.accept() {
                    Ok((stream, _)) => {
                        backoff = min_backoff;
                        let stream = TcpStream::from(std::os::fd::OwnedFd::from(stream));
                        if !control.try_add_connection() {
                            crate::metrics::CONNECTIONS_REFUSED.incr();
                            refuse(&stream, &refusal);
                            continue;
                        }
                        let target = next % loops.len();
                        let handoff = Handoff {
                            stream,
                            tls: tls.clone(),
                        };
                        if loops[target].send(handoff).is_err() {
                            control.remove_connection();
                        }
                        // The loop may be blocked in its own poll rather than in tokio.
                        let _ = wakers[target].wake();
                        next = next.wrapping_add(1);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if is_resource_exhaustion(&e) => {
                        tracing::warn!(
                            "accept: {e}; pausing accepts for {} ms",
                            backoff.as_millis()
                        );
                        crate::metrics::ACCEPT_PAUSES.incr();
                        crate::metrics::ACCEPT_PAUSED_MICROS
                            .add(u64::try_from(backoff.as_micros()).unwrap_or(u64::MAX));
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(max_backoff);
                        if control.is_shutting_down() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // ECONNABORTED and friends concern one connection, not the listener.
                    Err(e) => tracing::debug!("accept: {e}"),
                }
            }
        }
    }
}
