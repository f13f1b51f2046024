//! UDP: each datagram handed to the service with the socket it came on; replies sent from the same socket.

use std::io;

use super::IoLoop;
use crate::metrics;
use crate::service::Service;

const DATAGRAMS_PER_TURN: usize = 64;

impl<S: Service> IoLoop<S> {
    pub(super) fn serve_udp(&mut self, which: usize) {
        for _ in 0..DATAGRAMS_PER_TURN {
            let Some(sock) = self.udp.get(which) else {
                return;
            };
            let (n, peer) = match sock.recv_from(&mut self.read_buf) {
                Ok(v) => {
                    metrics::DATAGRAMS.incr();
                    v
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!("io loop {}: udp recv: {e}", self.id);
                    continue;
                }
            };
            self.datagrams.clear();
            let socket = std::os::fd::AsRawFd::as_raw_fd(sock) as u64;
            self.service.datagram(
                &self.state,
                socket,
                &self.read_buf[..n],
                peer,
                &mut self.datagrams,
            );
            for d in self.datagrams.iter() {
                // A full socket buffer drops the reply, as UDP does; the client retries.
                if let Err(e) = sock.send_to(d, peer) {
                    tracing::debug!("io loop {}: udp send: {e}", self.id);
                }
            }
        }
        self.again_udp = true;
    }
}
