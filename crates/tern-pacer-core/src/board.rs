//! What each loop last published of its ledger, for views that must not touch the loops' thread-local
//! state (the admin JSON): a loop publishes while it holds the coordinator's lock, so grants on the board
//! always add up to the coordinator's (see `tern-pacer`'s admin module).

use parking_lot::Mutex;

use crate::money::Currency;
use crate::pacer::LoopPacer;
use crate::proto::CampaignId;

/// One campaign's slice on one loop, as last published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceFigures {
    pub campaign: CampaignId,
    pub granted_micros: u64,
    pub reserved_micros: u64,
    pub spent_micros: u64,
    pub exposure_micros: u64,
    pub disputed_micros: u64,
    pub rate_ppm: u32,
}

impl SliceFigures {
    /// Nothing granted, reserved or spent: a campaign absent from a loop's ledger.
    pub fn empty(campaign: CampaignId) -> Self {
        SliceFigures {
            campaign,
            granted_micros: 0,
            reserved_micros: 0,
            spent_micros: 0,
            exposure_micros: 0,
            disputed_micros: 0,
            rate_ppm: 0,
        }
    }
}

/// What one loop last published.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoopFigures {
    /// When (Unix milliseconds); 0 for a loop that has not published yet.
    pub published_ms: u64,
    /// In the ledger's order (sorted by the reader, off the loops' path).
    pub campaigns: Vec<SliceFigures>,
}

/// The loops' published figures.
#[derive(Debug, Default)]
pub struct Board {
    loops: Mutex<Vec<LoopFigures>>,
}

impl Board {
    /// Replaces loop `loop_id`'s figures with its pacer's current state.
    pub fn publish<C: Currency>(&self, loop_id: usize, pacer: &LoopPacer<C>, now_ms: u64) {
        let mut loops = self.loops.lock();
        if loops.len() <= loop_id {
            loops.resize_with(loop_id + 1, LoopFigures::default);
        }
        let figures = &mut loops[loop_id];
        figures.published_ms = now_ms;
        figures.campaigns.clear();
        figures
            .campaigns
            .extend(pacer.ledger.slices().map(|(campaign, slice)| SliceFigures {
                campaign,
                granted_micros: slice.granted.micros(),
                reserved_micros: slice.reserved.micros(),
                spent_micros: slice.spent.micros(),
                exposure_micros: slice.exposure.micros(),
                disputed_micros: slice.disputed.micros(),
                rate_ppm: pacer.control(campaign).rate_ppm,
            }));
    }

    /// A copy of every loop's figures.
    pub fn loops(&self) -> Vec<LoopFigures> {
        self.loops.lock().clone()
    }
}
