//! The configuration as one immutable snapshot: campaigns, their flights, targeting, bid caps and pacing
//! strategies. A watcher builds a complete new snapshot and swaps it in atomically ([`SnapshotCell`]); a
//! batch is decided on the one snapshot it loaded, so a reload can never be half-seen.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::ads::Ads;
use crate::ledger::FastMap;
use crate::money::{Cpm, Micros};
use crate::proto::{CampaignId, Device, Geo, RequestHeader};
pub use crate::strategy::Flight;
use crate::strategy::{Goal, Strategy};

/// Which impressions a campaign wants. An empty list means "any".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targeting {
    /// Bit `h` set: the campaign runs at local hour `h`.
    pub hours: u32,
    /// Bit `d` set: the campaign wants device class `d` (see [`Device`]).
    pub devices: u8,
    pub geos: Vec<Geo>,
    /// Sorted site/app ids.
    pub sites: Vec<u64>,
}

impl Default for Targeting {
    fn default() -> Self {
        Targeting {
            hours: (1 << 24) - 1,
            devices: (1 << Device::ALL.len()) - 1,
            geos: Vec::new(),
            sites: Vec::new(),
        }
    }
}

impl Targeting {
    pub fn matches<C>(&self, request: &RequestHeader<C>) -> bool {
        self.hours & (1 << request.hour) != 0
            && self.devices & (1 << request.device as u8) != 0
            && (self.geos.is_empty() || self.geos.contains(&request.geo))
            && (self.sites.is_empty() || self.sites.binary_search(&request.site_id).is_ok())
    }
}

/// One campaign's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Campaign<C> {
    pub id: CampaignId,
    /// The configured budget for the whole flight (deltas from the source of truth come on top, see
    /// [`crate::coordinator::Coordinator::apply_delta`]).
    pub budget: Micros<C>,
    pub flight: Flight,
    /// The most this campaign bids, whatever the gateway allows.
    pub max_cpm: Cpm<C>,
    pub targeting: Targeting,
    pub strategy: Strategy,
    /// Its creatives, seat and deals: what OpenRTB bids carry and which impressions they may fill.
    pub ads: Ads,
}

impl<C> Campaign<C> {
    /// What its strategy paces against.
    pub fn goal(&self) -> Goal<C> {
        Goal {
            id: self.id,
            budget: self.budget,
            flight: self.flight,
        }
    }
}

/// A complete, immutable configuration.
#[derive(Debug, Clone)]
pub struct Snapshot<C> {
    /// Increases with every new snapshot.
    pub version: u64,
    campaigns: FastMap<CampaignId, Campaign<C>>,
}

impl<C> Snapshot<C> {
    /// A snapshot of these campaigns; a later campaign with the same id replaces an earlier one. Site lists
    /// are sorted here so that lookups can binary-search them.
    pub fn new(version: u64, campaigns: impl IntoIterator<Item = Campaign<C>>) -> Self {
        let campaigns = campaigns
            .into_iter()
            .map(|mut c| {
                c.targeting.sites.sort_unstable();
                (c.id, c)
            })
            .collect();
        Snapshot { version, campaigns }
    }
    pub fn campaign(&self, id: CampaignId) -> Option<&Campaign<C>> {
        self.campaigns.get(&id)
    }
    /// Campaigns in id order (deterministic).
    pub fn campaigns(&self) -> Vec<&Campaign<C>> {
        let mut v: Vec<_> = self.campaigns.values().collect();
        v.sort_by_key(|c| c.id);
        v
    }
}

/// The current snapshot, shared by every loop: reading it is a lock-free load; a swap never blocks readers.
pub struct SnapshotCell<C>(ArcSwap<Snapshot<C>>);

impl<C> SnapshotCell<C> {
    pub fn new(snapshot: Snapshot<C>) -> Self {
        SnapshotCell(ArcSwap::from_pointee(snapshot))
    }
    /// The current snapshot, kept alive as long as the returned `Arc`.
    pub fn load(&self) -> Arc<Snapshot<C>> {
        self.0.load_full()
    }
    /// The current snapshot for one batch, without touching the shared reference count (arc-swap's
    /// thread-local debt slots): the hot path's way to read it.
    pub fn current(&self) -> arc_swap::Guard<Arc<Snapshot<C>>> {
        self.0.load()
    }
    /// Installs a new snapshot; batches already running finish on the old one.
    pub fn store(&self, snapshot: Snapshot<C>) {
        self.0.store(Arc::new(snapshot));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::Usd;
    use crate::proto::ImpKey;

    fn request(hour: u8, device: Device, geo: &[u8; 2], site_id: u64) -> RequestHeader<Usd> {
        RequestHeader {
            key: ImpKey {
                auction_id: 1,
                imp_id: 1,
            },
            floor: Cpm::ZERO,
            deadline_ms: 0,
            hour,
            device,
            geo: Geo(*geo),
            site_id,
        }
    }

    #[test]
    fn targeting_matches_each_dimension() {
        let any = Targeting::default();
        assert!(any.matches(&request(23, Device::Tv, b"--", 9)));
        let t = Targeting {
            hours: 0b1111 << 8,
            devices: 1 << Device::Phone as u8,
            geos: vec![Geo(*b"FR"), Geo(*b"DE")],
            sites: vec![3, 5, 8],
        };
        assert!(t.matches(&request(9, Device::Phone, b"DE", 5)));
        assert!(!t.matches(&request(12, Device::Phone, b"DE", 5)));
        assert!(!t.matches(&request(9, Device::Desktop, b"DE", 5)));
        assert!(!t.matches(&request(9, Device::Phone, b"US", 5)));
        assert!(!t.matches(&request(9, Device::Phone, b"DE", 4)));
    }

    #[test]
    fn readers_keep_their_snapshot_across_a_swap() {
        let campaign = |budget| Campaign::<Usd> {
            id: CampaignId(1),
            budget: Micros::from_units(budget),
            flight: Flight {
                start_ms: 0,
                end_ms: 10,
            },
            max_cpm: Cpm::from_units(1),
            targeting: Targeting {
                sites: vec![9, 2, 5],
                ..Targeting::default()
            },
            strategy: Strategy::HardCap,
            ads: Ads::default(),
        };
        let cell = SnapshotCell::new(Snapshot::new(1, [campaign(10)]));
        let old = cell.load();
        cell.store(Snapshot::new(2, [campaign(20)]));
        assert_eq!(old.version, 1);
        assert_eq!(
            old.campaign(CampaignId(1)).unwrap().budget,
            Micros::from_units(10)
        );
        let new = cell.load();
        assert_eq!(
            new.campaign(CampaignId(1)).unwrap().budget,
            Micros::from_units(20)
        );
        assert_eq!(
            new.campaign(CampaignId(1)).unwrap().targeting.sites,
            vec![2, 5, 9]
        );
    }
}
