//! The UDP door: memcached's 8-byte frame header, one request (or several) per datagram, and the reply split
//! into datagrams of at most 1400 bytes, each with its own header (the framing itself is in
//! `tern_memcache_proto::udp`).

use std::rc::Rc;

use tern_memcache_proto::binary::{self, BinaryDecoded};
use tern_memcache_proto::{udp, Decoded, Request};
use tern_runtime::{Datagrams, Output};

use crate::cache::{Cache, CacheLoop, Flow};
use crate::text::{command_line, LogReplies};
use crate::vlog;

impl Cache {
    /// UDP gets (memcached's frame header; one request per datagram; the reply split into datagrams of at most
    /// 1400 bytes with their own headers), sent from the loop's own socket.
    pub(crate) fn serve_datagram(
        &self,
        state: &Rc<CacheLoop>,
        socket: u64,
        datagram: &[u8],
        replies: &mut Datagrams,
    ) {
        let Some((request_id, payload)) = udp::parse_request(datagram) else {
            return;
        };
        self.conns.command(socket, self.clock.now());
        // memcached picks the protocol per datagram.
        if payload.first() == Some(&binary::REQUEST_MAGIC) {
            state.log_id.set(socket as usize);
            return self.serve_binary_datagram(state, request_id, payload, replies);
        }
        let mut out = Vec::new();
        let mut units = Vec::new();
        let now = self.clock.now();
        let mut rest = payload;
        let mut log = self.vlog.commands().then(Vec::new);
        state.log_id.set(socket as usize);
        // The replies of the datagram's commands go out together, after the last one.
        state.flushed(0);
        // How much of `out` memcached would already have sent (after a get or `mn`).
        let mut flushed = 0;
        while !rest.is_empty() {
            let line = command_line(rest);
            match tern_memcache_proto::decode(rest, &self.limits) {
                Decoded::Frame { request, consumed } => {
                    rest = &rest[consumed.min(rest.len())..];
                    let flushes = request.flushes_replies();
                    if let Some(log) = log.as_mut() {
                        vlog::line(log, b'<', state.log_id.get(), line);
                    }
                    let flow = self.datagram_command(
                        request,
                        now,
                        &mut out,
                        &mut units,
                        state,
                        log.as_mut(),
                    );
                    match flow {
                        Flow::Continue => {}
                        Flow::Close => break,
                        Flow::Hangup => {
                            out.truncate(flushed);
                            units.retain(|&end| end <= flushed);
                            break;
                        }
                    }
                    if flushes {
                        flushed = out.len();
                    }
                }
                // A request must fit its datagram: memcached answers an incomplete one with nothing.
                Decoded::Incomplete { .. } | Decoded::Close { .. } => break,
            }
        }
        if let Some(log) = log {
            self.vlog.write(&log);
        }
        state.flushed(0);
        send_units(request_id, &out, &units, replies);
    }

    /// A datagram of binary requests: each response packet a unit of datagrams of its own.
    fn serve_binary_datagram(
        &self,
        state: &Rc<CacheLoop>,
        request_id: u16,
        payload: &[u8],
        replies: &mut Datagrams,
    ) {
        let now = self.clock.now();
        let mut out = Output::with_capacity(1024);
        let mut units = Vec::new();
        let mut rest = payload;
        state.flushed(0);
        while let BinaryDecoded::Frame {
            header,
            command,
            consumed,
        } = binary::decode_binary(rest, &self.limits)
        {
            let mut log = self.vlog.commands().then(Vec::new);
            if let Some(log) = log.as_mut() {
                let raw_header = &rest[..binary::HEADER_LEN];
                crate::binary::log_request(log, state.log_id.get(), raw_header, &header, &command);
            }
            rest = &rest[consumed.min(rest.len())..];
            let closes = command.closes();
            let before = out.total_len();
            // No connection to authenticate: `-S` refuses to start with UDP, as memcached does.
            self.answer_binary(&header, command, now, &mut out, None, state, 0);
            if let Some(mut log) = log {
                let written = out.to_vec();
                crate::binary::log_responses(&mut log, state.log_id.get(), &written[before..]);
                self.vlog.write(&log);
            }
            if units.last().is_none_or(|&end| end < out.total_len()) {
                units.push(out.total_len());
            }
            if closes || rest.is_empty() {
                break;
            }
        }
        state.flushed(0);
        send_units(request_id, &out.to_vec(), &units, replies);
    }

    /// One command of a datagram: its reply appended to `out`, and `units` extended to where its reply
    /// ends (memcached numbers a reply's datagrams per unit).
    fn datagram_command(
        &self,
        request: Request<'_>,
        now: u32,
        out: &mut Vec<u8>,
        units: &mut Vec<usize>,
        state: &CacheLoop,
        mut log: Option<&mut Vec<u8>>,
    ) -> Flow {
        let mark = out.len();
        match request {
            Request::Get {
                kind,
                exptime,
                keys,
            } => {
                self.get(
                    kind,
                    exptime,
                    keys,
                    now,
                    out,
                    Some(units),
                    state,
                    log.as_deref_mut(),
                );
                Flow::Continue
            }
            other => {
                let shown = LogReplies::of(&other);
                let answer = self.execute(other, now, out, None, state, log.as_deref_mut());
                if let Some(log) = log {
                    if shown.select(&out[mark..]) {
                        vlog::replies(log, state.log_id.get(), &out[mark..], answer.hidden);
                    }
                }
                if answer.hidden {
                    out.truncate(mark);
                }
                if units.last().is_none_or(|&end| end < out.len()) {
                    units.push(out.len());
                }
                answer.flow
            }
        }
    }
}

/// Sends `out` as memcached numbers UDP replies: each unit (up to its end offset in `units`) split into
/// datagrams of its own, each with the frame header.
fn send_units(request_id: u16, out: &[u8], units: &[usize], replies: &mut Datagrams) {
    let mut start = 0;
    for &end in units {
        for (header, payload) in udp::reply_datagrams(request_id, &out[start..end]) {
            let d = replies.begin();
            d.extend_from_slice(&header);
            d.extend_from_slice(payload);
            replies.end();
        }
        start = end;
    }
}
