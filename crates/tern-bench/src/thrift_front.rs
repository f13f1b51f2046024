//! `tern bench thrift-front`: tern's Thrift front with a trivial handler, the tern side of
//! `bench/thrift_front.py` (issue 12: against Apache Thrift's C++ non-blocking server,
//! `bench/thrift_peer/server.cpp`, answering the same).
//!
//! A request takes the path a Thrift call takes in `tern recommend serve`: the runtime's I/O loop, the framed
//! transport (`tern_thrift::decode_framed_call`), `idl/recommend.thrift`'s call decoded and the reply written by
//! `tern-recommend-proto` (binary or compact, as the call came). Only the handler differs: it answers inline on
//! the I/O loop with [`answer`], so what is measured is the front, not the recommender.
//!
//! This is a server that runs until SIGTERM or SIGINT, not an experiment returning a [`Report`](crate::Report):
//! the comparison's other side is a C++ program, which the Python script builds and drives with the same
//! client. It lives here rather than in `tern-recommend` because it is a benchmark fixture, not part of the
//! service.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tern_recommend_proto::{
    decode_call, write_reply, IncomingCall, RecommendError, RecommendRequest, Recommendation,
    Recommendations,
};
use tern_runtime::{
    Cx, Decode, LoopInfo, Outcome, Output, Rejection, RuntimeConfig, Server, Service,
};
use tern_thrift::{decode_framed_call, write_exception_message, FramedCall};

/// Most items in an answer, whatever the request's `n` (the C++ peer caps the same).
pub const MAX_ITEMS: i32 = 100;
/// `tern recommend serve`'s default `--max-frame-bytes`.
const MAX_FRAME_BYTES: usize = 1 << 20;
/// The answers' `model_version`, and each item's `source`.
pub const TRIVIAL: &str = "trivial";

#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// TCP address to serve on.
    #[arg(long, default_value = "127.0.0.1:7800")]
    pub listen: SocketAddr,
    /// I/O threads (0: one per core).
    #[arg(long, default_value_t = 1)]
    pub io_threads: usize,
}

/// The fixed answer to a request: `min(n, MAX_ITEMS)` accounts counting up from the viewer's (stepping over a
/// Chaining call's profile), scores 1, 1/2, 1/3, ..., no source reports, not partial.
pub fn answer(request: &RecommendRequest) -> Recommendations {
    let mut account = request.viewer;
    let items = (1..=request.n.clamp(0, MAX_ITEMS))
        .map(|rank| {
            account = account.wrapping_add(1);
            if Some(account) == request.profile {
                account = account.wrapping_add(1);
            }
            Recommendation {
                account,
                score: 1.0 / f64::from(rank),
                source: TRIVIAL.to_owned(),
            }
        })
        .collect();
    Recommendations {
        items,
        partial: false,
        sources: Vec::new(),
        model_version: TRIVIAL.to_owned(),
    }
}

/// The Thrift front, answering every call with [`answer`] on the I/O thread.
struct TrivialFront;

impl Service for TrivialFront {
    type Request<'a> = FramedCall<IncomingCall<'a>>;
    type Loop = ();

    fn init_loop(self: &Arc<Self>, _info: &LoopInfo) {}

    fn decode<'a>(&self, input: &'a [u8]) -> Decode<Self::Request<'a>> {
        decode_framed_call(input, MAX_FRAME_BYTES, decode_call)
    }

    fn handle(
        &self,
        _cx: &mut Cx<'_, Self>,
        request: Self::Request<'_>,
        out: &mut Output,
    ) -> Outcome {
        match request {
            FramedCall::Refused(refusal) => {
                refusal.write(out);
                if refusal.close {
                    return Outcome::Close;
                }
            }
            FramedCall::Call(call) => match call.request {
                Ok(request) => {
                    let reply = Ok(answer(&request));
                    write_reply(out, call.protocol, call.name, call.seqid, &reply);
                }
                // Not a call of the IDL's (unknown method, bad arguments): Thrift's own exception.
                Err((kind, why)) => {
                    write_exception_message(out, call.protocol, call.name, call.seqid, kind, &why)
                }
            },
        }
        Outcome::Reply
    }

    fn reject(&self, request: &Self::Request<'_>, why: Rejection, out: &mut Vec<u8>) {
        match request {
            FramedCall::Call(call) => {
                let refusal = Err(RecommendError::Overloaded(format!(
                    "overloaded: {}",
                    why.as_str()
                )));
                write_reply(out, call.protocol, call.name, call.seqid, &refusal);
            }
            FramedCall::Refused(refusal) => refusal.write(out),
        }
    }
}

/// Serves until SIGTERM or SIGINT. The first line on standard output ends with the address it listens on.
pub fn serve(options: &Options) -> anyhow::Result<()> {
    let mut config = RuntimeConfig {
        listen: Some(options.listen),
        io_threads: options.io_threads,
        ..RuntimeConfig::default()
    };
    // Nothing is offloaded: one idle worker rather than one per core.
    config.executor.workers = 1;
    let server = Server::new(config, TrivialFront)
        .start()
        .context("starting tern bench thrift-front")?;
    let addr = server.local_addr().context("listening")?;
    println!(
        "tern bench thrift-front (idl/recommend.thrift, a trivial handler) listening on {addr}"
    );
    server.run_until_signal()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_n_accounts_after_the_viewer_but_never_the_profile() {
        let recs = answer(&RecommendRequest::chaining(10, 12, 3));
        let accounts: Vec<i64> = recs.items.iter().map(|i| i.account).collect();
        assert_eq!(accounts, [11, 13, 14]);
        assert_eq!(recs.items[1].score, 0.5);
        assert!(!recs.partial && recs.sources.is_empty());
        assert_eq!(
            answer(&RecommendRequest::suggested_users(1, 1000))
                .items
                .len(),
            MAX_ITEMS as usize
        );
        assert!(answer(&RecommendRequest::suggested_users(1, -1))
            .items
            .is_empty());
    }
}
