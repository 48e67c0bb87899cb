//! A latency histogram with bounded memory: log-linear buckets (each power
//! of two split into `SUB_BUCKETS` linear steps), so any recorded value is
//! reported within 1/SUB_BUCKETS of its true value, however many samples
//! are recorded.

/// Linear steps per power of two (relative error at most 1/64).
const SUB_BUCKETS: usize = 64;
const SUB_BUCKET_BITS: u32 = 6;
/// Powers of two covered: values up to 2^40 microseconds (about 12 days).
const MAGNITUDES: usize = 40;
pub const BUCKETS_MAX: usize = SUB_BUCKETS * (MAGNITUDES + 1);

#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; BUCKETS_MAX], total: 0 }
    }
}

fn bucket_of(value: u64) -> usize {
    if value < SUB_BUCKETS as u64 {
        return value as usize;
    }
    let magnitude = 63 - value.leading_zeros() - SUB_BUCKET_BITS + 1;
    let sub = (value >> magnitude) as usize - SUB_BUCKETS / 2;
    let index = SUB_BUCKETS + (magnitude as usize - 1) * (SUB_BUCKETS / 2) + sub;
    index.min(BUCKETS_MAX - 1)
}

/// The largest value that falls into `index` (reported percentiles are
/// never below the true value).
fn bucket_upper(index: usize) -> u64 {
    if index < SUB_BUCKETS {
        return index as u64;
    }
    let offset = index - SUB_BUCKETS;
    let magnitude = (offset / (SUB_BUCKETS / 2)) as u32 + 1;
    let sub = (offset % (SUB_BUCKETS / 2) + SUB_BUCKETS / 2) as u64;
    ((sub + 1) << magnitude) - 1
}

impl Histogram {
    pub fn record(&mut self, value: u64) {
        self.counts[bucket_of(value)] += 1;
        self.total += 1;
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0.0..=1.0); 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return bucket_upper(index);
            }
        }
        bucket_upper(BUCKETS_MAX - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_values_within_the_relative_error() {
        for value in (0..200_000u64).chain([1 << 20, (1 << 30) + 12345, 1 << 39]) {
            let upper = bucket_upper(bucket_of(value));
            assert!(upper >= value, "value {value} upper {upper}");
            assert!(upper - value <= value / 32 + 1, "value {value} upper {upper}");
        }
    }

    #[test]
    fn quantiles_match_a_naive_sort() {
        let mut histogram = Histogram::default();
        let mut values: Vec<u64> = (0..10_000u64).map(|n| (n * 7919) % 50_000).collect();
        for value in &values {
            histogram.record(*value);
        }
        values.sort();
        for q in [0.5, 0.99, 0.999] {
            let exact = values[((q * values.len() as f64).ceil() as usize).max(1) - 1];
            let approx = histogram.quantile(q);
            assert!(approx >= exact && approx - exact <= exact / 32 + 1, "q {q}: {approx} vs {exact}");
        }
    }
}
