//! What a campaign shows and through which doors it may bid (its creatives, its buyer seat, the deals it
//! targets), and the checks an exchange's restrictions put on each impression (OpenRTB 2.6: the slot's
//! formats and sizes, `bcat`/`cattax`, `badv`, `bapp`, `battr`, `wseat`/`bseat`, `pmp.private_auction` and
//! each deal's floor, seats and advertiser domains). Pure: the OpenRTB front and the simulator describe an
//! impression as a [`Placement`] and ask [`fit`] which creative of a campaign may bid on it, and through
//! which deal, or why none may.
//!
//! The rules, each the conservative reading (a bid an exchange would drop is worse than no bid):
//! - A banner creative fits a banner slot that offers one of its sizes (`w`/`h` or `format[]`; a slot that
//!   names no size takes any banner); a video creative fits a video slot, a native one a native slot.
//! - `battr` of the slot the creative fills blocks a creative with any of those attributes.
//! - `bcat` blocks a creative in a blocked category or under it (`IAB1` blocks `IAB1-2`), compared when the
//!   request's taxonomy (`cattax`, default 1) is the creative's; in another taxonomy a non-empty `bcat`
//!   cannot be checked and blocks.
//! - `badv` blocks a creative with a blocked advertiser domain or a subdomain of one (case-insensitive);
//!   `bapp` a creative whose advertised app bundle is listed.
//! - `wseat` (when not empty) admits only a campaign whose seat it lists; `bseat` blocks a listed seat.
//! - A campaign that targets deals bids only through them: a deal of the impression it targets, whose
//!   floor its price meets, whose `wseat` (if any) lists its seat and whose `wadomain` (if any) lists the
//!   creative's domain. A campaign without deals bids only in the open auction, which
//!   `pmp.private_auction = 1` closes.

use crate::money::Cpm;

/// A creative's width and height in pixels.
pub type Size = (u32, u32);

/// The kind of ad a creative is, and so the kind of slot it fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Banner,
    Video,
    Native,
}

impl Format {
    /// OpenRTB 2.6's `Bid.mtype`: the type of the creative's markup.
    pub fn mtype(self) -> u32 {
        match self {
            Format::Banner => 1,
            Format::Video => 2,
            Format::Native => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Banner => "banner",
            Format::Video => "video",
            Format::Native => "native",
        }
    }

    pub fn parse(name: &str) -> Option<Format> {
        [Format::Banner, Format::Video, Format::Native]
            .into_iter()
            .find(|f| f.name() == name)
    }
}

/// The content taxonomy OpenRTB assumes when a request names none (IAB Content Category Taxonomy 1.0).
pub const DEFAULT_CATTAX: u32 = 1;

/// One creative: what a bid carries about the ad it would show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Creative {
    pub id: String,
    pub format: Format,
    /// The sizes it can be shown at (required for banners; informational for the others).
    pub sizes: Vec<Size>,
    /// The advertiser's domains, lower-case (at least one: exchanges drop bids without).
    pub adomain: Vec<String>,
    /// Content categories, in taxonomy `cattax`.
    pub cat: Vec<String>,
    pub cattax: u32,
    /// AdCOM creative attributes (1-17).
    pub attr: Vec<u32>,
    /// The advertised app's bundle id, for `bapp`.
    pub bundle: Option<String>,
    /// The ad markup the bid carries (`adm`): HTML or JavaScript for a banner, VAST XML for a video, the
    /// native response's JSON for a native ad. The exchange fills in macros such as `${AUCTION_PRICE}`.
    pub adm: String,
}

/// A campaign's creatives and doors. Empty: it has no creative, so it bids on nothing OpenRTB offers
/// (the gateway protocol, which names campaigns, not creatives, does not look here).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ads {
    pub creatives: Vec<Creative>,
    /// The buyer seat it bids through on the exchange, if it has one.
    pub seat: Option<String>,
    /// The deal ids it targets; not empty: it bids only through these deals.
    pub deals: Vec<String>,
}

/// A slot of one format in an impression.
#[derive(Debug, Clone, Copy, Default)]
pub struct Slot<'a> {
    /// Sizes it takes (empty: it does not say, any size).
    pub sizes: &'a [Size],
    /// Creative attributes it blocks.
    pub battr: &'a [u32],
}

/// A deal offered on an impression.
#[derive(Debug, Clone, Copy)]
pub struct Deal<'a, C> {
    pub id: &'a str,
    pub floor: Cpm<C>,
    /// Seats allowed to bid on it (empty: any).
    pub wseat: &'a [String],
    /// Advertiser domains allowed on it (empty: any).
    pub wadomain: &'a [String],
    /// Its floor is the agreed price, which a bid offers (OpenRTB 2.6's deal `at` 3).
    pub fixed_price: bool,
}

/// One impression as the bidder sees it: its slots and every restriction of the request and the
/// impression.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a, C> {
    pub banner: Option<Slot<'a>>,
    pub video: Option<Slot<'a>>,
    pub native: Option<Slot<'a>>,
    /// The open auction's floor.
    pub floor: Cpm<C>,
    pub bcat: &'a [String],
    pub cattax: u32,
    pub badv: &'a [String],
    pub bapp: &'a [String],
    pub wseat: &'a [String],
    pub bseat: &'a [String],
    pub private_auction: bool,
    pub deals: &'a [Deal<'a, C>],
}

impl<C> Placement<'_, C> {
    fn slot(&self, format: Format) -> Option<&Slot<'_>> {
        match format {
            Format::Banner => self.banner.as_ref(),
            Format::Video => self.video.as_ref(),
            Format::Native => self.native.as_ref(),
        }
    }
}

/// How a campaign may bid on an impression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit<'c, 'p, C> {
    pub creative: &'c Creative,
    /// The size it is shown at: the one the slot and the creative share, or the creative's first when the
    /// slot names none (`None` for a creative without sizes).
    pub size: Option<Size>,
    /// The deal it bids through (`None`: the open auction).
    pub deal: Option<&'p str>,
    /// The floor its bid must meet: the deal's or the open auction's.
    pub floor: Cpm<C>,
    /// The most it may bid through this door: its price, or a fixed-price deal's floor.
    pub max_bid: Cpm<C>,
}

/// Why a campaign may not bid on an impression, from the least far it got to the furthest: a no-bid reports
/// the furthest any campaign got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Filtered {
    /// It has no creative at all.
    NoCreative,
    /// The auction is private and it targets none of its deals (or the impression offers none it targets).
    NoDeal,
    /// `wseat` (the request's or its deal's) does not list its seat, or `bseat` does.
    SeatNotAllowed,
    /// It targets a deal offered here, but its price is under the deal's floor.
    BelowDealFloor,
    /// No creative of a format and size the impression takes.
    NoFittingCreative,
    /// Every fitting creative has an attribute the slot blocks.
    BlockedAttribute,
    /// Every fitting creative is in a blocked category.
    BlockedCategory,
    /// Every fitting creative's advertiser is blocked (or not allowed on the deal).
    BlockedAdvertiser,
    /// Every fitting creative advertises a blocked app.
    BlockedApp,
    /// A creative fits, but in the open auction its price is under the floor (or zero).
    BelowFloor,
}

impl Filtered {
    pub const ALL: [Filtered; 10] = [
        Filtered::NoCreative,
        Filtered::NoDeal,
        Filtered::SeatNotAllowed,
        Filtered::BelowDealFloor,
        Filtered::NoFittingCreative,
        Filtered::BlockedAttribute,
        Filtered::BlockedCategory,
        Filtered::BlockedAdvertiser,
        Filtered::BlockedApp,
        Filtered::BelowFloor,
    ];

    /// The reason's name, as no-bid headers, metrics and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Filtered::NoCreative => "NoCreative",
            Filtered::SeatNotAllowed => "SeatNotAllowed",
            Filtered::NoDeal => "NoDeal",
            Filtered::BelowDealFloor => "BelowDealFloor",
            Filtered::NoFittingCreative => "NoFittingCreative",
            Filtered::BlockedAttribute => "BlockedAttribute",
            Filtered::BlockedCategory => "BlockedCategory",
            Filtered::BlockedAdvertiser => "BlockedAdvertiser",
            Filtered::BlockedApp => "BlockedApp",
            Filtered::BelowFloor => "BelowFloor",
        }
    }
}

/// Whether `domain` is `blocked` or one of its subdomains (both compared without regard to case).
fn domain_within(domain: &str, blocked: &str) -> bool {
    let (domain, blocked) = (domain.as_bytes(), blocked.as_bytes());
    domain.len() >= blocked.len()
        && domain[domain.len() - blocked.len()..].eq_ignore_ascii_case(blocked)
        && (domain.len() == blocked.len() || domain[domain.len() - blocked.len() - 1] == b'.')
}

/// Whether category `cat` is `blocked` or under it (`IAB1-2` is under `IAB1`).
fn category_within(cat: &str, blocked: &str) -> bool {
    cat.strip_prefix(blocked)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

/// Why `creative` may not fill `placement` (through a deal allowing `wadomain`), or the size it is shown at.
fn creative_fits<C>(
    creative: &Creative,
    placement: &Placement<'_, C>,
    wadomain: &[String],
) -> Result<Option<Size>, Filtered> {
    let slot = placement
        .slot(creative.format)
        .ok_or(Filtered::NoFittingCreative)?;
    let size = match (creative.format, slot.sizes) {
        (_, []) => creative.sizes.first().copied(),
        (Format::Banner, sizes) => Some(
            *sizes
                .iter()
                .find(|s| creative.sizes.contains(s))
                .ok_or(Filtered::NoFittingCreative)?,
        ),
        _ => creative.sizes.first().copied(),
    };
    if creative.attr.iter().any(|a| slot.battr.contains(a)) {
        return Err(Filtered::BlockedAttribute);
    }
    let category_blocked = if placement.cattax == creative.cattax {
        creative
            .cat
            .iter()
            .any(|c| placement.bcat.iter().any(|b| category_within(c, b)))
    } else {
        !placement.bcat.is_empty()
    };
    if category_blocked {
        return Err(Filtered::BlockedCategory);
    }
    let advertiser_blocked = creative
        .adomain
        .iter()
        .any(|d| placement.badv.iter().any(|b| domain_within(d, b)));
    let advertiser_allowed = wadomain.is_empty()
        || creative
            .adomain
            .iter()
            .any(|d| wadomain.iter().any(|w| d.eq_ignore_ascii_case(w)));
    if advertiser_blocked || !advertiser_allowed {
        return Err(Filtered::BlockedAdvertiser);
    }
    if creative
        .bundle
        .as_ref()
        .is_some_and(|b| placement.bapp.contains(b))
    {
        return Err(Filtered::BlockedApp);
    }
    Ok(size)
}

/// The first of `ads`' creatives that may bid on `placement` at `price`, and through which door (its floor met:
/// the deal's, or the open auction's); or the furthest reason none may.
pub fn fit<'c, 'p, C>(
    ads: &'c Ads,
    price: Cpm<C>,
    placement: &Placement<'p, C>,
) -> Result<Fit<'c, 'p, C>, Filtered> {
    if ads.creatives.is_empty() {
        return Err(Filtered::NoCreative);
    }
    let seat = ads.seat.as_deref();
    let seat_allowed =
        |wseat: &[String]| wseat.is_empty() || seat.is_some_and(|s| wseat.iter().any(|w| w == s));
    if !seat_allowed(placement.wseat)
        || seat.is_some_and(|s| placement.bseat.iter().any(|b| b == s))
    {
        return Err(Filtered::SeatNotAllowed);
    }
    // The doors: the deals it targets that are offered here, or the open auction.
    let mut why = Filtered::NoDeal;
    let mut doors: Vec<(Option<&'p Deal<'p, C>>, Cpm<C>)> = Vec::new();
    if ads.deals.is_empty() {
        if !placement.private_auction {
            doors.push((None, placement.floor));
        }
    } else {
        for deal in placement.deals {
            if !ads.deals.iter().any(|d| d == deal.id) {
                continue;
            }
            if !seat_allowed(deal.wseat) {
                why = why.max(Filtered::SeatNotAllowed);
                continue;
            }
            if price < deal.floor {
                why = why.max(Filtered::BelowDealFloor);
                continue;
            }
            doors.push((Some(deal), deal.floor));
        }
    }
    for (deal, floor) in doors {
        let wadomain = deal.map_or(&[][..], |d| d.wadomain);
        for creative in &ads.creatives {
            match creative_fits(creative, placement, wadomain) {
                // A deal's floor was checked above; the open auction's is checked once a creative fits, so
                // that a campaign with nothing to show says so rather than naming the floor.
                Ok(_) if deal.is_none() && (price < floor || price.is_zero()) => {
                    why = why.max(Filtered::BelowFloor);
                    break;
                }
                Ok(size) => {
                    return Ok(Fit {
                        creative,
                        size,
                        deal: deal.map(|d| d.id),
                        floor,
                        max_bid: if deal.is_some_and(|d| d.fixed_price) {
                            floor
                        } else {
                            price
                        },
                    })
                }
                Err(reason) => why = why.max(reason),
            }
        }
    }
    Err(why)
}

#[cfg(test)]
mod tests;
