//! One loop's pacer: decides bid requests against a snapshot, its own ledger and its controllers. This is
//! the decision code the service and the simulator share.

use crate::ledger::{FastMap, Ledger, LedgerConfig, ReserveError, Slice};
use crate::money::{Cpm, Currency};
use crate::proto::{
    encode_acks, BidBatch, BidRequest, CampaignId, Decision, DecisionsWriter, Notice, NoticeBatch,
    NoticeStatus, Status, DECISION_NAMES,
};
use crate::snapshot::Snapshot;
use crate::strategy::{Control, Input, Pacing};

/// A loop's decision state. Owned by its loop; nothing in it is shared.
pub struct LoopPacer<C> {
    pub ledger: Ledger<C>,
    controls: FastMap<CampaignId, Control>,
    /// Decisions made since the last [`LoopPacer::take_decisions`], by [`Decision::index`]: the loop's own
    /// counts, which the service adds to its metrics (this crate has none).
    decisions: [u64; DECISION_NAMES.len()],
}

impl<C: Currency> LoopPacer<C> {
    pub fn new(ledger: LedgerConfig) -> Self {
        LoopPacer {
            ledger: Ledger::new(ledger),
            controls: FastMap::default(),
            decisions: [0; DECISION_NAMES.len()],
        }
    }

    pub fn control(&self, campaign: CampaignId) -> Control {
        self.controls.get(&campaign).copied().unwrap_or_default()
    }

    /// Moves the controllers and the ledger's clock to `now_ms`. Call it every control interval (or more
    /// often: each strategy moves only when its own interval has passed).
    pub fn tick(&mut self, snapshot: &Snapshot<C>, now_ms: u64) {
        self.ledger.advance(now_ms);
        for campaign in snapshot.campaigns() {
            let spent = self
                .ledger
                .slice(campaign.id)
                .map(Slice::campaign_spent)
                .unwrap_or_default();
            let control = self.controls.entry(campaign.id).or_default();
            *control = campaign
                .strategy
                .tick(&campaign.goal(), *control, spent, now_ms);
        }
    }

    /// Decides one request: among the candidates that are configured, in flight, targeted, priced at or
    /// above the floor, funded on this loop and let through by their strategy, the highest price wins (the
    /// lower campaign id on a tie), and its price is reserved. With no winner, the reason reported is that of
    /// the candidate that got furthest.
    pub fn decide(
        &mut self,
        snapshot: &Snapshot<C>,
        request: &BidRequest<'_, C>,
        now_ms: u64,
    ) -> Decision<C> {
        let decision = self.judge(snapshot, request, now_ms);
        self.decisions[decision.index()] += 1;
        decision
    }

    /// Why a candidate without budget on this loop gets no bid: the campaign's budget is spent, or the
    /// node's budget source is not answering (then the operator must look at Redis, not at budgets).
    fn no_budget(&self) -> Status {
        if self.ledger.budget_source_down {
            Status::BudgetUnavailable
        } else {
            Status::BudgetExhausted
        }
    }

    /// The decisions counted since the last call, by [`Decision::index`] (names in [`DECISION_NAMES`]);
    /// the counts start again from zero.
    pub fn take_decisions(&mut self) -> [u64; DECISION_NAMES.len()] {
        std::mem::replace(&mut self.decisions, [0; DECISION_NAMES.len()])
    }

    fn judge(
        &mut self,
        snapshot: &Snapshot<C>,
        request: &BidRequest<'_, C>,
        now_ms: u64,
    ) -> Decision<C> {
        let header = &request.header;
        if request.candidates.is_empty() {
            return Decision::NoBid(Status::NoCandidates);
        }
        if now_ms >= header.deadline_ms {
            return Decision::NoBid(Status::Expired);
        }
        let no_slice = Slice::default();
        let mut best: Option<(Cpm<C>, CampaignId)> = None;
        let mut why = Status::UnknownCampaign;
        for candidate in request.candidates {
            let Some(campaign) = snapshot.campaign(candidate.campaign) else {
                continue;
            };
            let price = candidate.max_bid.min(campaign.max_cpm);
            let slice = self.ledger.slice(campaign.id).unwrap_or(&no_slice);
            let verdict = if !campaign.flight.contains(now_ms) {
                Err(Status::FlightInactive)
            } else if !campaign.targeting.matches(header) {
                Err(Status::NotTargeted)
            } else if price < header.floor || price.is_zero() {
                Err(Status::BelowFloor)
            } else if slice.available() < price.per_impression() {
                Err(self.no_budget())
            } else if !campaign.strategy.participate(&Input {
                goal: campaign.goal(),
                request: header,
                price,
                slice,
                control: self.control(campaign.id),
                now_ms,
            }) {
                Err(Status::Paced)
            } else {
                Ok(())
            };
            if verdict == Err(self.no_budget()) {
                let shortfall = &mut self.ledger.slice_mut(campaign.id).shortfall;
                *shortfall = (*shortfall).max(price.per_impression());
            }
            match verdict {
                Err(status) => why = why.max(status),
                Ok(()) => {
                    let better = best.is_none_or(|(p, id)| {
                        (price, std::cmp::Reverse(campaign.id)) > (p, std::cmp::Reverse(id))
                    });
                    if better {
                        best = Some((price, campaign.id));
                    }
                }
            }
        }
        let Some((price, campaign)) = best else {
            return Decision::NoBid(why);
        };
        match self.ledger.reserve(now_ms, header.key, campaign, price) {
            Ok(()) => Decision::Bid { campaign, price },
            Err(ReserveError::Duplicate) => Decision::NoBid(Status::DuplicateImpression),
            Err(ReserveError::TooManyTracked | ReserveError::JournalUnavailable) => {
                Decision::NoBid(Status::Overloaded)
            }
            Err(ReserveError::BudgetExhausted) => Decision::NoBid(self.no_budget()),
        }
    }

    pub fn notice(&mut self, now_ms: u64, notice: &Notice<C>) -> NoticeStatus {
        self.ledger.notice(now_ms, notice)
    }

    /// Decides a whole BIDS frame on one snapshot and writes the DECISIONS frame to `out`: malformed
    /// requests get their `Malformed*` status, the others a decision, all in order.
    pub fn decide_batch(
        &mut self,
        snapshot: &Snapshot<C>,
        batch: &BidBatch<'_, C>,
        now_ms: u64,
        out: &mut Vec<u8>,
    ) {
        let mut w = DecisionsWriter::begin(out, batch.batch_id);
        for request in batch.requests() {
            w.push(match request {
                Ok(request) => self.decide(snapshot, &request, now_ms),
                Err(status) => {
                    self.decisions[Decision::<C>::NoBid(status).index()] += 1;
                    Decision::NoBid(status)
                }
            });
        }
        w.finish();
    }

    /// Applies a NOTICES frame and writes the ACKS frame to `out`. A notice this loop does not know goes to
    /// `unknown`, which may hand it on (to the coordinator) and says what to answer.
    pub fn apply_notices(
        &mut self,
        batch: &NoticeBatch<'_, C>,
        now_ms: u64,
        out: &mut Vec<u8>,
        mut unknown: impl FnMut(Notice<C>) -> NoticeStatus,
    ) {
        let statuses: Vec<NoticeStatus> = batch
            .notices()
            .map(|n| {
                n.map_or(NoticeStatus::Malformed, |n| match self.notice(now_ms, &n) {
                    NoticeStatus::Unknown => unknown(n),
                    status => status,
                })
            })
            .collect();
        encode_acks(out, &statuses);
    }
}

#[cfg(test)]
mod tests;
