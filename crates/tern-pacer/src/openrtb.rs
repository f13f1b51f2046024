//! The OpenRTB 2.6 front: the subset of the BidRequest and BidResponse objects the pacer reads and writes,
//! and the HTTP routes that use them, deciding with the same code and ledger as the gateway protocol.
//!
//! # Routes (on the pacer's port, next to the gateway protocol)
//! - `POST /openrtb2/auction` with a BidRequest: a BidResponse (`200`), or `204 No Content` with the reason
//!   in an `X-Tern-No-Bid` header when nothing bids (including a valid request the pacer cannot take part in:
//!   `cur` without its currency, an exchange's own auction type), or `400` with a short reason for a request
//!   that is not a valid BidRequest (malformed JSON, a missing `id`, `at` 0 or 3-499, a repeated imp id).
//! - `GET /win`, `GET /billing`, `GET /loss` with `auction`, `imp`, `campaign`, `chk` and (win, billing)
//!   `price` query parameters: the `nurl`, `burl` and `lurl` of each bid carry them, with
//!   `price=${AUCTION_PRICE}` for the exchange to fill in with the clearing CPM. `200` with
//!   `{"status":"Applied"}` (or `Duplicate`, `LateBilled`, `Forwarded`...: the gateway protocol's notice
//!   statuses), `400` with a short reason for a notice that is refused (see "Notice URLs").
//!
//! # Notice URLs
//! An exchange fires a notice URL as the bid response gave it, substituting only `${AUCTION_PRICE}`; a
//! notice that differs in anything else was changed on the way (an operator replaying one by hand, a
//! broken macro expander, a truncated log line). Such a notice must not be applied to some other
//! impression, nor be answered as if it might be: each URL carries `chk`, a check value over the fields the
//! exchange does not change ([`notice_check`]: 8 hex digits of FNV-1a over `auction`, `imp` and `campaign`;
//! not `price`, which the exchange fills in). A notice is refused with `400` and a reason naming the
//! problem when `chk` is missing or does not match (`tern_pacer_openrtb_notices_refused_total` counts them
//! by reason, with those missing or mistyping another parameter): any one byte changed in `auction`, `imp`
//! or `campaign` (a typo of one ASCII character) is always caught, other changes all but 1 time in 4
//! billion. `chk` is a check against
//! mistakes, not a signature: it has no secret, so it proves nothing about who sent a notice. A notice with
//! a matching `chk` that this I/O loop does not know is forwarded to the others, as the gateway protocol's
//! notices are (answered `Forwarded`; `Unknown` with one loop). A notice without `chk` is refused too, not
//! applied unchecked: every notice URL the pacer writes carries it (no release of tern wrote one without),
//! so a notice without it was cut short or written by hand, and cannot be checked.
//!
//! # What is read
//! `id`; `imp[].id`, `imp[].bidfloor`, `imp[].bidfloorcur` (default `USD`, as in the spec); `at` (default 2);
//! `cur`; `tmax` (the deadline, from when the request was read); `device.devicetype` (AdCOM device types:
//! 1 mobile/tablet and 4 phone are our phone, 2 desktop, 3 connected TV and 7 set-top box our TV, 5 tablet,
//! others unknown); `device.geo.country` (ISO 3166-1 alpha-3, mapped to alpha-2 by a table of the countries
//! below, others `--`); `device.geo.utcoffset` (minutes; the user's local hour, UTC without it); `site.id` or
//! `app.id` (a decimal id is used as is, any other id by its 64-bit FNV-1a hash); the restrictions
//! [`ads`] checks (`bcat`, `cattax`, `badv`, `bapp`, `wseat`, `bseat`, each impression's `banner`, `video`,
//! `native` and `pmp`). Unknown fields are ignored, and `null` where a list or a floor may be is absent.
//!
//! Every campaign of the current snapshot whose targeting matches the request and which has a creative that
//! fits the impression, through a door its restrictions leave open ([`ads::fit`]), is a candidate at its
//! configured `max_cpm`; each impression is decided by [`LoopPacer::decide`], so reservations, budgets and
//! pacing are the gateway path's, and the bid carries the creative (`adm`, `mtype`, `crid`, `adomain`...). Auction and impression ids are strings in OpenRTB and integers in the
//! ledger: an impression's ledger key is the FNV-1a hash of the auction id (64 bits) and of the impression
//! id (32 bits), stable across builds so that a key means the same after a restart.
//!
//! # Prices
//! The ledger counts integer micro-units. OpenRTB prices are JSON numbers; they are read as their decimal
//! text (never through a float) and converted exactly: `1.23` is 1,230,000 micros, `2.5e-1` is 250,000.
//! Digits below a micro-unit round *up* (a floor of `0.0000001` is 1 micro), the conservative direction for
//! both floors (never bid under one) and billed prices (never count less than billed). Bid prices are
//! written as the exact decimal of their micros (`1.5`, `0.000001`). In a second-price auction (`at=2`) the
//! bid is the campaign's price and the clearing price comes back in the billing notice; in a first-price
//! auction (`at=1`) the same price is bid and is what the exchange bills.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use tern_http::{encode_query_value, write_response, HttpRequest, Response};
use tern_metrics::CounterFamily;
use tern_pacer_core::ads::{
    self, Creative, Deal, Filtered, Fit, Placement, Size, Slot, DEFAULT_CATTAX,
};
use tern_pacer_core::money::{Cpm, Currency};
use tern_pacer_core::pacer::LoopPacer;
use tern_pacer_core::proto::{
    BidRequest as GatewayRequest, CampaignId, Candidates, Decision, Device, Geo, ImpKey, Notice,
    NoticeKind, NoticeStatus, RequestHeader, CANDIDATE_LEN,
};
use tern_pacer_core::snapshot::{Campaign, Snapshot};

/// Why no campaign could bid on an impression before pacing: [`Filtered`]'s reasons in their order, then no
/// campaign targeting the user and place at all (the names the no-bid header gives).
const UNFIT_REASONS: [&str; Filtered::ALL.len() + 1] = [
    "NoCreative",
    "NoDeal",
    "SeatNotAllowed",
    "BelowDealFloor",
    "NoFittingCreative",
    "BlockedAttribute",
    "BlockedCategory",
    "BlockedAdvertiser",
    "BlockedApp",
    "BelowFloor",
    "NoCandidates",
];
const UNFIT_NOT_TARGETED: usize = Filtered::ALL.len();

static UNFIT: CounterFamily = CounterFamily::new(
    "tern_pacer_openrtb_unfit_total",
    "OpenRTB impressions no campaign could bid on before pacing, by the furthest any got: the request's \
     blocks (categories, advertisers, apps, attributes, seats), no fitting creative, deals, floors, or no \
     campaign targeting the user and place (NoCandidates)",
    "reason",
    &UNFIT_REASONS,
);

/// The no-bid reason of a request whose `cur` leaves out the pacer's currency.
const NO_BID_CURRENCY: &str = "CurrencyNotAccepted";
/// The no-bid reason of an impression whose floor is in another currency (the pacer converts none).
const NO_BID_FLOOR_CURRENCY: &str = "FloorInOtherCurrency";

/// The path bid requests are posted to.
pub const AUCTION_PATH: &str = "/openrtb2/auction";

/// A price read from or written as JSON decimal text, in micro-units (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Price(pub u64);

impl<'de> Deserialize<'de> for Price {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = <Box<RawValue>>::deserialize(deserializer)?;
        decimal_to_micros(raw.get())
            .map(Price)
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for Price {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        RawValue::from_string(micros_to_decimal(self.0))
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

/// Converts a non-negative decimal number (JSON number syntax) to micro-units, rounding up below one.
pub fn decimal_to_micros(text: &str) -> Result<u64, &'static str> {
    const NOT_A_PRICE: &str = "a price must be a non-negative decimal number";
    const TOO_LARGE: &str = "price too large";
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], &text[at + 1..]),
        None => (text, "0"),
    };
    let exponent = exponent.strip_prefix('+').unwrap_or(exponent);
    let (negative, exponent_digits) = match exponent.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, exponent),
    };
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if !all_digits(whole)
        || (mantissa.contains('.') && !all_digits(fraction))
        || !all_digits(exponent_digits)
    {
        return Err(NOT_A_PRICE);
    }
    // Long exponents saturate: far past any price either way.
    let magnitude: i64 = exponent_digits.parse().unwrap_or(i64::from(u32::MAX));
    let exponent = if negative { -magnitude } else { magnitude };
    let digits = whole.trim_start_matches('0').to_owned() + fraction;
    // The value is `digits` with the decimal point after `point` digits; micros move it six to the right.
    let point = whole.trim_start_matches('0').len() as i64 + exponent + 6;
    let integer_len = point.clamp(0, digits.len() as i64) as usize;
    let (integer, rest) = digits.split_at(integer_len);
    let integer = integer.trim_start_matches('0');
    let mut micros: u64 = 0;
    if !integer.is_empty() {
        // Zeros to append after the digits; u64 holds 20 digits at most.
        let padding = (point - integer_len as i64).max(0);
        if integer.len() as i64 + padding > 20 {
            return Err(TOO_LARGE);
        }
        for b in integer.bytes() {
            micros = micros
                .checked_mul(10)
                .and_then(|m| m.checked_add(u64::from(b - b'0')))
                .ok_or(TOO_LARGE)?;
        }
        for _ in 0..padding {
            micros = micros.checked_mul(10).ok_or(TOO_LARGE)?;
        }
    }
    if rest.bytes().any(|b| b != b'0') {
        micros = micros.checked_add(1).ok_or(TOO_LARGE)?;
    }
    Ok(micros)
}

/// The exact decimal of `micros` micro-units, without trailing zeros: `1.5`, `2`, `0.000001`.
pub fn micros_to_decimal(micros: u64) -> String {
    let (units, fraction) = (micros / 1_000_000, micros % 1_000_000);
    if fraction == 0 {
        return units.to_string();
    }
    let fraction = format!("{fraction:06}");
    format!("{units}.{}", fraction.trim_end_matches('0'))
}

fn second_price() -> u32 {
    2
}

/// A field that may be absent or `null` (some exchanges write `null` for an empty list or an unset floor):
/// either is its default.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// The BidRequest fields the pacer reads.
#[derive(Debug, Deserialize)]
pub struct BidRequest {
    pub id: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub imp: Vec<Imp>,
    /// Auction type: 1 first price, 2 second price.
    #[serde(default = "second_price")]
    pub at: u32,
    /// Currencies the exchange accepts (empty: any, in practice the exchange's default).
    #[serde(default, deserialize_with = "null_as_default")]
    pub cur: Vec<String>,
    /// Milliseconds the exchange waits for the answer.
    pub tmax: Option<u64>,
    pub device: Option<DeviceObject>,
    pub site: Option<Inventory>,
    pub app: Option<Inventory>,
    /// Blocked content categories, in taxonomy `cattax`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub bcat: Vec<String>,
    pub cattax: Option<u32>,
    /// Blocked advertiser domains.
    #[serde(default, deserialize_with = "null_as_default")]
    pub badv: Vec<String>,
    /// Blocked advertised apps (bundle ids).
    #[serde(default, deserialize_with = "null_as_default")]
    pub bapp: Vec<String>,
    /// Buyer seats allowed to bid (empty: any), and blocked.
    #[serde(default, deserialize_with = "null_as_default")]
    pub wseat: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub bseat: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct Imp {
    pub id: String,
    /// The floor CPM.
    #[serde(default, deserialize_with = "null_as_default")]
    pub bidfloor: Price,
    pub bidfloorcur: Option<String>,
    pub banner: Option<BannerObject>,
    pub video: Option<MediaObject>,
    pub native: Option<NativeObject>,
    pub pmp: Option<PmpObject>,
}

#[derive(Debug, Deserialize)]
pub struct BannerObject {
    pub w: Option<u32>,
    pub h: Option<u32>,
    /// The sizes it takes (2.5 and later); `w`/`h` count too.
    #[serde(default, deserialize_with = "null_as_default")]
    pub format: Vec<SizeObject>,
    /// Blocked creative attributes.
    #[serde(default, deserialize_with = "null_as_default")]
    pub battr: Vec<u32>,
}

#[derive(Debug, Deserialize)]
pub struct SizeObject {
    pub w: Option<u32>,
    pub h: Option<u32>,
}

/// A video (or the player it plays in): only its blocked attributes matter to the fit.
#[derive(Debug, Deserialize)]
pub struct MediaObject {
    #[serde(default, deserialize_with = "null_as_default")]
    pub battr: Vec<u32>,
}

#[derive(Debug, Deserialize)]
pub struct NativeObject {
    #[serde(default, deserialize_with = "null_as_default")]
    pub battr: Vec<u32>,
}

#[derive(Debug, Deserialize)]
pub struct PmpObject {
    /// 1: only the deals below may bid.
    #[serde(default, deserialize_with = "null_as_default")]
    pub private_auction: u32,
    #[serde(default, deserialize_with = "null_as_default")]
    pub deals: Vec<DealObject>,
}

#[derive(Debug, Deserialize)]
pub struct DealObject {
    pub id: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub bidfloor: Price,
    pub bidfloorcur: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub wseat: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub wadomain: Vec<String>,
    /// The deal's own auction type: 3 means `bidfloor` is the agreed price, which the bid then offers.
    pub at: Option<u32>,
}

/// A deal's `at` saying its floor is the agreed price (OpenRTB 2.6).
const FIXED_PRICE_DEAL: u32 = 3;

#[derive(Debug, Deserialize)]
pub struct DeviceObject {
    pub devicetype: Option<u32>,
    pub geo: Option<GeoObject>,
}

#[derive(Debug, Deserialize)]
pub struct GeoObject {
    /// ISO 3166-1 alpha-3.
    pub country: Option<String>,
    /// Local time's offset from UTC, in minutes.
    pub utcoffset: Option<i32>,
}

/// A site or an app.
#[derive(Debug, Deserialize)]
pub struct Inventory {
    pub id: Option<String>,
}

/// The BidResponse the pacer writes.
#[derive(Debug, Serialize)]
pub struct BidResponse {
    pub id: String,
    pub seatbid: Vec<SeatBid>,
    pub cur: String,
}

#[derive(Debug, Serialize)]
pub struct SeatBid {
    pub bid: Vec<Bid>,
    /// The buyer seat the bids are made on behalf of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seat: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Bid {
    pub id: String,
    pub impid: String,
    /// The bid CPM.
    pub price: Price,
    /// The campaign id.
    pub cid: String,
    /// The ad markup.
    pub adm: String,
    /// The markup's type (OpenRTB 2.6): 1 banner, 2 video, 4 native.
    pub mtype: u32,
    /// The creative that fits the impression.
    pub crid: String,
    /// Its advertiser's domains.
    pub adomain: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cat: Vec<String>,
    /// The taxonomy of `cat`, when it is not the default (1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cattax: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attr: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub w: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub h: Option<u32>,
    /// The deal the bid is made in (none: the open auction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dealid: Option<String>,
    pub nurl: String,
    pub burl: String,
    pub lurl: String,
}

/// 64-bit FNV-1a: a fixed, documented hash, so ledger keys derived from string ids stay the same across
/// builds and restarts (std's and foldhash's hashers promise no such thing).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The ledger key of impression `imp_id` of auction `auction_id`.
pub fn imp_key(auction_id: &str, imp_id: &str) -> ImpKey {
    let h = fnv1a64(imp_id.as_bytes());
    ImpKey {
        auction_id: fnv1a64(auction_id.as_bytes()),
        imp_id: (h ^ (h >> 32)) as u32,
    }
}

/// A site or app id as the targeting rules know it: a decimal id as is, any other by its hash.
pub fn site_id(id: &str) -> u64 {
    id.parse().unwrap_or_else(|_| fnv1a64(id.as_bytes()))
}

/// AdCOM device type to the pacer's device class.
pub fn device(devicetype: Option<u32>) -> Device {
    match devicetype {
        Some(1 | 4) => Device::Phone,
        Some(2) => Device::Desktop,
        Some(3 | 7) => Device::Tv,
        Some(5) => Device::Tablet,
        _ => Device::Unknown,
    }
}

/// ISO 3166-1 alpha-3 to alpha-2, for the countries the pacer targets.
const COUNTRIES: [(&str, &str); 60] = [
    ("ARE", "AE"),
    ("ARG", "AR"),
    ("AUS", "AU"),
    ("AUT", "AT"),
    ("BEL", "BE"),
    ("BGD", "BD"),
    ("BGR", "BG"),
    ("BRA", "BR"),
    ("CAN", "CA"),
    ("CHE", "CH"),
    ("CHL", "CL"),
    ("CHN", "CN"),
    ("COL", "CO"),
    ("CZE", "CZ"),
    ("DEU", "DE"),
    ("DNK", "DK"),
    ("EGY", "EG"),
    ("ESP", "ES"),
    ("FIN", "FI"),
    ("FRA", "FR"),
    ("GBR", "GB"),
    ("GRC", "GR"),
    ("HKG", "HK"),
    ("HUN", "HU"),
    ("IDN", "ID"),
    ("IND", "IN"),
    ("IRL", "IE"),
    ("ISL", "IS"),
    ("ISR", "IL"),
    ("ITA", "IT"),
    ("JPN", "JP"),
    ("KEN", "KE"),
    ("KOR", "KR"),
    ("LUX", "LU"),
    ("MAR", "MA"),
    ("MEX", "MX"),
    ("MYS", "MY"),
    ("NGA", "NG"),
    ("NLD", "NL"),
    ("NOR", "NO"),
    ("NZL", "NZ"),
    ("PAK", "PK"),
    ("PER", "PE"),
    ("PHL", "PH"),
    ("POL", "PL"),
    ("PRT", "PT"),
    ("ROU", "RO"),
    ("RUS", "RU"),
    ("SAU", "SA"),
    ("SGP", "SG"),
    ("SVK", "SK"),
    ("SWE", "SE"),
    ("THA", "TH"),
    ("TUR", "TR"),
    ("TWN", "TW"),
    ("UKR", "UA"),
    ("USA", "US"),
    ("VNM", "VN"),
    ("ZAF", "ZA"),
    ("EST", "EE"),
];

/// The alpha-2 code of an alpha-3 country, or [`Geo::UNKNOWN`].
pub fn geo(alpha3: Option<&str>) -> Geo {
    alpha3
        .and_then(|code| {
            COUNTRIES
                .iter()
                .find(|(a3, _)| a3.eq_ignore_ascii_case(code))
        })
        .and_then(|(_, a2)| a2.as_bytes().first_chunk::<2>().copied())
        .map_or(Geo::UNKNOWN, Geo)
}

/// The user's local hour at `now_ms`, `utcoffset_min` minutes from UTC.
pub fn local_hour(now_ms: u64, utcoffset_min: i32) -> u8 {
    let minute_of_day = (now_ms / 60_000) as i64 + i64::from(utcoffset_min);
    (minute_of_day.rem_euclid(24 * 60) / 60) as u8
}

/// When a request was read and when it is being decided, in Unix milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub received_ms: u64,
    pub now_ms: u64,
}

/// What the auction route answers.
#[derive(Debug)]
pub enum AuctionOutcome {
    /// A BidResponse, as JSON.
    Bids(Vec<u8>),
    /// No impression got a bid: the first impression's reason.
    NoBid(String),
    /// Not a BidRequest the pacer can decide: the reason.
    Invalid(String),
}

/// Decides a BidRequest (`body`, JSON) of at most `max_imps` impressions on `snapshot` with this loop's
/// pacer. The notice URLs start with `notice_base` (`https://` and the request's `Host`; empty: relative).
pub fn auction<C: Currency>(
    pacer: &mut LoopPacer<C>,
    snapshot: &Snapshot<C>,
    body: &[u8],
    notice_base: &str,
    max_imps: usize,
    clock: Clock,
) -> AuctionOutcome {
    let request: BidRequest = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return AuctionOutcome::Invalid(format!("not a BidRequest: {e}")),
    };
    if request.imp.len() > max_imps {
        return AuctionOutcome::Invalid(format!(
            "{} impressions, over the limit of {max_imps}",
            request.imp.len()
        ));
    }
    let ours = std::str::from_utf8(&C::CODE).unwrap_or("???");
    if request.at == 0 || (3..500).contains(&request.at) {
        return AuctionOutcome::Invalid(format!(
            "auction type at={} is not 1, 2 or an exchange's own (500 and up)",
            request.at
        ));
    }
    // OpenRTB requires unique impression ids within a request; the ledger keys on them, so a repeat is refused.
    let mut ids = std::collections::HashSet::with_capacity(request.imp.len());
    if let Some(imp) = request.imp.iter().find(|imp| !ids.insert(imp.id.as_str())) {
        return AuctionOutcome::Invalid(format!("imp id {:?} appears twice", imp.id));
    }
    // A valid request this bidder cannot take part in is a no-bid, not an error: bids only in the currencies
    // `cur` allows, and in the auction types it knows.
    if !request.cur.is_empty() && !request.cur.iter().any(|c| c == ours) {
        return AuctionOutcome::NoBid(NO_BID_CURRENCY.into());
    }
    if request.at >= 500 {
        return AuctionOutcome::NoBid("UnsupportedAuctionType".into());
    }
    let device_geo = request.device.as_ref().and_then(|d| d.geo.as_ref());
    let inventory = request.site.as_ref().or(request.app.as_ref());
    let header = RequestHeader::<C> {
        key: ImpKey {
            auction_id: 0,
            imp_id: 0,
        },
        floor: Cpm::ZERO,
        deadline_ms: clock
            .received_ms
            .saturating_add(request.tmax.unwrap_or(u64::MAX)),
        hour: local_hour(
            clock.now_ms,
            device_geo.and_then(|g| g.utcoffset).unwrap_or(0),
        ),
        device: device(request.device.as_ref().and_then(|d| d.devicetype)),
        geo: geo(device_geo.and_then(|g| g.country.as_deref())),
        site_id: inventory.and_then(|i| i.id.as_deref()).map_or(0, site_id),
    };
    // The campaigns targeting this user and place; each impression then keeps those with a creative that
    // fits it and a door (a deal or the open auction) its restrictions leave open.
    let targeted: Vec<&Campaign<C>> = snapshot
        .campaigns()
        .into_iter()
        .filter(|campaign| campaign.targeting.matches(&header))
        .collect();
    let auction_param = encode_query_value(&request.id);
    let mut seats: Vec<SeatBid> = Vec::new();
    let mut first_reason = None;
    for imp in &request.imp {
        let (bid, reason) = decide_imp(pacer, snapshot, &request, imp, &targeted, header, clock);
        let Some(ImpBid {
            campaign,
            price,
            creative,
            size,
            deal,
        }) = bid
        else {
            first_reason.get_or_insert(reason);
            continue;
        };
        let query = format!(
            "auction={auction_param}&imp={}&campaign={}&{CHECK_PARAM}={}",
            encode_query_value(&imp.id),
            campaign.id.0,
            notice_check(&request.id, &imp.id, campaign.id.0)
        );
        let bid = Bid {
            id: format!("{}-{}", request.id, imp.id),
            impid: imp.id.clone(),
            price: Price(price.micros()),
            cid: campaign.id.0.to_string(),
            adm: creative.adm.clone(),
            mtype: creative.format.mtype(),
            crid: creative.id.clone(),
            adomain: creative.adomain.clone(),
            cat: creative.cat.clone(),
            cattax: (creative.cattax != DEFAULT_CATTAX).then_some(creative.cattax),
            attr: creative.attr.clone(),
            bundle: creative.bundle.clone(),
            w: size.map(|(w, _)| w),
            h: size.map(|(_, h)| h),
            dealid: deal,
            nurl: format!("{notice_base}/win?{query}&price=${{AUCTION_PRICE}}"),
            burl: format!("{notice_base}/billing?{query}&price=${{AUCTION_PRICE}}"),
            lurl: format!("{notice_base}/loss?{query}"),
        };
        let seat = &campaign.ads.seat;
        match seats.iter_mut().find(|s| &s.seat == seat) {
            Some(seatbid) => seatbid.bid.push(bid),
            None => seats.push(SeatBid {
                bid: vec![bid],
                seat: seat.clone(),
            }),
        }
    }
    if seats.is_empty() {
        return AuctionOutcome::NoBid(first_reason.unwrap_or_else(|| "NoImpressions".into()));
    }
    let response = BidResponse {
        id: request.id,
        seatbid: seats,
        cur: ours.to_owned(),
    };
    match serde_json::to_vec(&response) {
        Ok(json) => AuctionOutcome::Bids(json),
        Err(e) => AuctionOutcome::Invalid(format!("cannot write the BidResponse: {e}")),
    }
}

/// The sizes a banner object takes: its `format` list and its `w`/`h`.
fn banner_sizes(banner: &BannerObject) -> Vec<Size> {
    let sizes = banner.format.iter().map(|f| (f.w, f.h));
    sizes
        .chain(std::iter::once((banner.w, banner.h)))
        .filter_map(|(w, h)| Some((w?, h?)))
        .collect()
}

/// A campaign's bid on one impression.
struct ImpBid<'s, C> {
    campaign: &'s Campaign<C>,
    price: Cpm<C>,
    creative: &'s Creative,
    size: Option<Size>,
    deal: Option<String>,
}

/// Decides one impression among the `targeted` campaigns: the bid, or why there is none (the furthest
/// reason: a campaign the pacer turned down got further than one no creative of which fits).
fn decide_imp<'s, C: Currency>(
    pacer: &mut LoopPacer<C>,
    snapshot: &Snapshot<C>,
    request: &'s BidRequest,
    imp: &'s Imp,
    targeted: &[&'s Campaign<C>],
    header: RequestHeader<C>,
    clock: Clock,
) -> (Option<ImpBid<'s, C>>, String) {
    let ours = std::str::from_utf8(&C::CODE).unwrap_or("???");
    // A floor of zero has no currency to speak of; OpenRTB's default currency is USD, a deal's included.
    let ours_or_none = |floor: &Price, currency: &Option<String>| {
        floor.0 == 0 || currency.as_deref().unwrap_or("USD") == ours
    };
    if !ours_or_none(&imp.bidfloor, &imp.bidfloorcur) {
        return (None, NO_BID_FLOOR_CURRENCY.to_owned());
    }
    let sizes = imp.banner.as_ref().map(banner_sizes).unwrap_or_default();
    // A deal whose floor is in another currency cannot be checked: it is left out, as if not offered.
    let deals: Vec<Deal<'_, C>> = imp
        .pmp
        .iter()
        .flat_map(|pmp| &pmp.deals)
        .filter(|deal| ours_or_none(&deal.bidfloor, &deal.bidfloorcur))
        .map(|deal| Deal {
            id: &deal.id,
            floor: Cpm::from_micros(deal.bidfloor.0),
            wseat: &deal.wseat,
            wadomain: &deal.wadomain,
            fixed_price: deal.at == Some(FIXED_PRICE_DEAL),
        })
        .collect();
    let open_floor = Cpm::from_micros(imp.bidfloor.0);
    let placement = Placement {
        banner: imp.banner.as_ref().map(|b| Slot {
            sizes: &sizes,
            battr: &b.battr,
        }),
        video: imp.video.as_ref().map(|v| Slot {
            sizes: &[],
            battr: &v.battr,
        }),
        native: imp.native.as_ref().map(|n| Slot {
            sizes: &[],
            battr: &n.battr,
        }),
        floor: open_floor,
        bcat: &request.bcat,
        cattax: request.cattax.unwrap_or(DEFAULT_CATTAX),
        badv: &request.badv,
        bapp: &request.bapp,
        wseat: &request.wseat,
        bseat: &request.bseat,
        private_auction: imp.pmp.as_ref().is_some_and(|p| p.private_auction != 0),
        deals: &deals,
    };
    let mut candidates = Vec::with_capacity(targeted.len() * CANDIDATE_LEN);
    let mut fits = Vec::with_capacity(targeted.len());
    let mut filtered: Option<Filtered> = None;
    // Each fit met its door's floor (a deal's or the open auction's): the pacer's one floor is the lowest.
    let mut floor = None::<Cpm<C>>;
    for &campaign in targeted {
        match ads::fit(&campaign.ads, campaign.max_cpm, &placement) {
            Ok(fit) => {
                floor = Some(floor.map_or(fit.floor, |f| f.min(fit.floor)));
                candidates.extend_from_slice(&campaign.id.0.to_le_bytes());
                candidates.extend_from_slice(&fit.max_bid.micros().to_le_bytes());
                fits.push((campaign, fit));
            }
            Err(reason) => filtered = filtered.max(Some(reason)),
        }
    }
    if fits.is_empty() {
        let index = filtered.map_or(UNFIT_NOT_TARGETED, |reason| reason as usize);
        UNFIT.incr(index);
        return (None, UNFIT_REASONS[index].to_owned());
    }
    let decision = pacer.decide(
        snapshot,
        &GatewayRequest {
            header: RequestHeader {
                key: imp_key(&request.id, &imp.id),
                floor: floor.unwrap_or(open_floor),
                ..header
            },
            candidates: Candidates::from_bytes(&candidates),
        },
        clock.now_ms,
    );
    match decision {
        Decision::Bid { campaign, price } => {
            let bid = fits.into_iter().find(|(c, _)| c.id == campaign).map(
                |(campaign, fit): (_, Fit<'s, '_, C>)| ImpBid {
                    campaign,
                    price,
                    creative: fit.creative,
                    size: fit.size,
                    deal: fit.deal.map(str::to_owned),
                },
            );
            (bid, String::new())
        }
        Decision::NoBid(status) => (None, status.to_string()),
    }
}

/// The query parameter of a notice URL that carries its [`notice_check`].
pub const CHECK_PARAM: &str = "chk";

/// The check value a notice URL carries for impression `imp_id` of auction `auction_id` won by `campaign`:
/// the low 32 bits of FNV-1a (64-bit) over the three fields, each after its length, as 8 lower-case hex
/// digits. Each step of FNV-1a maps its state one-to-one, also in the low 32 bits alone, so two inputs of
/// the same length that differ in one byte always get different values. It is computed over the decoded
/// parameter values (and the campaign id as a plain decimal), so percent-encoding choices do not matter.
pub fn notice_check(auction_id: &str, imp_id: &str, campaign: u32) -> String {
    let campaign = campaign.to_string();
    let mut bytes = Vec::with_capacity(auction_id.len() + imp_id.len() + 40);
    for field in [auction_id, imp_id, campaign.as_str()] {
        bytes.extend_from_slice(field.len().to_string().as_bytes());
        bytes.push(b':');
        bytes.extend_from_slice(field.as_bytes());
    }
    format!("{:08x}", fnv1a64(&bytes) as u32)
}

/// Why a notice URL is refused: the label of `tern_pacer_openrtb_notices_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeRefusal {
    /// `auction`, `imp`, `campaign` or `price` is missing or not a value of its kind.
    BadParameter = 0,
    /// No `chk`: not a URL the pacer wrote, or one cut short.
    MissingCheck = 1,
    /// `chk` does not match `auction`, `imp` and `campaign`: one of the four was changed.
    CheckMismatch = 2,
}

const REFUSAL_NAMES: [&str; 3] = ["bad_parameter", "missing_check", "check_mismatch"];

impl NoticeRefusal {
    /// Its label value in the metric.
    pub fn name(self) -> &'static str {
        REFUSAL_NAMES[self as usize]
    }
}

impl std::fmt::Display for NoticeRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

static NOTICES_REFUSED: CounterFamily = CounterFamily::new(
    "tern_pacer_openrtb_notices_refused_total",
    "Notice URLs (win, billing, loss) answered 400 and not applied, by reason: a parameter missing or not \
     a value of its kind, no chk check value, or a chk that does not match auction, imp and campaign (the \
     URL was changed after the bid response gave it)",
    "reason",
    &REFUSAL_NAMES,
);

/// A notice URL the pacer will not apply: why, and the message its `400` answer carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedNotice {
    pub reason: NoticeRefusal,
    pub message: String,
}

impl std::fmt::Display for RefusedNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

fn kind_name(kind: NoticeKind) -> &'static str {
    match kind {
        NoticeKind::Win => "win",
        NoticeKind::Billing => "billing",
        NoticeKind::Loss => "loss",
    }
}

/// The notice a `/win`, `/billing` or `/loss` request carries, or why it is refused: a parameter missing or
/// malformed, or a `chk` missing or not matching the other parameters (see "Notice URLs" in the module doc).
pub fn parse_notice<C>(
    request: &HttpRequest<'_>,
    kind: NoticeKind,
) -> Result<Notice<C>, RefusedNotice> {
    let what = kind_name(kind);
    let refuse = |reason, detail: String| RefusedNotice {
        reason,
        message: format!("{what} notice refused: {detail}"),
    };
    let param = |name: &str| -> Result<String, RefusedNotice> {
        match request.query_param(name) {
            Some(Ok(value)) => Ok(value),
            Some(Err(())) => Err(refuse(
                NoticeRefusal::BadParameter,
                format!("parameter {name} is not UTF-8"),
            )),
            None => Err(refuse(
                NoticeRefusal::BadParameter,
                format!("parameter {name} is missing"),
            )),
        }
    };
    let auction = param("auction")?;
    let imp = param("imp")?;
    let campaign_text = param("campaign")?;
    let campaign = campaign_text.parse::<u32>().map_err(|_| {
        refuse(
            NoticeRefusal::BadParameter,
            format!("parameter campaign \"{campaign_text}\" is not a campaign id"),
        )
    })?;
    let price = match kind {
        NoticeKind::Loss => 0,
        NoticeKind::Win | NoticeKind::Billing => {
            let text = param("price")?;
            decimal_to_micros(&text).map_err(|e| {
                let hint = if text.starts_with("${") {
                    " (the exchange did not fill in its macro)"
                } else {
                    ""
                };
                refuse(
                    NoticeRefusal::BadParameter,
                    format!("parameter price \"{text}\"{hint}: {e}"),
                )
            })?
        }
    };
    let as_issued =
        "send the URL as the bid response gave it, with only ${AUCTION_PRICE} filled in";
    match request.query_param(CHECK_PARAM) {
        None => {
            return Err(refuse(
                NoticeRefusal::MissingCheck,
                format!(
                    "parameter {CHECK_PARAM} is missing: notice URLs are the bid's nurl, burl and \
                     lurl, which carry it; {as_issued}"
                ),
            ))
        }
        Some(Ok(check)) if check.eq_ignore_ascii_case(&notice_check(&auction, &imp, campaign)) => {}
        Some(_) => {
            return Err(refuse(
                NoticeRefusal::CheckMismatch,
                format!(
                    "parameter {CHECK_PARAM} does not match auction, imp and campaign: one of them \
                     was changed after the bid response gave the URL (a typo?); {as_issued}"
                ),
            ))
        }
    }
    Ok(Notice {
        kind,
        key: imp_key(&auction, &imp),
        campaign: CampaignId(campaign),
        price: Cpm::from_micros(price),
    })
}

/// How the OpenRTB front is served.
#[derive(Debug, Clone, Copy)]
pub struct Front {
    /// Most impressions in one BidRequest.
    pub max_imps: usize,
    /// Served over TLS: notice URLs are `https://`.
    pub https: bool,
}

/// Serves one HTTP request on this loop: the auction and notice routes. `forward` takes a notice this
/// loop does not know, as for the gateway's NOTICES frames. Returns whether the connection stays open.
pub fn serve<C: Currency>(
    pacer: &mut LoopPacer<C>,
    snapshot: &Snapshot<C>,
    request: &HttpRequest<'_>,
    front: Front,
    clock: Clock,
    out: &mut Vec<u8>,
    forward: impl FnOnce(Notice<C>) -> NoticeStatus,
) -> bool {
    let (keep_alive, minor) = (request.keep_alive, request.minor_version);
    let mut reply = |status: u16, content_type: &str, headers: &[(&str, &str)], body: &[u8]| {
        let response = Response {
            status,
            content_type,
            headers,
            body,
        };
        write_response(out, &response, keep_alive, minor);
    };
    let text = "text/plain; charset=utf-8";
    let json = "application/json";
    let notice_kind = match request.path() {
        "/win" => Some(NoticeKind::Win),
        "/billing" => Some(NoticeKind::Billing),
        "/loss" => Some(NoticeKind::Loss),
        _ => None,
    };
    match (request.method, request.path(), notice_kind) {
        ("POST", AUCTION_PATH, _) => {
            let scheme = if front.https { "https" } else { "http" };
            let base = request
                .host
                .map_or(String::new(), |h| format!("{scheme}://{h}"));
            match auction(pacer, snapshot, request.body, &base, front.max_imps, clock) {
                AuctionOutcome::Bids(body) => reply(200, json, &[], &body),
                AuctionOutcome::NoBid(reason) => {
                    reply(204, text, &[("X-Tern-No-Bid", reason.as_str())], b"")
                }
                AuctionOutcome::Invalid(reason) => reply(400, text, &[], reason.as_bytes()),
            }
        }
        ("GET", _, Some(kind)) => match parse_notice::<C>(request, kind) {
            Ok(notice) => {
                let status = match pacer.notice(clock.now_ms, &notice) {
                    NoticeStatus::Unknown => forward(notice),
                    status => status,
                };
                let mut body = String::new();
                let _ = write!(body, "{{\"status\":\"{status}\"}}");
                reply(200, json, &[], body.as_bytes());
            }
            Err(refused) => {
                NOTICES_REFUSED.incr(refused.reason as usize);
                reply(400, text, &[], refused.message.as_bytes());
            }
        },
        (_, AUCTION_PATH, _) => reply(405, text, &[("Allow", "POST")], b"use POST\n"),
        (_, _, Some(_)) => reply(405, text, &[("Allow", "GET")], b"use GET\n"),
        _ => reply(404, text, &[], b"not found\n"),
    }
    keep_alive
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decimals_convert_exactly_to_micros() {
        for (text, micros) in [
            ("0", 0),
            ("1", 1_000_000),
            ("1.23", 1_230_000),
            ("0.000001", 1),
            ("0.0000001", 1),
            ("0.0000010", 1),
            ("0.0000011", 2),
            ("2.5e-1", 250_000),
            ("2.5E+2", 250_000_000),
            ("1e-7", 1),
            ("0e5", 0),
            ("0.0e9999999999999", 0),
            ("007.50", 7_500_000),
            ("18446744073709.551615", u64::MAX),
            ("1e-9999999999999", 1),
        ] {
            assert_eq!(decimal_to_micros(text), Ok(micros), "{text}");
        }
        for bad in [
            "", "-1", "1.", ".5", "1e", "abc", "1,5", " 1", "NaN", "1e+", "--1",
        ] {
            assert!(decimal_to_micros(bad).is_err(), "{bad:?}");
        }
        for too_large in ["18446744073709.551616", "1e30", "1e9999999999999"] {
            assert_eq!(decimal_to_micros(too_large), Err("price too large"));
        }
    }

    #[test]
    fn prices_are_written_as_exact_decimals() {
        assert_eq!(micros_to_decimal(1_500_000), "1.5");
        assert_eq!(micros_to_decimal(2_000_000), "2");
        assert_eq!(micros_to_decimal(1), "0.000001");
        assert_eq!(micros_to_decimal(0), "0");
        let json = serde_json::to_string(&Price(1_230_000)).unwrap();
        assert_eq!(json, "1.23");
        let back: Price = serde_json::from_str(&json).unwrap();
        assert_eq!(back, Price(1_230_000));
        assert!(serde_json::from_str::<Price>("\"1.2\"").is_err());
    }

    #[test]
    fn maps_devices_countries_hours_and_sites() {
        assert_eq!(device(Some(4)), Device::Phone);
        assert_eq!(device(Some(2)), Device::Desktop);
        assert_eq!(device(Some(3)), Device::Tv);
        assert_eq!(device(Some(5)), Device::Tablet);
        assert_eq!(device(Some(6)), Device::Unknown);
        assert_eq!(device(None), Device::Unknown);
        assert_eq!(geo(Some("USA")), Geo(*b"US"));
        assert_eq!(geo(Some("deu")), Geo(*b"DE"));
        assert_eq!(geo(Some("ATA")), Geo::UNKNOWN);
        assert_eq!(geo(None), Geo::UNKNOWN);
        // 1970-01-01 23:30 UTC.
        let at = (23 * 60 + 30) * 60_000;
        assert_eq!(local_hour(at, 0), 23);
        assert_eq!(local_hour(at, 60), 0);
        assert_eq!(local_hour(at, -300), 18);
        assert_eq!(site_id("42"), 42);
        assert_eq!(site_id("news.example"), fnv1a64(b"news.example"));
        // The FNV-1a test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    /// The shapes found in the example BidRequests other OpenRTB libraries ship as test data (issue 14)
    /// parse, and what the pacer reads of them is right: a native `request` as a string (the spec) or an
    /// object, `ver` as a number, flex formats without `w`/`h`, an interstitial of `w = h = 0`, empty
    /// `video`/`audio` objects next to a banner, deals with their own `at` and fields the model does not
    /// know (misspelled ones too), integer floors, an alpha-2 country, and a `dooh` object instead of a site
    /// or an app.
    #[test]
    fn reads_the_shapes_other_libraries_samples_use() {
        let json = r#"{
            "id": "r1", "at": 1, "tmax": 80, "cur": ["USD"], "cattax": 1, "bcat": ["IAB25-3", "BSW1"],
            "imp": [
                {"id": "1", "bidfloor": 5, "bidfloorcur": "USD",
                 "banner": {"w": 1100, "h": 600, "format": [{"wratio": 16, "hratio": 9, "wmin": 320}]},
                 "video": {}, "audio": {},
                 "native": {"request": {"native": {"assets": []}}, "ver": 1, "battr": [1]},
                 "pmp": {"private_auction": 0, "deals": [
                     {"id": "d1", "bidfloor": 2.5, "at": 1, "wseat": ["4", "15"]},
                     {"id": "d2", "bidfloor": 2, "at": 3, "wseats": [], "ext": {"priority": 1}}]}},
                {"id": "2", "instl": 1, "bidfloor": 0.5, "banner": {"w": 0, "h": 0, "battr": [14]}},
                {"id": "3", "native": {"request": "{\"ver\":\"1.2\",\"assets\":[]}", "ver": "1.2"}}
            ],
            "device": {"devicetype": 8, "geo": {"country": "IN", "contry": "FR", "lat": 25.6}},
            "dooh": {"id": "venue-9", "venuetype": ["transit"]}
        }"#;
        let request: BidRequest = serde_json::from_str(json).unwrap();
        assert_eq!(
            (request.at, request.tmax, request.bcat.len()),
            (1, Some(80), 2)
        );
        assert!(request.site.is_none() && request.app.is_none());
        let [flex, interstitial, native] = &request.imp[..] else {
            panic!("three impressions")
        };
        assert_eq!(flex.bidfloor, Price(5_000_000));
        let banner = flex.banner.as_ref().unwrap();
        assert_eq!(
            banner_sizes(banner),
            vec![(1100, 600)],
            "a flex format names no size"
        );
        assert!(flex.video.is_some() && flex.native.as_ref().unwrap().battr == [1]);
        let deals = &flex.pmp.as_ref().unwrap().deals;
        assert_eq!(
            deals
                .iter()
                .map(|d| (d.id.as_str(), d.bidfloor, d.wseat.len()))
                .collect::<Vec<_>>(),
            vec![("d1", Price(2_500_000), 2), ("d2", Price(2_000_000), 0)]
        );
        let slot = interstitial.banner.as_ref().unwrap();
        assert_eq!(
            (banner_sizes(slot), &slot.battr[..]),
            (vec![(0, 0)], &[14][..])
        );
        assert!(native.native.is_some() && native.bidfloor == Price(0));
        let dev = request.device.as_ref().unwrap();
        assert_eq!(device(dev.devicetype), Device::Unknown, "8 is DOOH");
        let country = dev.geo.as_ref().and_then(|g| g.country.as_deref());
        assert_eq!(
            geo(country),
            Geo::UNKNOWN,
            "alpha-2 is not what OpenRTB sends"
        );
    }

    use tern_pacer_core::money::Usd;
    use tern_pacer_core::strategy::Strategy;

    /// `target` (a path and query) parsed as a notice of `kind`.
    fn notice(target: &str, kind: NoticeKind) -> Result<Notice<Usd>, RefusedNotice> {
        let head = format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n");
        let tern_http::Decode::Frame { request, .. } =
            tern_http::decode_request(head.as_bytes(), &tern_http::HttpLimits::default())
        else {
            panic!("{target} is not an HTTP request");
        };
        parse_notice(&request, kind)
    }

    #[test]
    fn the_check_value_is_stable_and_short() {
        // Notice URLs outlive the process that wrote them (and its version): the value is pinned.
        assert_eq!(notice_check("ex-banner-site-0001", "1", 1), "2efb9143");
        assert_eq!(notice_check("a1", "1", 1), notice_check("a1", "1", 1));
        assert_ne!(notice_check("a1", "1", 1), notice_check("a1", "1", 2));
        // The fields are length-prefixed: moving a character from one to the next changes the value.
        assert_ne!(notice_check("a1", "23", 4), notice_check("a12", "3", 4));
        let check = notice_check("auction/with spaces", "é", 4_000_000_000);
        assert!(
            check.len() == 8 && check.bytes().all(|b| b.is_ascii_hexdigit()),
            "{check}"
        );
    }

    #[test]
    fn a_notice_must_carry_the_check_of_its_ids() {
        let chk = notice_check("a/1 x", "imp-1", 7);
        let good = format!("/billing?auction=a%2F1+x&imp=imp-1&campaign=7&chk={chk}&price=1.5");
        let parsed = notice(&good, NoticeKind::Billing).unwrap();
        assert_eq!(
            (parsed.key, parsed.campaign, parsed.price.micros()),
            (imp_key("a/1 x", "imp-1"), CampaignId(7), 1_500_000)
        );
        // The same URL with the check in upper case, and a loss without a price.
        let upper = good.replace(&chk, &chk.to_ascii_uppercase());
        assert!(notice(&upper, NoticeKind::Billing).is_ok());
        let loss = format!("/loss?auction=a%2F1+x&imp=imp-1&campaign=7&chk={chk}");
        assert!(notice(&loss, NoticeKind::Loss).is_ok());
        // A typo in any of the ids the check covers, or in the check itself.
        for typo in [
            good.replace("a%2F1+x", "a%2F2+x"),
            good.replace("imp-1", "imp-l"),
            good.replace("campaign=7", "campaign=1"),
            good.replace(&chk, &format!("{}0", &chk[..7])),
        ] {
            let refused = notice(&typo, NoticeKind::Billing).unwrap_err();
            assert_eq!(refused.reason, NoticeRefusal::CheckMismatch, "{typo}");
            assert!(
                refused
                    .message
                    .starts_with("billing notice refused: parameter chk does not match"),
                "{}",
                refused.message
            );
        }
        // No check at all: written by hand, or cut short.
        let bare = "/win?auction=a&imp=1&campaign=1&price=1";
        let refused = notice(bare, NoticeKind::Win).unwrap_err();
        assert_eq!(refused.reason, NoticeRefusal::MissingCheck);
        assert!(refused.message.contains("chk is missing"), "{refused}");
        // Other parameters are checked first, with their own reason.
        let unfilled = format!(
            "/win?auction=a&imp=1&campaign=1&chk={}&price=${{AUCTION_PRICE}}",
            notice_check("a", "1", 1)
        );
        let refused = notice(&unfilled, NoticeKind::Win).unwrap_err();
        assert_eq!(refused.reason, NoticeRefusal::BadParameter);
        assert!(
            refused.message.contains("did not fill in its macro"),
            "{refused}"
        );
        assert_eq!(
            notice("/loss?auction=a&campaign=1", NoticeKind::Loss)
                .unwrap_err()
                .message,
            "loss notice refused: parameter imp is missing"
        );
    }

    /// Campaign `id` bids up to `id` USD CPM; campaign 3 wants the US only.
    fn funded() -> (Snapshot<Usd>, LoopPacer<Usd>) {
        let snapshot = tern_pacer_core::fixtures::three_campaigns(1_000, |_| Strategy::HardCap);
        let (_, pacer) = tern_pacer_core::fixtures::funded(&snapshot);
        (snapshot, pacer)
    }

    const CLOCK: Clock = Clock {
        received_ms: 1_000_000,
        now_ms: 1_000_000,
    };

    proptest! {
        #[test]
        fn any_body_gets_an_answer(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let (snapshot, mut pacer) = funded();
            let _ = auction(&mut pacer, &snapshot, &body, "http://h", 8, CLOCK);
        }

        #[test]
        fn bids_respect_floors_caps_and_targeting(
            id in "[ -~]{1,20}",
            imps in proptest::collection::vec(("[a-z0-9]{1,4}", 0u64..4_000_000), 1..5),
            country in prop::sample::select(vec!["USA", "FRA", "XYZ"]),
        ) {
            let (snapshot, mut pacer) = funded();
            let body = serde_json::json!({
                "id": id,
                "imp": imps.iter().map(|(imp, floor)| serde_json::json!({
                    "id": imp,
                    "bidfloor": serde_json::value::RawValue::from_string(micros_to_decimal(*floor)).unwrap(),
                    "banner": {"format": [{"w": 300, "h": 250}]},
                })).collect::<Vec<_>>(),
                "device": {"geo": {"country": country}},
            });
            let outcome = auction(&mut pacer, &snapshot, body.to_string().as_bytes(), "http://h", 8, CLOCK);
            let mut seen = std::collections::HashSet::new();
            if !imps.iter().all(|(imp, _)| seen.insert(imp)) {
                prop_assert!(matches!(outcome, AuctionOutcome::Invalid(_)), "repeated imp id: {outcome:?}");
                return Ok(());
            }
            let AuctionOutcome::Bids(json) = outcome else {
                // Nothing bids only when every floor is over what the campaigns may pay.
                let best = if country == "USA" { 3_000_000 } else { 2_000_000 };
                prop_assert!(imps.iter().all(|(_, floor)| *floor > best), "{outcome:?}");
                return Ok(());
            };
            let response: serde_json::Value = serde_json::from_slice(&json).unwrap();
            prop_assert_eq!(&response["id"], &serde_json::Value::from(id.clone()));
            for bid in response["seatbid"][0]["bid"].as_array().unwrap() {
                let impid = bid["impid"].as_str().unwrap();
                let floor = imps.iter().find(|(i, _)| i == impid).unwrap().1;
                let price = decimal_to_micros(&bid["price"].to_string()).unwrap();
                let campaign: u64 = bid["cid"].as_str().unwrap().parse().unwrap();
                prop_assert!(price >= floor);
                prop_assert_eq!(price, campaign * 1_000_000, "bids its own maximum");
                prop_assert!(campaign != 3 || country == "USA", "targeting");
                let query = format!(
                    "auction={}&imp={impid}&campaign={campaign}&chk={}",
                    encode_query_value(&id),
                    notice_check(&id, impid, campaign as u32)
                );
                prop_assert_eq!(
                    bid["burl"].as_str().unwrap(),
                    format!("http://h/billing?{query}&price=${{AUCTION_PRICE}}")
                );
            }
        }

        #[test]
        fn one_character_changed_in_an_id_always_changes_the_check(
            auction in "[ -~]{1,24}",
            imp in "[ -~]{1,8}",
            campaign in any::<u32>(),
            at in any::<prop::sample::Index>(),
            with in 0x20u8..0x7f,
            in_imp in any::<bool>(),
        ) {
            let (mut a, mut i) = (auction.clone().into_bytes(), imp.clone().into_bytes());
            let field = if in_imp { &mut i } else { &mut a };
            let at = at.index(field.len());
            prop_assume!(field[at] != with);
            field[at] = with;
            let (a, i) = (String::from_utf8(a).unwrap(), String::from_utf8(i).unwrap());
            prop_assert_ne!(notice_check(&auction, &imp, campaign), notice_check(&a, &i, campaign));
        }

        #[test]
        fn decimal_text_round_trips(micros in any::<u64>()) {
            prop_assert_eq!(decimal_to_micros(&micros_to_decimal(micros)), Ok(micros));
        }

        #[test]
        fn conversion_never_panics(text in "[0-9eE.+-]{0,30}") {
            let _ = decimal_to_micros(&text);
        }

        #[test]
        fn rounding_is_up_to_the_next_micro(units in 0u64..1_000_000, micros in 0u64..1_000_000, extra in 1u32..10) {
            let text = format!("{units}.{micros:06}{extra}");
            prop_assert_eq!(decimal_to_micros(&text), Ok(units * 1_000_000 + micros + 1));
        }
    }
}
