//! Fixed-bucket histograms of durations kept in atomics, for numbers the store has no
//! history of (how long tasks waited for a running place, how long an agent's events took to
//! reach the subscribers). Recording never blocks and never allocates; reading gives
//! cumulative bucket counts, Prometheus's shape.
//!
//! This module only counts; it never decides what is measured or how it is shown.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The upper bounds of the queue-wait buckets, in seconds (the last, `+Inf`, is implied).
pub const WAIT_BOUNDS_SECS: [f64; 9] = [0.01, 0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0, 1800.0];

/// The upper bounds of the relay-lag buckets, in seconds: from a millisecond (an event stored
/// and announced as it came) to ten seconds (a store that could not keep up).
pub const RELAY_LAG_BOUNDS_SECS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// A histogram of durations over fixed bounds.
#[derive(Debug)]
pub(crate) struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative), one more than `bounds`: the last one `+Inf`.
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    /// The sum, in microseconds.
    sum_micros: AtomicU64,
}

/// What a `Histogram` (one of the engine's latency series) held when read.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Each bucket's upper bound in seconds and how many observations were at most that
    /// (cumulative, Prometheus's `le`); `+Inf` is [`HistogramSnapshot::count`].
    pub buckets: Vec<(f64, u64)>,
    /// How many observations.
    pub count: u64,
    /// Their sum, in seconds.
    pub sum_secs: f64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending upper bounds, in seconds).
    pub(crate) fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Adds one observation.
    pub(crate) fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(self.bounds.len());
        if let Some(bucket) = self.buckets.get(i) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now. Read without a lock: a concurrent observation may show in one field
    /// and not yet in another, which a scrape tolerates; the buckets are made cumulative here
    /// and never exceed the count given.
    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        let count = self.count.load(Ordering::Relaxed);
        let mut running = 0u64;
        let buckets = self
            .bounds
            .iter()
            .zip(self.buckets.iter())
            .map(|(bound, n)| {
                running = running.saturating_add(n.load(Ordering::Relaxed));
                (*bound, running.min(count))
            })
            .collect();
        HistogramSnapshot {
            buckets,
            count,
            sum_secs: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_the_sum_is_in_seconds() {
        let h = Histogram::new(&WAIT_BOUNDS_SECS);
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_millis(200));
        h.observe(Duration::from_secs(4000));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets[0], (0.01, 1));
        assert_eq!(s.buckets[2], (0.25, 2));
        assert_eq!(
            s.buckets.last(),
            Some(&(1800.0, 2)),
            "4000 s is only in +Inf"
        );
        assert!((s.sum_secs - 4000.205).abs() < 1e-6, "{}", s.sum_secs);

        let lag = Histogram::new(&RELAY_LAG_BOUNDS_SECS);
        lag.observe(Duration::from_micros(300));
        lag.observe(Duration::from_millis(30));
        let s = lag.snapshot();
        assert_eq!(s.buckets.len(), RELAY_LAG_BOUNDS_SECS.len());
        assert_eq!(
            (s.buckets[0], s.buckets[4], s.buckets[5]),
            ((0.001, 1), (0.025, 1), (0.05, 2))
        );
    }
}
