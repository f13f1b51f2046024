//! tern pacer's gateway protocol (specified in `tern_pacer_proto::gateway`): a BIDS frame out per
//! request, its DECISIONS frame back, and, after bids, billing NOTICES out and ACKS back on the
//! same connection. Every decision is checked against the request it answers.
//!
//! Nothing per request is remembered beyond its ids (the batch id, then the candidate
//! campaigns): floors, maximum bids and the request attributes are derived from a hash of the
//! seed and the batch's index in the run, so the decoder recomputes what it must check and the
//! stream is the same for the same seed. Batch ids are [`RunIds`] (also the requests' auction
//! ids, with the request's position as impression id): the pacer remembers reservations across
//! runs, and a repeated id would be a duplicate to it.

use rand::rngs::SmallRng;
use tern_pacer_proto::gateway::{
    decode_reply, encode_bids, encode_notices, CampaignId, Candidate, Decision, Device, Geo,
    ImpKey, Limits, Notice, NoticeKind, NoticeStatus, Reply, RequestHeader, Status, HEADER_LEN,
};
use tern_pacer_proto::money::{Cpm, Usd};
use tern_wire::Decode;

use super::ids::{unix_ms, RunIds};
use super::reply::{Decoded, Fault};
use crate::config::{Config, PriceRange};
use crate::stats::{Outcome, Tally};
use crate::workload::{mix64, KeyChooser};

const INDEX_MASK: u64 = RunIds::INDEX_MASK;
/// Where the currency code sits in a BIDS frame (after the batch id) and a NOTICES frame.
const BIDS_CURRENCY_AT: usize = HEADER_LEN + 8;
const NOTICES_CURRENCY_AT: usize = HEADER_LEN;
/// Countries the requests come from (`--` is unknown).
const GEOS: [Geo; 6] = [
    Geo(*b"US"),
    Geo(*b"GB"),
    Geo(*b"DE"),
    Geo(*b"FR"),
    Geo(*b"JP"),
    Geo::UNKNOWN,
];
/// Hash lanes of a request's derived values; candidates use their position (< 32).
const FLOOR_LANE: u64 = 255;
const ATTRIBUTE_LANE: u64 = 254;
const NOTICE_LANE: u64 = 253;

/// A value of `range` chosen by `hash`.
fn in_range(range: PriceRange, hash: u64) -> u64 {
    let span = range.max_micros - range.min_micros;
    range.min_micros + span.checked_add(1).map_or(hash, |n| hash % n)
}

pub(crate) struct PacerCodec {
    batch: usize,
    candidates: usize,
    first_campaign: u64,
    campaign_count: u64,
    max_bid: PriceRange,
    floor: PriceRange,
    currency: [u8; 3],
    deadline_ms: u64,
    notice_fraction: f64,
    seed: u64,
    batch_ids: RunIds,
    limits: Limits,
    headers: Vec<RequestHeader<Usd>>,
    offers: Vec<Candidate<Usd>>,
    /// Billing notices the last DECISIONS frame calls for.
    notices: Vec<Notice<Usd>>,
}

impl PacerCodec {
    pub fn new(config: &Config, thread: usize) -> Self {
        let w = &config.pacer;
        let mut currency = [0; 3];
        currency.copy_from_slice(&w.currency.as_bytes()[..3]);
        PacerCodec {
            batch: w.batch,
            candidates: w.candidates,
            first_campaign: u64::from(w.campaigns.first),
            campaign_count: w.campaigns.count(),
            max_bid: w.max_bid,
            floor: w.floor,
            currency,
            deadline_ms: w.deadline_ms,
            notice_fraction: w.notices,
            seed: config.seed,
            batch_ids: RunIds::new(config, thread),
            limits: Limits::default(),
            headers: Vec::with_capacity(w.batch),
            offers: Vec::with_capacity(w.batch * w.candidates),
            notices: Vec::with_capacity(w.batch),
        }
    }

    pub fn batch(&self) -> usize {
        self.batch
    }

    fn hash(&self, index: u64, request: usize, lane: u64) -> u64 {
        mix64(mix64(self.seed ^ mix64(index)) ^ ((request as u64) << 8 | lane))
    }

    fn floor_of(&self, index: u64, request: usize) -> u64 {
        in_range(self.floor, self.hash(index, request, FLOOR_LANE))
    }

    fn max_bid_of(&self, index: u64, request: usize, candidate: usize) -> u64 {
        in_range(self.max_bid, self.hash(index, request, candidate as u64))
    }

    /// Draws the next batch: its id, then `candidates` distinct campaigns per request.
    pub fn draw(&mut self, rng: &mut SmallRng, keys: &mut KeyChooser, ids: &mut Vec<u64>) {
        ids.push(self.batch_ids.next_id());
        for _ in 0..self.batch {
            let start = ids.len();
            for _ in 0..self.candidates {
                let mut offset = keys.next(rng);
                // A campaign already drawn for this request gives way to the next free one
                // (bounded: the range holds at least `candidates` campaigns).
                while ids[start..].contains(&(self.first_campaign + offset)) {
                    offset = (offset + 1) % self.campaign_count;
                }
                ids.push(self.first_campaign + offset);
            }
        }
    }

    /// Appends the BIDS frame of the batch `ids` describes.
    pub fn encode_bids(&mut self, out: &mut Vec<u8>, ids: &[u64]) {
        let batch_id = ids[0];
        let index = batch_id & INDEX_MASK;
        let deadline_ms = unix_ms() + self.deadline_ms;
        self.headers.clear();
        self.offers.clear();
        for (r, campaigns) in ids[1..].chunks(self.candidates).enumerate() {
            let h = self.hash(index, r, ATTRIBUTE_LANE);
            self.headers.push(RequestHeader {
                key: ImpKey {
                    auction_id: batch_id,
                    imp_id: r as u32,
                },
                floor: Cpm::from_micros(self.floor_of(index, r)),
                deadline_ms,
                hour: (h % 24) as u8,
                device: Device::ALL[(h >> 8) as usize % Device::ALL.len()],
                geo: GEOS[(h >> 16) as usize % GEOS.len()],
                site_id: (h >> 24) % 1000 + 1,
            });
            for (k, &campaign) in campaigns.iter().enumerate() {
                self.offers.push(Candidate {
                    campaign: CampaignId(campaign as u32),
                    max_bid: Cpm::from_micros(self.max_bid_of(index, r, k)),
                });
            }
        }
        let start = out.len();
        let requests = self.headers.iter().zip(self.offers.chunks(self.candidates));
        encode_bids::<Usd>(out, batch_id, requests);
        // The proto types carry the currency as a type marker only: the frame is encoded as
        // USD and its code set to the pacer's, so one codec serves every currency.
        out[start + BIDS_CURRENCY_AT..][..3].copy_from_slice(&self.currency);
    }

    /// The reply frame at the front of `input`; a pacer ERROR frame ends the connection.
    fn reply(&self, input: &[u8]) -> Result<Option<(Reply<Usd>, usize)>, Fault> {
        match decode_reply::<Usd>(input, &self.limits) {
            Decode::Incomplete { .. } | Decode::Interim { .. } => Ok(None),
            Decode::Frame { request, consumed } => match request {
                Reply::Error { code, message } => Err(Fault {
                    outcome: Outcome::ServerError,
                    reason: format!("pacer error {code}: {message}"),
                }),
                reply => Ok(Some((reply, consumed))),
            },
            Decode::Close { .. } => Err(Fault::protocol("malformed frame from the pacer")),
        }
    }

    /// Decodes and checks the DECISIONS frame answering the batch whose ids `id_at` gives,
    /// and picks the bids that get a billing notice.
    pub fn decode_decisions(
        &mut self,
        input: &[u8],
        id_at: impl Fn(usize) -> u64,
    ) -> Result<Decoded, Fault> {
        self.notices.clear();
        let Some((reply, consumed)) = self.reply(input)? else {
            return Ok(Decoded::Incomplete);
        };
        let mut tally = Tally::default();
        match reply {
            Reply::Decisions {
                batch_id,
                decisions,
            } if batch_id == id_at(0) && decisions.len() == self.batch => {
                for (r, decision) in decisions.into_iter().enumerate() {
                    tally.add(self.check(batch_id, r, decision, &id_at));
                }
            }
            Reply::Decisions { .. } => tally.add(Outcome::WrongBatch),
            _ => tally.add(Outcome::UnexpectedReply),
        }
        Ok(Decoded::Done { consumed, tally })
    }

    /// The outcome of request `r`'s decision; a valid bid may be queued for a notice.
    fn check(
        &mut self,
        batch_id: u64,
        r: usize,
        decision: Decision<Usd>,
        id_at: impl Fn(usize) -> u64,
    ) -> Outcome {
        let (campaign, price) = match decision {
            Decision::NoBid(status) => return no_bid(status),
            Decision::Bid { campaign, price } => (campaign, price),
        };
        let index = batch_id & INDEX_MASK;
        let first = 1 + r * self.candidates;
        let Some(k) = (0..self.candidates).find(|&k| id_at(first + k) == u64::from(campaign.0))
        else {
            return Outcome::WrongDecision;
        };
        let micros = price.micros();
        if micros > self.max_bid_of(index, r, k) || micros < self.floor_of(index, r) {
            return Outcome::WrongDecision;
        }
        // 53 random bits as a fraction in [0, 1).
        let draw = (self.hash(index, r, NOTICE_LANE) >> 11) as f64 / (1u64 << 53) as f64;
        if draw < self.notice_fraction {
            self.notices.push(Notice {
                kind: NoticeKind::Billing,
                key: ImpKey {
                    auction_id: batch_id,
                    imp_id: r as u32,
                },
                campaign,
                price,
            });
        }
        Outcome::Bid
    }

    /// Appends the NOTICES frame the last DECISIONS frame called for, if any; `ids` get the
    /// notices' auction ids.
    pub fn encode_notices(&mut self, out: &mut Vec<u8>, ids: &mut Vec<u64>) -> bool {
        if self.notices.is_empty() {
            return false;
        }
        ids.clear();
        ids.extend(self.notices.iter().map(|n| n.key.auction_id));
        let start = out.len();
        encode_notices::<Usd>(out, &self.notices);
        out[start + NOTICES_CURRENCY_AT..][..3].copy_from_slice(&self.currency);
        self.notices.clear();
        true
    }

    /// Decodes the ACKS frame answering `n` notices.
    pub fn decode_acks(&mut self, input: &[u8], n: usize) -> Result<Decoded, Fault> {
        let Some((reply, consumed)) = self.reply(input)? else {
            return Ok(Decoded::Incomplete);
        };
        let mut tally = Tally::default();
        match reply {
            Reply::Acks(statuses) if statuses.len() == n => {
                for status in statuses {
                    tally.add(ack(status));
                }
            }
            Reply::Acks(_) => tally.add(Outcome::WrongBatch),
            _ => tally.add(Outcome::UnexpectedReply),
        }
        Ok(Decoded::Done { consumed, tally })
    }
}

fn no_bid(status: Status) -> Outcome {
    match status {
        Status::MalformedTruncated
        | Status::MalformedTrailing
        | Status::MalformedHour
        | Status::MalformedDevice
        | Status::MalformedGeo
        | Status::MalformedTooManyCandidates => Outcome::NoBidMalformed,
        Status::NoCandidates => Outcome::NoBidNoCandidates,
        Status::UnknownCampaign => Outcome::NoBidUnknownCampaign,
        Status::FlightInactive => Outcome::NoBidFlightInactive,
        Status::NotTargeted => Outcome::NoBidNotTargeted,
        Status::BelowFloor => Outcome::NoBidBelowFloor,
        Status::Paced => Outcome::NoBidPaced,
        Status::BudgetExhausted => Outcome::NoBidBudgetExhausted,
        Status::BudgetUnavailable => Outcome::NoBidBudgetUnavailable,
        Status::Expired => Outcome::NoBidExpired,
        Status::DuplicateImpression => Outcome::NoBidDuplicateImpression,
        Status::Overloaded => Outcome::NoBidOverloaded,
    }
}

fn ack(status: NoticeStatus) -> Outcome {
    match status {
        NoticeStatus::Applied => Outcome::AckApplied,
        NoticeStatus::Duplicate => Outcome::AckDuplicate,
        NoticeStatus::Unknown => Outcome::AckUnknown,
        NoticeStatus::LateBilled => Outcome::AckLateBilled,
        NoticeStatus::Forwarded => Outcome::AckForwarded,
        NoticeStatus::Refused => Outcome::AckRefused,
        // The load generator's notices name the campaign that bid, in a known kind.
        NoticeStatus::CampaignMismatch | NoticeStatus::Malformed => Outcome::AckRejected,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rand::SeedableRng;
    use tern_pacer_proto::gateway::{decode_frame, encode_acks, DecisionsWriter, Frame};
    use tern_pacer_proto::money::Eur;

    use super::*;
    use crate::config::{IdRange, PacerWorkload, Protocol};

    fn config(notices: f64) -> Config {
        Config {
            protocol: Protocol::Pacer,
            seed: 7,
            pacer: PacerWorkload {
                batch: 4,
                candidates: 3,
                campaigns: IdRange {
                    first: 11,
                    last: 15,
                },
                currency: "EUR".to_string(),
                notices,
                ..PacerWorkload::default()
            },
            ..Config::default()
        }
    }

    /// A codec and one batch it drew and encoded.
    fn batch(notices: f64) -> (PacerCodec, Vec<u64>, Vec<u8>) {
        let config = config(notices);
        let mut codec = PacerCodec::new(&config, 0);
        let mut keys = KeyChooser::new(&config, 0).unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut ids = Vec::new();
        codec.draw(&mut rng, &mut keys, &mut ids);
        let mut out = Vec::new();
        codec.encode_bids(&mut out, &ids);
        (codec, ids, out)
    }

    fn done(decoded: Decoded) -> (usize, Tally) {
        match decoded {
            Decoded::Done { consumed, tally } => (consumed, tally),
            Decoded::Incomplete => panic!("incomplete"),
        }
    }

    #[test]
    fn batches_are_frames_the_pacer_reads() {
        let (codec, ids, frame) = batch(0.0);
        assert_eq!(ids.len(), 1 + 4 * 3);
        let Decode::Frame {
            request: Frame::Bids(bids),
            consumed,
        } = decode_frame::<Eur>(&frame, &Limits::default())
        else {
            panic!("not a BIDS frame in EUR");
        };
        assert_eq!(
            (consumed, bids.batch_id, bids.len()),
            (frame.len(), ids[0], 4)
        );
        let index = ids[0] & INDEX_MASK;
        for (r, request) in bids.requests().enumerate() {
            let request = request.unwrap();
            assert_eq!(request.header.key.auction_id, ids[0]);
            assert_eq!(request.header.key.imp_id, r as u32);
            assert!(request.header.deadline_ms > unix_ms());
            let floor = request.header.floor.micros();
            assert!((100_000..=500_000).contains(&floor));
            assert_eq!(floor, codec.floor_of(index, r));
            let campaigns: Vec<u64> = request
                .candidates
                .map(|c| {
                    assert!((1_000_000..=5_000_000).contains(&c.max_bid.micros()));
                    u64::from(c.campaign.0)
                })
                .collect();
            assert_eq!(campaigns, ids[1 + r * 3..][..3]);
            let mut distinct = campaigns.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), 3, "{campaigns:?}");
            assert!(campaigns.iter().all(|c| (11..=15).contains(c)));
        }
        // The same seed draws the same stream; batch ids differ between runs only in their tag.
        let (_, again, _) = batch(0.0);
        assert_eq!(again[0] & INDEX_MASK, ids[0] & INDEX_MASK);
        assert_eq!(again[1..], ids[1..]);
    }

    #[test]
    fn decisions_are_checked_against_their_request() {
        let (mut codec, ids, _) = batch(0.0);
        let index = ids[0] & INDEX_MASK;
        let bid = |r: usize, k: usize, price: u64| Decision::<Usd>::Bid {
            campaign: CampaignId(ids[1 + r * 3 + k] as u32),
            price: Cpm::from_micros(price),
        };
        let decisions = [
            bid(0, 1, codec.max_bid_of(index, 0, 1)),
            bid(1, 0, codec.max_bid_of(index, 1, 0) + 1),
            bid(2, 0, codec.floor_of(index, 2) - 1),
            Decision::NoBid(Status::Paced),
        ];
        let mut reply = Vec::new();
        let mut writer = DecisionsWriter::begin(&mut reply, ids[0]);
        for d in decisions {
            writer.push(d);
        }
        writer.finish();
        for cut in 0..reply.len() {
            let partial = codec.decode_decisions(&reply[..cut], |i| ids[i]);
            assert_eq!(partial.unwrap(), Decoded::Incomplete);
        }
        let (consumed, tally) = done(codec.decode_decisions(&reply, |i| ids[i]).unwrap());
        assert_eq!(consumed, reply.len());
        assert_eq!(tally.get(Outcome::Bid), 1);
        assert_eq!(tally.get(Outcome::WrongDecision), 2);
        assert_eq!(tally.get(Outcome::NoBidPaced), 1);

        // A campaign that was not a candidate of its request.
        let outsider = (11..=15).find(|c| !ids[1..4].contains(c)).unwrap();
        let mut reply = Vec::new();
        let mut writer = DecisionsWriter::begin(&mut reply, ids[0]);
        writer.push(Decision::<Usd>::Bid {
            campaign: CampaignId(outsider as u32),
            price: Cpm::from_micros(codec.floor_of(index, 0)),
        });
        for _ in 1..4 {
            writer.push(Decision::<Usd>::NoBid(Status::BudgetExhausted));
        }
        writer.finish();
        let (_, tally) = done(codec.decode_decisions(&reply, |i| ids[i]).unwrap());
        assert_eq!(tally.get(Outcome::WrongDecision), 1);
        assert_eq!(tally.get(Outcome::NoBidBudgetExhausted), 3);

        // Another batch's reply, and a reply one decision short.
        for (batch_id, count) in [(ids[0] + 1, 4), (ids[0], 3)] {
            let mut reply = Vec::new();
            let mut writer = DecisionsWriter::begin(&mut reply, batch_id);
            for _ in 0..count {
                writer.push(Decision::<Usd>::NoBid(Status::Paced));
            }
            writer.finish();
            let (_, tally) = done(codec.decode_decisions(&reply, |i| ids[i]).unwrap());
            assert_eq!(
                (
                    tally.get(Outcome::WrongBatch),
                    tally.get(Outcome::NoBidPaced)
                ),
                (1, 0)
            );
        }

        // The pacer's ERROR frame and bytes of another protocol end the connection.
        let fault = codec
            .decode_decisions(
                tern_pacer_proto::gateway::FrameError::BadMagic.frame(),
                |i| ids[i],
            )
            .unwrap_err();
        assert_eq!(fault.outcome, Outcome::ServerError);
        assert!(fault.reason.contains("bad magic"), "{fault}");
        let fault = codec.decode_decisions(b"END\r\n", |i| ids[i]).unwrap_err();
        assert_eq!(fault.outcome, Outcome::ProtocolError);
    }

    #[test]
    fn bids_get_billing_notices_the_pacer_reads() {
        let (mut codec, ids, _) = batch(1.0);
        let index = ids[0] & INDEX_MASK;
        let prices: Vec<u64> = (0..2).map(|r| codec.max_bid_of(index, r, 2)).collect();
        let mut reply = Vec::new();
        let mut writer = DecisionsWriter::begin(&mut reply, ids[0]);
        for (r, price) in prices.iter().enumerate() {
            writer.push(Decision::<Usd>::Bid {
                campaign: CampaignId(ids[1 + r * 3 + 2] as u32),
                price: Cpm::from_micros(*price),
            });
        }
        writer.push(Decision::<Usd>::NoBid(Status::Paced));
        writer.push(Decision::<Usd>::NoBid(Status::Expired));
        writer.finish();
        let (_, tally) = done(codec.decode_decisions(&reply, |i| ids[i]).unwrap());
        assert_eq!(tally.get(Outcome::Bid), 2);
        let (mut frame, mut notice_ids) = (Vec::new(), Vec::new());
        assert!(codec.encode_notices(&mut frame, &mut notice_ids));
        assert!(
            !codec.encode_notices(&mut frame.clone(), &mut notice_ids),
            "sent once"
        );
        let Decode::Frame {
            request: Frame::Notices(notices),
            consumed,
        } = decode_frame::<Eur>(&frame, &Limits::default())
        else {
            panic!("not a NOTICES frame in EUR");
        };
        assert_eq!(consumed, frame.len());
        let notices: Vec<_> = notices.notices().map(Result::unwrap).collect();
        assert_eq!(notices.len(), 2);
        for (r, n) in notices.iter().enumerate() {
            assert_eq!(n.kind, NoticeKind::Billing);
            assert_eq!(
                n.key,
                ImpKey {
                    auction_id: ids[0],
                    imp_id: r as u32
                }
            );
            assert_eq!(u64::from(n.campaign.0), ids[1 + r * 3 + 2]);
            assert_eq!(n.price.micros(), prices[r]);
        }
        assert_eq!(notice_ids, [ids[0], ids[0]]);
        let mut acks = Vec::new();
        encode_acks(
            &mut acks,
            &[NoticeStatus::Applied, NoticeStatus::CampaignMismatch],
        );
        let (_, tally) = done(codec.decode_acks(&acks, 2).unwrap());
        assert_eq!(
            (
                tally.get(Outcome::AckApplied),
                tally.get(Outcome::AckRejected)
            ),
            (1, 1)
        );
        let (_, tally) = done(codec.decode_acks(&acks, 3).unwrap());
        assert_eq!(tally.get(Outcome::WrongBatch), 1);
    }

    proptest! {
        #[test]
        fn any_bytes_decode_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let (mut codec, ids, _) = batch(1.0);
            let _ = codec.decode_decisions(&bytes, |i| ids[i]);
            let _ = codec.decode_acks(&bytes, 3);
            // A valid frame header in front of arbitrary bytes, too.
            let mut framed = b"TP\x01\x02".to_vec();
            framed.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            framed.extend_from_slice(&bytes);
            let _ = codec.decode_decisions(&framed, |i| ids[i]);
            let _ = codec.decode_acks(&framed, 3);
        }
    }
}
