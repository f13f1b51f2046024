//! The gateway protocol, version 1: length-prefixed binary frames over TCP between a bidding gateway and a
//! pacer. Pure code: bytes in, frames out, no I/O.
//!
//! # Frames
//! Every integer is little-endian. Every frame starts with an 8-byte header:
//!
//! | bytes | field     | value                                                        |
//! |-------|-----------|--------------------------------------------------------------|
//! | 0..2  | magic     | `b"TP"`                                                      |
//! | 2     | version   | `1` ([`VERSION`])                                            |
//! | 3     | kind      | one of [`Kind`]                                              |
//! | 4..8  | body_len  | u32, bytes of body after the header (at most the configured [`Limits::max_body`]) |
//!
//! Kinds and bodies (`→` gateway to pacer, `←` pacer to gateway):
//!
//! * **1 BIDS →** `batch_id u64, currency [u8;3] (ISO 4217), count u16`, then `count` requests, each
//!   `len u16` followed by `len` bytes: `auction_id u64, imp_id u32, floor_cpm u64, deadline_ms u64 (Unix
//!   time), hour u8 (0-23, the user's local hour), device u8 (0 unknown, 1 desktop, 2 phone, 3 tablet, 4 TV),
//!   geo [u8;2] (ISO 3166 country, `A-Z`, or `b"--"` for unknown), site_id u64 (site or app), n u8`, then `n`
//!   candidates `campaign_id u32, max_bid_cpm u64` (41 + 12n bytes).
//!   Prices are CPM in micro-units of the batch's currency.
//! * **2 DECISIONS ←** `batch_id u64, count u16`, then one 13-byte decision per request, in request order:
//!   `status u8, campaign_id u32, price_cpm u64`. Status 0 is a bid (campaign and price set); any other status
//!   is a no-bid [`Status`] code, with campaign and price zero.
//! * **3 NOTICES →** `currency [u8;3], count u16`, then `count` 25-byte notices: `kind u8 (1 win, 2 billing,
//!   3 loss), auction_id u64, imp_id u32, campaign_id u32, price_cpm u64` (the clearing price; 0 for a loss).
//! * **4 ACKS ←** `count u16`, then one [`NoticeStatus`] byte per notice, in order. Send a notice on the
//!   connection that carried its bid to get its final status at once; on another connection the pacer
//!   forwards it to the loop that holds the reservation and answers `Forwarded`.
//! * **5 ERROR ←** `code u8, message (UTF-8, the rest of the body)`; the pacer closes the connection after it.
//!
//! # Errors
//! A request whose own bytes are wrong (too short, trailing bytes, hour 24, unknown device, bad geo, too many
//! candidates) gets a no-bid with a `Malformed*` status, and the rest of the batch is decided normally: the
//! per-request length prefix keeps the batch in step. A notice with an unknown kind is answered
//! [`NoticeStatus::Malformed`]. A frame whose structure is wrong (bad magic, unknown version or kind, a body
//! over the limit, lengths that do not add up to the body, a currency other than the pacer's, too many
//! requests) is a connection-level error: the pacer sends an ERROR frame and closes that connection only.

use tern_wire::Decode;

use crate::money::{Cpm, Currency};

pub const MAGIC: [u8; 2] = *b"TP";
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 8;
/// Fixed part of one bid request, before its candidates.
pub const REQUEST_FIXED_LEN: usize = 41;
pub const CANDIDATE_LEN: usize = 12;
pub const DECISION_LEN: usize = 13;
pub const NOTICE_LEN: usize = 25;

/// Frame kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Bids = 1,
    Decisions = 2,
    Notices = 3,
    Acks = 4,
    Error = 5,
}

/// Bounds on what a peer may send; anything over them is a connection-level error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame body, in bytes.
    pub max_body: u32,
    /// Most bid requests in one BIDS frame.
    pub max_requests: u16,
    /// Most notices in one NOTICES frame.
    pub max_notices: u16,
    /// Most candidate campaigns in one request (more is a malformed request, not a frame error).
    pub max_candidates: u8,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body: 1 << 20,
            max_requests: 1024,
            max_notices: 4096,
            max_candidates: 32,
        }
    }
}

/// A campaign's id, as the gateway and the configuration know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CampaignId(pub u32);

/// The device class of the impression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Device {
    Unknown = 0,
    Desktop = 1,
    Phone = 2,
    Tablet = 3,
    Tv = 4,
}

impl Device {
    pub const ALL: [Device; 5] = [
        Device::Unknown,
        Device::Desktop,
        Device::Phone,
        Device::Tablet,
        Device::Tv,
    ];
    fn from_u8(b: u8) -> Option<Device> {
        Device::ALL.get(usize::from(b)).copied()
    }
}

/// A country code (`A-Z` twice), or [`Geo::UNKNOWN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Geo(pub [u8; 2]);

impl Geo {
    pub const UNKNOWN: Geo = Geo(*b"--");
    fn is_valid(self) -> bool {
        self == Geo::UNKNOWN || self.0.iter().all(u8::is_ascii_uppercase)
    }
}

/// Identifies one impression opportunity: the key of a reservation and of the notices about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ImpKey {
    pub auction_id: u64,
    pub imp_id: u32,
}

/// The fixed fields of a bid request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader<C> {
    pub key: ImpKey,
    pub floor: Cpm<C>,
    /// Unix time in milliseconds after which an answer is useless.
    pub deadline_ms: u64,
    pub hour: u8,
    pub device: Device,
    pub geo: Geo,
    pub site_id: u64,
}

/// A campaign the gateway matched, with the most it may bid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<C> {
    pub campaign: CampaignId,
    pub max_bid: Cpm<C>,
}

/// One decoded bid request: the fixed fields and its (validated) candidates, borrowed from the frame.
#[derive(Debug, Clone, Copy)]
pub struct BidRequest<'a, C> {
    pub header: RequestHeader<C>,
    pub candidates: Candidates<'a, C>,
}

/// The candidates of a request, decoded on iteration (no allocation on the hot path).
pub struct Candidates<'a, C> {
    bytes: &'a [u8],
    _currency: std::marker::PhantomData<C>,
}

impl<C: std::fmt::Debug> std::fmt::Debug for Candidates<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(*self).finish()
    }
}

impl<'a, C> Candidates<'a, C> {
    /// Candidates over bytes laid out as on the wire (12 bytes each; a trailing partial one is ignored).
    pub fn from_bytes(bytes: &'a [u8]) -> Self {
        Candidates {
            bytes: &bytes[..bytes.len() / CANDIDATE_LEN * CANDIDATE_LEN],
            _currency: std::marker::PhantomData,
        }
    }
    pub fn len(&self) -> usize {
        self.bytes.len() / CANDIDATE_LEN
    }
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl<C> Iterator for Candidates<'_, C> {
    type Item = Candidate<C>;
    fn next(&mut self) -> Option<Candidate<C>> {
        let (one, rest) = self.bytes.split_first_chunk::<CANDIDATE_LEN>()?;
        self.bytes = rest;
        let mut r = Reader(one);
        Some(Candidate {
            campaign: CampaignId(r.u32()?),
            max_bid: Cpm::from_micros(r.u64()?),
        })
    }
}

/// The answer to one request: status 0 and a campaign and price, or a no-bid reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision<C> {
    Bid { campaign: CampaignId, price: Cpm<C> },
    NoBid(Status),
}

/// The names of the decisions, as [`Decision::index`] numbers them: a bid, then every status of
/// [`Status::ALL`] by its name (metrics label them so, and the OpenRTB front's no-bid header).
pub const DECISION_NAMES: [&str; Status::ALL.len() + 1] = [
    "Bid",
    "MalformedTruncated",
    "MalformedTrailing",
    "MalformedHour",
    "MalformedDevice",
    "MalformedGeo",
    "MalformedTooManyCandidates",
    "NoCandidates",
    "UnknownCampaign",
    "FlightInactive",
    "NotTargeted",
    "BelowFloor",
    "Paced",
    "BudgetExhausted",
    "BudgetUnavailable",
    "Expired",
    "DuplicateImpression",
    "Overloaded",
];

impl<C> Decision<C> {
    /// Its place in [`DECISION_NAMES`].
    pub fn index(&self) -> usize {
        match self {
            Decision::Bid { .. } => 0,
            Decision::NoBid(status) => 1 + status.index(),
        }
    }
}

/// Why a request got no bid. Codes 1-15 are malformed requests, 16 and up are decisions. When several
/// candidates fail for different reasons, the pacer reports the one that got furthest (the highest code
/// below [`Status::Expired`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Status {
    /// The request is shorter than its fixed fields or its candidate count says.
    MalformedTruncated = 1,
    /// The request has bytes after its last candidate.
    MalformedTrailing = 2,
    MalformedHour = 3,
    MalformedDevice = 4,
    MalformedGeo = 5,
    MalformedTooManyCandidates = 6,
    /// The gateway matched no campaign.
    NoCandidates = 16,
    /// No candidate is in the current configuration.
    UnknownCampaign = 17,
    /// No candidate's flight is running.
    FlightInactive = 18,
    /// No candidate targets this hour, geo, device or site.
    NotTargeted = 19,
    /// No candidate may bid the floor.
    BelowFloor = 20,
    /// The pacing strategy held every candidate back.
    Paced = 21,
    /// Every candidate that would bid has no budget left on this loop.
    BudgetExhausted = 22,
    /// Every candidate that would bid has no budget on this node because the node's budget source (the
    /// cluster's Redis) has not answered for most of a lease: not the campaigns' budgets, which may be whole.
    BudgetUnavailable = 23,
    /// The request arrived after its deadline.
    Expired = 40,
    /// A request for the same impression is already in flight.
    DuplicateImpression = 41,
    /// The server refused the work (overload); the batch was not decided.
    Overloaded = 42,
}

impl Status {
    pub const ALL: [Status; 17] = [
        Status::MalformedTruncated,
        Status::MalformedTrailing,
        Status::MalformedHour,
        Status::MalformedDevice,
        Status::MalformedGeo,
        Status::MalformedTooManyCandidates,
        Status::NoCandidates,
        Status::UnknownCampaign,
        Status::FlightInactive,
        Status::NotTargeted,
        Status::BelowFloor,
        Status::Paced,
        Status::BudgetExhausted,
        Status::BudgetUnavailable,
        Status::Expired,
        Status::DuplicateImpression,
        Status::Overloaded,
    ];
    pub fn from_u8(b: u8) -> Option<Status> {
        Status::ALL.into_iter().find(|s| *s as u8 == b)
    }
    /// Its place in [`Status::ALL`].
    pub fn index(self) -> usize {
        Status::ALL.iter().position(|&s| s == self).unwrap_or(0)
    }
    pub fn is_malformed(self) -> bool {
        (self as u8) < 16
    }
    /// Its name, as metrics label it and the OpenRTB front's no-bid header gives it (`BudgetExhausted`).
    pub fn name(self) -> &'static str {
        DECISION_NAMES[1 + self.index()]
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a notice says happened to an impression the pacer bid on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NoticeKind {
    Win = 1,
    Billing = 2,
    Loss = 3,
}

/// One notice. For win and billing, `price` is the clearing price; for a loss it is zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notice<C> {
    pub kind: NoticeKind,
    pub key: ImpKey,
    pub campaign: CampaignId,
    pub price: Cpm<C>,
}

/// The pacer's answer to one notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NoticeStatus {
    /// The notice changed the ledger.
    Applied = 0,
    /// The same notice (or one it implies) was already applied: nothing changed.
    Duplicate = 1,
    /// No reservation is known for this impression (never made here, or forgotten long ago): nothing changed.
    Unknown = 2,
    /// The notice names another campaign than the reservation: nothing changed.
    CampaignMismatch = 3,
    /// A billing notice for a reservation that had already been released (loss or timeout): the spend was
    /// counted, because the exchange bills it anyway.
    LateBilled = 4,
    /// An unknown notice kind.
    Malformed = 5,
    /// Not known on the loop that read it: handed to the coordinator, which applies it on the loop holding
    /// the reservation at that loop's next sync. (Send notices on the connection that carried the bid to get
    /// a final answer at once.)
    Forwarded = 6,
    /// The server was overloaded and did not apply it: send it again.
    Refused = 7,
}

impl NoticeStatus {
    pub const ALL: [NoticeStatus; 8] = [
        NoticeStatus::Applied,
        NoticeStatus::Duplicate,
        NoticeStatus::Unknown,
        NoticeStatus::CampaignMismatch,
        NoticeStatus::LateBilled,
        NoticeStatus::Malformed,
        NoticeStatus::Forwarded,
        NoticeStatus::Refused,
    ];
    pub fn from_u8(b: u8) -> Option<NoticeStatus> {
        NoticeStatus::ALL.get(usize::from(b)).copied()
    }
    /// Its name, as the OpenRTB front's notice answers give it (`{"status":"Applied"}`).
    pub fn name(self) -> &'static str {
        match self {
            NoticeStatus::Applied => "Applied",
            NoticeStatus::Duplicate => "Duplicate",
            NoticeStatus::Unknown => "Unknown",
            NoticeStatus::CampaignMismatch => "CampaignMismatch",
            NoticeStatus::LateBilled => "LateBilled",
            NoticeStatus::Malformed => "Malformed",
            NoticeStatus::Forwarded => "Forwarded",
            NoticeStatus::Refused => "Refused",
        }
    }
}

impl std::fmt::Display for NoticeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A frame from the gateway, borrowing from the input. Its entries are validated one by one on iteration.
#[derive(Debug, Clone, Copy)]
pub enum Frame<'a, C> {
    Bids(BidBatch<'a, C>),
    Notices(NoticeBatch<'a, C>),
}

/// A BIDS frame whose framing has been checked: `count` length-prefixed requests filling the body exactly.
pub struct BidBatch<'a, C> {
    pub batch_id: u64,
    count: u16,
    requests: &'a [u8],
    max_candidates: u8,
    _currency: std::marker::PhantomData<C>,
}

impl<C> std::fmt::Debug for BidBatch<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BidBatch")
            .field("batch_id", &self.batch_id)
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

impl<'a, C> BidBatch<'a, C> {
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// The requests in order, each decoded or rejected with its reason.
    pub fn requests(&self) -> impl Iterator<Item = Result<BidRequest<'a, C>, Status>> + 'a
    where
        C: 'a,
    {
        let max_candidates = self.max_candidates;
        let mut rest = self.requests;
        (0..self.count).map_while(move |_| {
            let mut r = Reader(rest);
            let len = usize::from(r.u16()?);
            let (one, after) = r.0.split_at_checked(len)?;
            rest = after;
            Some(decode_request(one, max_candidates))
        })
    }
}

/// A NOTICES frame whose framing has been checked.
pub struct NoticeBatch<'a, C> {
    notices: &'a [u8],
    _currency: std::marker::PhantomData<C>,
}

impl<C> std::fmt::Debug for NoticeBatch<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoticeBatch")
            .field("count", &self.len())
            .finish()
    }
}

impl<'a, C> NoticeBatch<'a, C> {
    pub fn len(&self) -> usize {
        self.notices.len() / NOTICE_LEN
    }
    pub fn is_empty(&self) -> bool {
        self.notices.is_empty()
    }
    /// The notices in order; `Err(())` for one with an unknown kind.
    pub fn notices(&self) -> impl Iterator<Item = Result<Notice<C>, ()>> + 'a
    where
        C: 'a,
    {
        self.notices
            .chunks_exact(NOTICE_LEN)
            .map(|bytes| decode_notice(bytes).ok_or(()))
    }
}

// Hand-written: these borrow bytes and only mark the currency, so they are `Copy` whatever `C` is.
macro_rules! copy_without_bounds {
    ($($ty:ident),*) => {$(
        impl<C> Clone for $ty<'_, C> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<C> Copy for $ty<'_, C> {}
    )*};
}
copy_without_bounds!(Candidates, BidBatch, NoticeBatch);

/// Connection-level errors, each with its ready-made ERROR frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameError {
    BadMagic = 1,
    UnsupportedVersion = 2,
    UnexpectedKind = 3,
    TooLarge = 4,
    BadLengths = 5,
    CurrencyMismatch = 6,
    TooManyEntries = 7,
}

macro_rules! error_frames {
    ($($variant:ident => $msg:literal),* $(,)?) => {
        impl FrameError {
            /// The ERROR frame sent before closing the connection.
            pub fn frame(self) -> &'static [u8] {
                match self {$(
                    FrameError::$variant => {
                        const BODY: &[u8] = $msg.as_bytes();
                        const FRAME: [u8; HEADER_LEN + 1 + BODY.len()] =
                            error_frame(FrameError::$variant as u8, BODY);
                        &FRAME
                    }
                )*}
            }
            pub fn message(self) -> &'static str {
                match self {$(FrameError::$variant => $msg,)*}
            }
        }
    };
}

error_frames!(
    BadMagic => "bad magic",
    UnsupportedVersion => "unsupported protocol version",
    UnexpectedKind => "unexpected frame kind",
    TooLarge => "frame body over the limit",
    BadLengths => "entry lengths do not match the frame body",
    CurrencyMismatch => "currency is not the pacer's",
    TooManyEntries => "too many entries in one frame",
);

const fn error_frame<const N: usize>(code: u8, message: &[u8]) -> [u8; N] {
    let mut frame = [0u8; N];
    let body_len = (N - HEADER_LEN) as u32;
    let len = body_len.to_le_bytes();
    let header = [
        MAGIC[0],
        MAGIC[1],
        VERSION,
        Kind::Error as u8,
        len[0],
        len[1],
        len[2],
        len[3],
    ];
    let mut i = 0;
    while i < HEADER_LEN {
        frame[i] = header[i];
        i += 1;
    }
    frame[HEADER_LEN] = code;
    let mut j = 0;
    while j < message.len() {
        frame[HEADER_LEN + 1 + j] = message[j];
        j += 1;
    }
    frame
}

/// A little-endian cursor; every read is checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|[b]| b)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
}

/// Parses the header at the front of `input`: the frame kind and the whole frame's length, or what to do.
fn frame_bounds(input: &[u8], limits: &Limits) -> Result<Option<(u8, usize)>, FrameError> {
    // Check what has arrived of the header as soon as it arrives, so a peer speaking something else is
    // turned away without waiting for eight bytes.
    if input.iter().zip(MAGIC).any(|(a, b)| *a != b) {
        return Err(FrameError::BadMagic);
    }
    if input.len() > 2 && input[2] != VERSION {
        return Err(FrameError::UnsupportedVersion);
    }
    let Some(header) = input.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let body_len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if body_len > limits.max_body {
        return Err(FrameError::TooLarge);
    }
    Ok(Some((header[3], HEADER_LEN + body_len as usize)))
}

/// The whole frame at the front of `input` (its kind, body and length), or what to answer instead: wait for
/// more input, or close on a bad header.
fn split_frame<'a, R>(
    input: &'a [u8],
    limits: &Limits,
) -> Result<(u8, &'a [u8], usize), Decode<R>> {
    let (kind, frame_len) = match frame_bounds(input, limits) {
        Ok(Some(bounds)) => bounds,
        Ok(None) => {
            return Err(Decode::Incomplete {
                needed: Some(HEADER_LEN),
            })
        }
        Err(e) => {
            return Err(Decode::Close {
                reply: Some(e.frame()),
            })
        }
    };
    match input.get(HEADER_LEN..frame_len) {
        Some(body) => Ok((kind, body, frame_len)),
        None => Err(Decode::Incomplete {
            needed: Some(frame_len),
        }),
    }
}

/// Decodes the frame at the front of `input` as the pacer does (BIDS or NOTICES in currency `C`), in the
/// tern runtime's contract.
pub fn decode_frame<'a, C: Currency>(input: &'a [u8], limits: &Limits) -> Decode<Frame<'a, C>> {
    let (kind, body, frame_len) = match split_frame(input, limits) {
        Ok(frame) => frame,
        Err(not_yet) => return not_yet,
    };
    let frame = if kind == Kind::Bids as u8 {
        bids_body(body, limits).map(Frame::Bids)
    } else if kind == Kind::Notices as u8 {
        notices_body(body, limits).map(Frame::Notices)
    } else {
        Err(FrameError::UnexpectedKind)
    };
    match frame {
        Ok(request) => Decode::Frame {
            request,
            consumed: frame_len,
        },
        Err(e) => Decode::Close {
            reply: Some(e.frame()),
        },
    }
}

fn bids_body<'a, C: Currency>(
    body: &'a [u8],
    limits: &Limits,
) -> Result<BidBatch<'a, C>, FrameError> {
    let mut r = Reader(body);
    let batch_id = r.u64().ok_or(FrameError::BadLengths)?;
    let currency = r.take::<3>().ok_or(FrameError::BadLengths)?;
    let count = r.u16().ok_or(FrameError::BadLengths)?;
    if currency != C::CODE {
        return Err(FrameError::CurrencyMismatch);
    }
    if count > limits.max_requests {
        return Err(FrameError::TooManyEntries);
    }
    let requests = r.0;
    // Walk the length prefixes once, so that iteration later cannot go out of step.
    let mut walk = Reader(requests);
    for _ in 0..count {
        let len = walk.u16().ok_or(FrameError::BadLengths)?;
        walk.0 = walk
            .0
            .get(usize::from(len)..)
            .ok_or(FrameError::BadLengths)?;
    }
    if !walk.0.is_empty() {
        return Err(FrameError::BadLengths);
    }
    Ok(BidBatch {
        batch_id,
        count,
        requests,
        max_candidates: limits.max_candidates,
        _currency: std::marker::PhantomData,
    })
}

fn notices_body<'a, C: Currency>(
    body: &'a [u8],
    limits: &Limits,
) -> Result<NoticeBatch<'a, C>, FrameError> {
    let mut r = Reader(body);
    let currency = r.take::<3>().ok_or(FrameError::BadLengths)?;
    let count = r.u16().ok_or(FrameError::BadLengths)?;
    if currency != C::CODE {
        return Err(FrameError::CurrencyMismatch);
    }
    if count > limits.max_notices {
        return Err(FrameError::TooManyEntries);
    }
    if r.0.len() != usize::from(count) * NOTICE_LEN {
        return Err(FrameError::BadLengths);
    }
    Ok(NoticeBatch {
        notices: r.0,
        _currency: std::marker::PhantomData,
    })
}

fn decode_request<C>(bytes: &[u8], max_candidates: u8) -> Result<BidRequest<'_, C>, Status> {
    let mut r = Reader(bytes);
    let mut fixed = || -> Option<_> {
        Some((
            ImpKey {
                auction_id: r.u64()?,
                imp_id: r.u32()?,
            },
            r.u64()?,
            r.u64()?,
            r.u8()?,
            r.u8()?,
            Geo(r.take()?),
            r.u64()?,
            r.u8()?,
        ))
    };
    let (key, floor, deadline_ms, hour, device, geo, site_id, n) =
        fixed().ok_or(Status::MalformedTruncated)?;
    if n > max_candidates {
        return Err(Status::MalformedTooManyCandidates);
    }
    let candidates_len = usize::from(n) * CANDIDATE_LEN;
    let rest = &bytes[REQUEST_FIXED_LEN..];
    if rest.len() < candidates_len {
        return Err(Status::MalformedTruncated);
    }
    if rest.len() > candidates_len {
        return Err(Status::MalformedTrailing);
    }
    if hour > 23 {
        return Err(Status::MalformedHour);
    }
    let device = Device::from_u8(device).ok_or(Status::MalformedDevice)?;
    if !geo.is_valid() {
        return Err(Status::MalformedGeo);
    }
    Ok(BidRequest {
        header: RequestHeader {
            key,
            floor: Cpm::from_micros(floor),
            deadline_ms,
            hour,
            device,
            geo,
            site_id,
        },
        candidates: Candidates {
            bytes: rest,
            _currency: std::marker::PhantomData,
        },
    })
}

fn decode_notice<C>(bytes: &[u8]) -> Option<Notice<C>> {
    let mut r = Reader(bytes);
    let kind = match r.u8()? {
        1 => NoticeKind::Win,
        2 => NoticeKind::Billing,
        3 => NoticeKind::Loss,
        _ => return None,
    };
    Some(Notice {
        kind,
        key: ImpKey {
            auction_id: r.u64()?,
            imp_id: r.u32()?,
        },
        campaign: CampaignId(r.u32()?),
        price: Cpm::from_micros(r.u64()?),
    })
}

/// Builds one frame in `out`: the header is written first with a placeholder length, patched by `finish`.
pub struct FrameWriter<'o> {
    out: &'o mut Vec<u8>,
    start: usize,
}

impl<'o> FrameWriter<'o> {
    pub fn begin(out: &'o mut Vec<u8>, kind: Kind) -> Self {
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(kind as u8);
        out.extend_from_slice(&[0; 4]);
        FrameWriter { out, start }
    }
    pub fn body(&mut self) -> &mut Vec<u8> {
        self.out
    }
    /// Patches the body length into the header.
    pub fn finish(self) {
        let body_len = (self.out.len() - self.start - HEADER_LEN) as u32;
        self.out[self.start + 4..self.start + HEADER_LEN].copy_from_slice(&body_len.to_le_bytes());
    }
}

/// Appends one encoded bid request (length prefix included) to a BIDS body.
pub fn put_request<C>(
    body: &mut Vec<u8>,
    header: &RequestHeader<C>,
    candidates: impl ExactSizeIterator<Item = Candidate<C>>,
) {
    let n = candidates.len().min(usize::from(u8::MAX));
    let len = (REQUEST_FIXED_LEN + n * CANDIDATE_LEN) as u16;
    body.extend_from_slice(&len.to_le_bytes());
    body.extend_from_slice(&header.key.auction_id.to_le_bytes());
    body.extend_from_slice(&header.key.imp_id.to_le_bytes());
    body.extend_from_slice(&header.floor.micros().to_le_bytes());
    body.extend_from_slice(&header.deadline_ms.to_le_bytes());
    body.push(header.hour);
    body.push(header.device as u8);
    body.extend_from_slice(&header.geo.0);
    body.extend_from_slice(&header.site_id.to_le_bytes());
    body.push(n as u8);
    for c in candidates.take(n) {
        put_candidate(body, &c);
    }
}

fn put_candidate<C>(out: &mut Vec<u8>, candidate: &Candidate<C>) {
    out.extend_from_slice(&candidate.campaign.0.to_le_bytes());
    out.extend_from_slice(&candidate.max_bid.micros().to_le_bytes());
}

/// Replaces `out` with `candidates` in wire layout, for [`Candidates::from_bytes`].
pub fn candidates_to_bytes<C>(candidates: &[Candidate<C>], out: &mut Vec<u8>) {
    out.clear();
    for c in candidates {
        put_candidate(out, c);
    }
}

/// Encodes a whole BIDS frame (for gateways, load generators and tests). At most 255 candidates per request
/// and 65535 requests are encoded.
pub fn encode_bids<'r, C: Currency + 'r>(
    out: &mut Vec<u8>,
    batch_id: u64,
    requests: impl ExactSizeIterator<Item = (&'r RequestHeader<C>, &'r [Candidate<C>])>,
) {
    let mut w = FrameWriter::begin(out, Kind::Bids);
    let body = w.body();
    let count = requests.len().min(usize::from(u16::MAX));
    body.extend_from_slice(&batch_id.to_le_bytes());
    body.extend_from_slice(&C::CODE);
    body.extend_from_slice(&(count as u16).to_le_bytes());
    for (header, candidates) in requests.take(count) {
        put_request(body, header, candidates.iter().copied());
    }
    w.finish();
}

/// Writes DECISIONS frames one decision at a time.
pub struct DecisionsWriter<'o> {
    frame: FrameWriter<'o>,
    count_at: usize,
    count: u16,
}

impl<'o> DecisionsWriter<'o> {
    pub fn begin(out: &'o mut Vec<u8>, batch_id: u64) -> Self {
        let mut frame = FrameWriter::begin(out, Kind::Decisions);
        let body = frame.body();
        body.extend_from_slice(&batch_id.to_le_bytes());
        let count_at = body.len();
        body.extend_from_slice(&[0; 2]);
        DecisionsWriter {
            frame,
            count_at,
            count: 0,
        }
    }
    pub fn push<C>(&mut self, decision: Decision<C>) {
        let (status, campaign, price) = match decision {
            Decision::Bid { campaign, price } => (0, campaign.0, price.micros()),
            Decision::NoBid(status) => (status as u8, 0, 0),
        };
        let body = self.frame.body();
        body.push(status);
        body.extend_from_slice(&campaign.to_le_bytes());
        body.extend_from_slice(&price.to_le_bytes());
        self.count += 1;
    }
    pub fn finish(mut self) {
        let at = self.count_at;
        self.frame.body()[at..at + 2].copy_from_slice(&self.count.to_le_bytes());
        self.frame.finish();
    }
}

/// Encodes a NOTICES frame.
pub fn encode_notices<C: Currency>(out: &mut Vec<u8>, notices: &[Notice<C>]) {
    let mut w = FrameWriter::begin(out, Kind::Notices);
    let body = w.body();
    let count = notices.len().min(usize::from(u16::MAX));
    body.extend_from_slice(&C::CODE);
    body.extend_from_slice(&(count as u16).to_le_bytes());
    for n in &notices[..count] {
        body.push(n.kind as u8);
        body.extend_from_slice(&n.key.auction_id.to_le_bytes());
        body.extend_from_slice(&n.key.imp_id.to_le_bytes());
        body.extend_from_slice(&n.campaign.0.to_le_bytes());
        body.extend_from_slice(&n.price.micros().to_le_bytes());
    }
    w.finish();
}

/// Encodes an ACKS frame.
pub fn encode_acks(out: &mut Vec<u8>, statuses: &[NoticeStatus]) {
    let mut w = FrameWriter::begin(out, Kind::Acks);
    let body = w.body();
    let count = statuses.len().min(usize::from(u16::MAX));
    body.extend_from_slice(&(count as u16).to_le_bytes());
    body.extend(statuses[..count].iter().map(|s| *s as u8));
    w.finish();
}

/// What a gateway reads back from the pacer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<C> {
    Decisions {
        batch_id: u64,
        decisions: Vec<Decision<C>>,
    },
    Acks(Vec<NoticeStatus>),
    Error {
        code: u8,
        message: String,
    },
}

/// Decodes a frame from the pacer (the gateway's side), in the same contract as [`decode_frame`]. It
/// allocates: it serves clients and tests, not the pacer's hot path.
pub fn decode_reply<C>(input: &[u8], limits: &Limits) -> Decode<Reply<C>> {
    let (kind, body, frame_len) = match split_frame(input, limits) {
        Ok(frame) => frame,
        Err(not_yet) => return not_yet,
    };
    let reply = match kind {
        k if k == Kind::Decisions as u8 => decisions_body(body),
        k if k == Kind::Acks as u8 => acks_body(body),
        k if k == Kind::Error as u8 => body.split_first().map(|(code, message)| Reply::Error {
            code: *code,
            message: String::from_utf8_lossy(message).into_owned(),
        }),
        _ => None,
    };
    match reply {
        Some(request) => Decode::Frame {
            request,
            consumed: frame_len,
        },
        None => Decode::Close {
            reply: Some(FrameError::BadLengths.frame()),
        },
    }
}

fn decisions_body<C>(body: &[u8]) -> Option<Reply<C>> {
    let mut r = Reader(body);
    let batch_id = r.u64()?;
    let count = usize::from(r.u16()?);
    if r.0.len() != count * DECISION_LEN {
        return None;
    }
    let decisions =
        r.0.chunks_exact(DECISION_LEN)
            .map(|d| {
                let mut r = Reader(d);
                let status = r.u8()?;
                let campaign = CampaignId(r.u32()?);
                let price = Cpm::from_micros(r.u64()?);
                if status == 0 {
                    Some(Decision::Bid { campaign, price })
                } else {
                    Status::from_u8(status).map(Decision::NoBid)
                }
            })
            .collect::<Option<Vec<_>>>()?;
    Some(Reply::Decisions {
        batch_id,
        decisions,
    })
}

fn acks_body<C>(body: &[u8]) -> Option<Reply<C>> {
    let mut r = Reader(body);
    let count = usize::from(r.u16()?);
    if r.0.len() != count {
        return None;
    }
    r.0.iter()
        .map(|b| NoticeStatus::from_u8(*b))
        .collect::<Option<Vec<_>>>()
        .map(Reply::Acks)
}

#[cfg(test)]
mod tests;
