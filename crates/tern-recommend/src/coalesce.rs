//! Work a loop does once for requests that ask the same thing: an identical request already in flight is
//! waited for rather than run again (single-flight), and Chaining's answers are kept for a short time,
//! since a popular profile is viewed by the same viewer several times in a row (a back button, a
//! refresh). Both are per loop, so neither takes a lock.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures::future::{LocalBoxFuture, Shared};
use tern_recommend_proto::{RecommendError, RecommendRequest, Recommendations};

/// A request's answer, shared by every identical request waiting for it.
pub type Answer = Rc<Result<Recommendations, RecommendError>>;
pub type SharedAnswer = Shared<LocalBoxFuture<'static, Answer>>;

/// The requests a loop is answering, by what they ask.
#[derive(Default)]
pub struct InFlight(RefCell<HashMap<RecommendRequest, SharedAnswer>>);

impl InFlight {
    pub fn get(&self, request: &RecommendRequest) -> Option<SharedAnswer> {
        self.0.borrow().get(request).cloned()
    }

    pub fn insert(&self, request: RecommendRequest, answer: SharedAnswer) {
        self.0.borrow_mut().insert(request, answer);
    }

    pub fn remove(&self, request: &RecommendRequest) {
        self.0.borrow_mut().remove(request);
    }
}

/// Answers kept for `ttl`, at most `capacity` of them; the oldest go first (with one time to live for
/// all, the oldest is also the first to expire).
pub struct AnswerCache {
    ttl: Duration,
    capacity: usize,
    entries: RefCell<Entries>,
}

#[derive(Default)]
struct Entries {
    by_request: HashMap<RecommendRequest, (Instant, Answer)>,
    /// Requests in the order they were kept, with when they expire.
    order: VecDeque<(RecommendRequest, Instant)>,
}

impl AnswerCache {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        AnswerCache {
            ttl,
            capacity,
            entries: RefCell::default(),
        }
    }

    /// Whether it keeps anything (a zero time to live or capacity turns it off).
    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero() && self.capacity > 0
    }

    pub fn get(&self, request: &RecommendRequest, now: Instant) -> Option<Answer> {
        let entries = self.entries.borrow();
        let (expires, answer) = entries.by_request.get(request)?;
        (*expires > now).then(|| Rc::clone(answer))
    }

    pub fn insert(&self, request: RecommendRequest, answer: Answer, now: Instant) {
        if !self.enabled() {
            return;
        }
        let mut entries = self.entries.borrow_mut();
        let Entries { by_request, order } = &mut *entries;
        while let Some((oldest, expires)) = order.front() {
            if *expires > now && order.len() < self.capacity {
                break;
            }
            // The entry may have been kept again since, with a later expiry: that one stays.
            if by_request.get(oldest).is_some_and(|(e, _)| e == expires) {
                by_request.remove(oldest);
            }
            order.pop_front();
        }
        let expires = now + self.ttl;
        order.push_back((request.clone(), expires));
        by_request.insert(request, (expires, answer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chaining(profile: i64) -> RecommendRequest {
        RecommendRequest {
            viewer: 1,
            profile: Some(profile),
            n: 10,
            deadline_ms: None,
            exclude: Vec::new(),
        }
    }

    fn answer(version: &str) -> Answer {
        Rc::new(Ok(Recommendations {
            model_version: version.into(),
            ..Recommendations::default()
        }))
    }

    fn version(answer: Option<Answer>) -> Option<String> {
        answer.and_then(|a| a.as_ref().as_ref().ok().map(|r| r.model_version.clone()))
    }

    #[test]
    fn answers_expire_and_the_oldest_make_room() {
        let cache = AnswerCache::new(Duration::from_millis(100), 2);
        let t0 = Instant::now();
        cache.insert(chaining(1), answer("a"), t0);
        assert_eq!(version(cache.get(&chaining(1), t0)).unwrap(), "a");
        assert!(cache.get(&chaining(2), t0).is_none());
        assert!(cache
            .get(&chaining(1), t0 + Duration::from_millis(100))
            .is_none());
        // Kept again later: the newer one stays when the older entry leaves the queue.
        cache.insert(chaining(1), answer("b"), t0 + Duration::from_millis(50));
        cache.insert(chaining(2), answer("c"), t0 + Duration::from_millis(60));
        let later = t0 + Duration::from_millis(70);
        assert_eq!(version(cache.get(&chaining(1), later)).unwrap(), "b");
        // At capacity: the oldest queued entries go, then the newest is kept.
        cache.insert(chaining(3), answer("d"), later);
        assert!(cache.get(&chaining(1), later).is_none());
        assert_eq!(version(cache.get(&chaining(2), later)).unwrap(), "c");
        assert_eq!(version(cache.get(&chaining(3), later)).unwrap(), "d");
        assert!(cache.entries.borrow().by_request.len() <= 2);
    }

    #[test]
    fn a_zero_time_to_live_keeps_nothing() {
        let cache = AnswerCache::new(Duration::ZERO, 100);
        let now = Instant::now();
        cache.insert(chaining(1), answer("a"), now);
        assert!(cache.get(&chaining(1), now).is_none());
    }
}
