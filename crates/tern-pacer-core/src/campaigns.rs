//! The campaigns file's format (the embedded source of truth; its watcher is in `tern-pacer-store`). A file (TOML, or JSON when its
//! name ends in `.json`) lists the campaigns; it is parsed and validated whole into a new [`Snapshot`], and
//! only a valid file replaces the running configuration: a broken edit is reported and the pacer keeps
//! deciding on the last good one.
//!
//! ```toml
//! currency = "USD"
//!
//! [[campaign]]
//! id = 1
//! budget = "500.00"            # whole units, at most six decimals
//! max_cpm = "4.00"
//! start_ms = 1700006400000     # flight, Unix milliseconds, end excluded
//! end_ms = 1700092800000
//! strategy = { kind = "even", lookahead_ms = 60000 }
//! targeting = { hours = [18, 19, 20], devices = ["phone", "tablet"], geos = ["US"], sites = [7, 9] }
//! seat = "seat-7"              # optional: the buyer seat its bids go through (wseat/bseat)
//! deals = ["deal-42"]          # optional: bid only through these deals (none: the open auction only)
//!
//! [[campaign.creative]]
//! id = "cr-1"
//! format = "banner"            # banner, video or native
//! sizes = [[300, 250], [320, 50]]   # required for a banner
//! adomain = ["shoes.example"]  # at least one
//! cat = ["IAB18-3"]            # optional: content categories, in `cattax` (default 1, IAB 1.0)
//! attr = [3]                   # optional: AdCOM creative attributes, 1-17
//! bundle = "com.example.shoes" # optional: the advertised app, for bapp
//! adm = "<a href='https://shoes.example/'><img src='https://cdn.shoes.example/300x250.png'></a>"
//! ```
//!
//! `adm` is the markup the bid carries: HTML or JavaScript for a banner, VAST XML for a video, the native
//! response's JSON object for a native ad (the obvious mismatches are refused).
//!
//! Strategies: `hard-cap`, `even`, `shaped` (with a 24-entry `curve`), `throttle`, `pi`; their parameters
//! are optional and default as in [`crate::strategy`]. Targeting lists are optional; absent means "any".
//! Creatives, seat and deals are what OpenRTB bids carry and are checked against ([`crate::ads`]); a
//! campaign without creatives bids only through the gateway protocol, which names campaigns.

use std::path::Path;

use serde::Deserialize;

use crate::ads::{Ads, Creative, Format, DEFAULT_CATTAX};
use crate::money::{Cpm, Currency, Micros};
use crate::proto::{CampaignId, Device, Geo};
use crate::snapshot::{Campaign, Flight, Snapshot, Targeting};
use crate::strategy::{Even, Pi, Shaped, Strategy, Throttle};

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid pacer configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    currency: String,
    #[serde(default, rename = "campaign")]
    campaigns: Vec<CampaignEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CampaignEntry {
    id: u32,
    budget: String,
    max_cpm: String,
    start_ms: u64,
    end_ms: u64,
    strategy: StrategyEntry,
    #[serde(default)]
    targeting: TargetingEntry,
    seat: Option<String>,
    #[serde(default)]
    deals: Vec<String>,
    #[serde(default, rename = "creative")]
    creatives: Vec<CreativeEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreativeEntry {
    id: String,
    format: String,
    #[serde(default)]
    sizes: Vec<[u32; 2]>,
    adomain: Vec<String>,
    #[serde(default)]
    cat: Vec<String>,
    cattax: Option<u32>,
    #[serde(default)]
    attr: Vec<u32>,
    bundle: Option<String>,
    adm: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TargetingEntry {
    hours: Option<Vec<u8>>,
    devices: Option<Vec<String>>,
    #[serde(default)]
    geos: Vec<String>,
    #[serde(default)]
    sites: Vec<u64>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
enum StrategyEntry {
    // Braces, not a unit variant: serde checks a struct variant's fields against deny_unknown_fields, so
    // `{ kind = "hard-cap", lookahead_ms = 5 }` is refused rather than read as a plain hard cap.
    HardCap {},
    Even {
        lookahead_ms: Option<u64>,
    },
    Shaped {
        curve: [u32; 24],
        lookahead_ms: Option<u64>,
    },
    Throttle {
        initial_rate_ppm: Option<u32>,
        step_ppm: Option<u32>,
        interval_ms: Option<u64>,
        catch_up_ms: Option<u64>,
        min_rate_ppm: Option<u32>,
        finish_early_ppm: Option<u32>,
        curve: Option<[u32; 24]>,
        seed: Option<u64>,
    },
    Pi {
        bias_ppm: Option<u32>,
        kp_milli: Option<i64>,
        ki_milli: Option<i64>,
        interval_ms: Option<u64>,
        integral_limit_ppm: Option<i64>,
        curve: Option<[u32; 24]>,
        seed: Option<u64>,
    },
}

impl StrategyEntry {
    fn build(self) -> Strategy {
        match self {
            StrategyEntry::HardCap {} => Strategy::HardCap,
            StrategyEntry::Even { lookahead_ms } => Strategy::Even(Even {
                lookahead_ms: lookahead_ms.unwrap_or(Even::default().lookahead_ms),
            }),
            StrategyEntry::Shaped {
                curve,
                lookahead_ms,
            } => Strategy::Shaped(Shaped {
                curve,
                lookahead_ms: lookahead_ms.unwrap_or(Even::default().lookahead_ms),
            }),
            StrategyEntry::Throttle {
                initial_rate_ppm,
                step_ppm,
                interval_ms,
                catch_up_ms,
                min_rate_ppm,
                finish_early_ppm,
                curve,
                seed,
            } => {
                let d = Throttle::default();
                Strategy::Throttle(Throttle {
                    initial_rate_ppm: initial_rate_ppm.unwrap_or(d.initial_rate_ppm),
                    step_ppm: step_ppm.unwrap_or(d.step_ppm),
                    interval_ms: interval_ms.unwrap_or(d.interval_ms),
                    catch_up_ms: catch_up_ms.unwrap_or(d.catch_up_ms),
                    min_rate_ppm: min_rate_ppm.unwrap_or(d.min_rate_ppm),
                    finish_early_ppm: finish_early_ppm.unwrap_or(d.finish_early_ppm),
                    curve: curve.unwrap_or(d.curve),
                    seed: seed.unwrap_or(d.seed),
                })
            }
            StrategyEntry::Pi {
                bias_ppm,
                kp_milli,
                ki_milli,
                interval_ms,
                integral_limit_ppm,
                curve,
                seed,
            } => {
                let d = Pi::default();
                Strategy::Pi(Pi {
                    bias_ppm: bias_ppm.unwrap_or(d.bias_ppm),
                    kp_milli: kp_milli.unwrap_or(d.kp_milli),
                    ki_milli: ki_milli.unwrap_or(d.ki_milli),
                    interval_ms: interval_ms.unwrap_or(d.interval_ms),
                    integral_limit_ppm: integral_limit_ppm.unwrap_or(d.integral_limit_ppm),
                    curve: curve.unwrap_or(d.curve),
                    seed: seed.unwrap_or(d.seed),
                })
            }
        }
    }
}

fn device(name: &str) -> Option<Device> {
    Some(match name {
        "unknown" => Device::Unknown,
        "desktop" => Device::Desktop,
        "phone" => Device::Phone,
        "tablet" => Device::Tablet,
        "tv" => Device::Tv,
        _ => return None,
    })
}

fn campaign<C>(entry: CampaignEntry) -> Result<Campaign<C>, ConfigError> {
    let id = entry.id;
    let err = |what: String| ConfigError(format!("campaign {id}: {what}"));
    let budget = Micros::parse_units(&entry.budget).map_err(|e| err(format!("budget: {e}")))?;
    let max_cpm = Cpm::parse_units(&entry.max_cpm).map_err(|e| err(format!("max_cpm: {e}")))?;
    if entry.end_ms <= entry.start_ms {
        return Err(err("end_ms must be after start_ms".into()));
    }
    let t = entry.targeting;
    let mut targeting = Targeting::default();
    if let Some(hours) = t.hours {
        targeting.hours = 0;
        for h in hours {
            if h > 23 {
                return Err(err(format!("hour {h} is not 0-23")));
            }
            targeting.hours |= 1 << h;
        }
    }
    if let Some(devices) = t.devices {
        targeting.devices = 0;
        for name in devices {
            let d = device(&name).ok_or_else(|| {
                err(format!(
                    "device {name:?} is not unknown, desktop, phone, tablet or tv"
                ))
            })?;
            targeting.devices |= 1 << d as u8;
        }
    }
    for geo in t.geos {
        match geo.as_bytes() {
            &[a, b] if a.is_ascii_uppercase() && b.is_ascii_uppercase() => {
                targeting.geos.push(Geo([a, b]))
            }
            _ => {
                return Err(err(format!(
                    "geo {geo:?} is not a two-letter upper-case country code"
                )))
            }
        }
    }
    targeting.sites = t.sites;
    let ads = ads(entry.seat, entry.deals, entry.creatives).map_err(err)?;
    Ok(Campaign {
        id: CampaignId(id),
        budget,
        flight: Flight {
            start_ms: entry.start_ms,
            end_ms: entry.end_ms,
        },
        max_cpm,
        targeting,
        strategy: entry.strategy.build(),
        ads,
    })
}

/// Whether `text` reads as a domain name (letters, digits and hyphens in dot-separated labels, at least
/// two of them): what `adomain` must hold, without a scheme or a path.
fn is_domain(text: &str) -> bool {
    let labels: Vec<&str> = text.split('.').collect();
    labels.len() >= 2
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn creative(entry: CreativeEntry) -> Result<Creative, String> {
    let id = entry.id;
    let err = |what: String| format!("creative {id:?}: {what}");
    let format = Format::parse(&entry.format).ok_or_else(|| {
        err(format!(
            "format {:?} is not banner, video or native",
            entry.format
        ))
    })?;
    if let Some([w, h]) = entry.sizes.iter().find(|[w, h]| *w == 0 || *h == 0) {
        return Err(err(format!("size {w}x{h} is empty")));
    }
    if format == Format::Banner && entry.sizes.is_empty() {
        return Err(err("a banner needs its sizes".into()));
    }
    if entry.adomain.is_empty() {
        return Err(err(
            "adomain is empty (exchanges drop bids without the advertiser's domain)".into(),
        ));
    }
    if let Some(bad) = entry.adomain.iter().find(|d| !is_domain(d)) {
        return Err(err(format!("adomain {bad:?} is not a domain name")));
    }
    if entry
        .cat
        .iter()
        .any(|c| c.trim().is_empty() || c.trim() != c)
    {
        return Err(err("a category is empty or has spaces around it".into()));
    }
    if let Some(a) = entry.attr.iter().find(|a| !(1..=17).contains(*a)) {
        return Err(err(format!(
            "attr {a} is not an AdCOM creative attribute (1-17)"
        )));
    }
    if entry.bundle.as_deref().is_some_and(|b| b.trim().is_empty()) {
        return Err(err("bundle is empty".into()));
    }
    // The markup is what the exchange serves: a wrong kind would show a broken ad, so the obvious mistakes
    // are refused here rather than by the exchange.
    match format {
        _ if entry.adm.trim().is_empty() => return Err(err("adm (the ad markup) is empty".into())),
        Format::Video if !entry.adm.contains("<VAST") => {
            return Err(err("a video's adm must be VAST XML".into()))
        }
        Format::Native
            if !serde_json::from_str::<serde_json::Value>(&entry.adm)
                .is_ok_and(|v| v.is_object()) =>
        {
            return Err(err(
                "a native ad's adm must be the native response's JSON object".into(),
            ))
        }
        _ => {}
    }
    Ok(Creative {
        format,
        sizes: entry.sizes.into_iter().map(|[w, h]| (w, h)).collect(),
        adomain: entry
            .adomain
            .iter()
            .map(|d| d.to_ascii_lowercase())
            .collect(),
        cat: entry.cat,
        cattax: entry.cattax.unwrap_or(DEFAULT_CATTAX),
        attr: entry.attr,
        bundle: entry.bundle,
        adm: entry.adm,
        id,
    })
}

fn ads(
    seat: Option<String>,
    deals: Vec<String>,
    entries: Vec<CreativeEntry>,
) -> Result<Ads, String> {
    if seat.as_deref().is_some_and(|s| s.trim().is_empty()) {
        return Err("seat is empty".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(deal) = deals
        .iter()
        .find(|d| d.trim().is_empty() || !seen.insert(d.as_str()))
    {
        return Err(format!("deal {deal:?} is empty or listed twice"));
    }
    let mut creatives = Vec::with_capacity(entries.len());
    let mut ids = std::collections::BTreeSet::new();
    for entry in entries {
        if entry.id.trim().is_empty() {
            return Err("a creative has an empty id".into());
        }
        if !ids.insert(entry.id.clone()) {
            return Err(format!("creative {:?} appears twice", entry.id));
        }
        creatives.push(creative(entry)?);
    }
    Ok(Ads {
        creatives,
        seat,
        deals,
    })
}

/// Parses and validates a configuration; `json` picks the format (else TOML).
pub fn parse<C: Currency>(
    text: &str,
    json: bool,
    version: u64,
) -> Result<Snapshot<C>, ConfigError> {
    let file: FileConfig = if json {
        serde_json::from_str(text).map_err(|e| ConfigError(e.to_string()))?
    } else {
        toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?
    };
    if file.currency.as_bytes() != C::CODE {
        return Err(ConfigError(format!(
            "currency {:?} is not the pacer's {}",
            file.currency,
            String::from_utf8_lossy(&C::CODE)
        )));
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut campaigns = Vec::with_capacity(file.campaigns.len());
    for entry in file.campaigns {
        if !ids.insert(entry.id) {
            return Err(ConfigError(format!("campaign {} appears twice", entry.id)));
        }
        campaigns.push(campaign(entry)?);
    }
    Ok(Snapshot::new(version, campaigns))
}

/// The `currency` a configuration names, to pick the pacer's currency type before parsing the rest.
pub fn currency(text: &str, json: bool) -> Result<String, ConfigError> {
    #[derive(Deserialize)]
    struct Currency {
        currency: String,
    }
    let parsed: Result<Currency, String> = if json {
        serde_json::from_str(text).map_err(|e| e.to_string())
    } else {
        toml::from_str(text).map_err(|e| e.to_string())
    };
    parsed.map(|c| c.currency).map_err(ConfigError)
}

/// Whether a configuration file is JSON (by its extension); otherwise it is TOML.
pub fn is_json(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

#[cfg(test)]
mod tests;
