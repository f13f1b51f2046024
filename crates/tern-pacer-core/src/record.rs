//! The records of a ledger's changes, which the ledger emits ([`crate::ledger::RecordSink`]) and the crash
//! journal stores and replays ([`crate::journal`]), and their codec. A record is `[payload length: u32
//! LE][CRC-32 of the payload: u32 LE][payload]`, the payload a one-byte tag and fixed little-endian fields.
//! A length of zero is the end of the written part of a segment (segments are preallocated with zeros); a
//! length out of range or a checksum that does not match is a torn or damaged record, and reading stops
//! there.

use crate::proto::{CampaignId, ImpKey, NoticeKind};

/// A campaign's settled spend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spend {
    pub spent: u64,
    pub disputed: u64,
}

/// Length and checksum before each payload.
pub const RECORD_HEADER: usize = 8;
/// The largest payload: a billed impression.
const MAX_PAYLOAD: usize = 1 + IMP_FIELDS + 16;
/// Room a writer keeps for one more record.
pub const MAX_RECORD: usize = RECORD_HEADER + MAX_PAYLOAD;
/// auction, imp, campaign, max, reserved_at, expires.
const IMP_FIELDS: usize = 8 + 4 + 4 + 8 + 8 + 8;

const TAG_RESERVED: u8 = 1;
const TAG_WON: u8 = 2;
const TAG_RELEASED: u8 = 3;
const TAG_BILLED: u8 = 4;
const TAG_FORWARDED: u8 = 5;
const TAG_SPENT: u8 = 6;

/// Where an impression's reservation stands, with what each state needs to be rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImpState {
    Reserved,
    /// A win notice shrank the reservation to `held`.
    Won {
        held: u64,
    },
    /// A loss notice released it (a TTL release is not written: the restored ledger derives it from
    /// `reserved_at_ms` and its TTL).
    Released,
    /// A billing notice settled it: `settled` counted as spend, `disputed` billed above the maximum. Both are
    /// zero in checkpoints, whose [`Record::Spent`] totals already hold them.
    Billed {
        settled: u64,
        disputed: u64,
    },
}

impl ImpState {
    /// States only move forward; a record for a later state supersedes an earlier one, whatever the order
    /// the records are read in.
    pub fn rank(self) -> u8 {
        match self {
            ImpState::Reserved => 0,
            ImpState::Won { .. } => 1,
            ImpState::Released => 2,
            ImpState::Billed { .. } => 3,
        }
    }
}

/// One impression's whole state after a ledger operation: each record replaces the previous one for its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImpRecord {
    pub key: ImpKey,
    pub campaign: CampaignId,
    /// The reserved maximum, per impression, in micro-units.
    pub max: u64,
    pub reserved_at_ms: u64,
    /// When the TTL of the ledger that wrote it ran out (for inspection: a restored ledger times the TTL
    /// from `reserved_at_ms` with its own configuration).
    pub expires_ms: u64,
    pub state: ImpState,
}

/// A notice that arrived on a loop not holding its reservation, which hands it to the coordinator for the
/// loop that does: written so a crash before that loop applies it does not lose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardedNotice {
    pub kind: NoticeKind,
    pub key: ImpKey,
    pub campaign: CampaignId,
    /// The notice's price per impression, in micro-units.
    pub price: u64,
    pub at_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    Imp(ImpRecord),
    Forwarded(ForwardedNotice),
    /// A checkpoint's settled totals for a campaign, covering impressions it may no longer list.
    Spent {
        campaign: CampaignId,
        spent: u64,
        disputed: u64,
    },
}

/// What [`decode`] found at the start of its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// A record and the bytes it took.
    Record(Record, usize),
    /// The end of what was written.
    End,
    /// A torn or damaged record: nothing after it can be trusted.
    Invalid,
}

struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }
    fn u8(&mut self, v: u8) {
        self.put(&[v]);
    }
    fn u32(&mut self, v: u32) {
        self.put(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.put(&v.to_le_bytes());
    }
    fn key(&mut self, key: ImpKey, campaign: CampaignId) {
        self.u64(key.auction_id);
        self.u32(key.imp_id);
        self.u32(campaign.0);
    }
}

/// Encodes `record` at the start of `out`, which must hold [`MAX_RECORD`] bytes, and returns its length.
pub fn encode(record: &Record, out: &mut [u8]) -> usize {
    let mut w = Writer {
        buf: &mut out[..MAX_RECORD],
        at: RECORD_HEADER,
    };
    match *record {
        Record::Imp(r) => {
            w.u8(match r.state {
                ImpState::Reserved => TAG_RESERVED,
                ImpState::Won { .. } => TAG_WON,
                ImpState::Released => TAG_RELEASED,
                ImpState::Billed { .. } => TAG_BILLED,
            });
            w.key(r.key, r.campaign);
            w.u64(r.max);
            w.u64(r.reserved_at_ms);
            w.u64(r.expires_ms);
            match r.state {
                ImpState::Won { held } => w.u64(held),
                ImpState::Billed { settled, disputed } => {
                    w.u64(settled);
                    w.u64(disputed);
                }
                ImpState::Reserved | ImpState::Released => {}
            }
        }
        Record::Forwarded(n) => {
            w.u8(TAG_FORWARDED);
            w.u8(n.kind as u8);
            w.key(n.key, n.campaign);
            w.u64(n.price);
            w.u64(n.at_ms);
        }
        Record::Spent {
            campaign,
            spent,
            disputed,
        } => {
            w.u8(TAG_SPENT);
            w.u32(campaign.0);
            w.u64(spent);
            w.u64(disputed);
        }
    }
    let end = w.at;
    let payload_len = end - RECORD_HEADER;
    let crc = crc32fast::hash(&w.buf[RECORD_HEADER..end]);
    w.buf[0..4].copy_from_slice(&(payload_len as u32).to_le_bytes());
    w.buf[4..8].copy_from_slice(&crc.to_le_bytes());
    end
}

/// Appends `record` to `out`.
pub fn encode_to_vec(record: &Record, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + MAX_RECORD, 0);
    let len = encode(record, &mut out[start..]);
    out.truncate(start + len);
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.buf.split_first_chunk::<N>()?;
        self.buf = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn key(&mut self) -> Option<(ImpKey, CampaignId)> {
        let auction_id = self.u64()?;
        let imp_id = self.u32()?;
        Some((ImpKey { auction_id, imp_id }, CampaignId(self.u32()?)))
    }
}

fn notice_kind(b: u8) -> Option<NoticeKind> {
    [NoticeKind::Win, NoticeKind::Billing, NoticeKind::Loss]
        .into_iter()
        .find(|k| *k as u8 == b)
}

fn decode_payload(payload: &[u8]) -> Option<Record> {
    let mut r = Reader { buf: payload };
    let record = match r.u8()? {
        tag @ TAG_RESERVED..=TAG_BILLED => {
            let (key, campaign) = r.key()?;
            let max = r.u64()?;
            let reserved_at_ms = r.u64()?;
            let expires_ms = r.u64()?;
            let state = match tag {
                TAG_RESERVED => ImpState::Reserved,
                TAG_WON => ImpState::Won { held: r.u64()? },
                TAG_RELEASED => ImpState::Released,
                _ => ImpState::Billed {
                    settled: r.u64()?,
                    disputed: r.u64()?,
                },
            };
            Record::Imp(ImpRecord {
                key,
                campaign,
                max,
                reserved_at_ms,
                expires_ms,
                state,
            })
        }
        TAG_FORWARDED => {
            let kind = notice_kind(r.u8()?)?;
            let (key, campaign) = r.key()?;
            Record::Forwarded(ForwardedNotice {
                kind,
                key,
                campaign,
                price: r.u64()?,
                at_ms: r.u64()?,
            })
        }
        TAG_SPENT => Record::Spent {
            campaign: CampaignId(r.u32()?),
            spent: r.u64()?,
            disputed: r.u64()?,
        },
        _ => return None,
    };
    // A payload longer than its tag's fields is as damaged as a short one.
    r.buf.is_empty().then_some(record)
}

/// Decodes the record at the start of `input`.
pub fn decode(input: &[u8]) -> Decoded {
    let Some((header, rest)) = input.split_first_chunk::<RECORD_HEADER>() else {
        // The writer keeps room for a whole record, so a short tail is only the zeros after the last one.
        return if input.iter().all(|b| *b == 0) {
            Decoded::End
        } else {
            Decoded::Invalid
        };
    };
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len == 0 {
        return if crc == 0 {
            Decoded::End
        } else {
            Decoded::Invalid
        };
    }
    if len > MAX_PAYLOAD || len > rest.len() {
        return Decoded::Invalid;
    }
    let payload = &rest[..len];
    if crc32fast::hash(payload) != crc {
        return Decoded::Invalid;
    }
    match decode_payload(payload) {
        Some(record) => Decoded::Record(record, RECORD_HEADER + len),
        None => Decoded::Invalid,
    }
}

/// The records of a segment or checkpoint body, in order, and whether reading stopped at a torn or damaged
/// record (rather than at the end of what was written).
pub fn decode_all(mut input: &[u8]) -> (Vec<Record>, bool) {
    let mut records = Vec::new();
    loop {
        match decode(input) {
            Decoded::Record(record, len) => {
                records.push(record);
                input = &input[len..];
            }
            Decoded::End => return (records, false),
            Decoded::Invalid => return (records, true),
        }
    }
}
