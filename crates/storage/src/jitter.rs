//! Random spread for periodic background work, so that processes started
//! together do not keep doing it at the same moments. The members of a set
//! started by one command checkpointed within tens of milliseconds of each
//! other, every interval, for as long as they ran: on a machine that hosts
//! all of them, every fsync of every member then waited behind three
//! checkpoints' writes at once, and a stepdown that met them took 200-300 ms
//! instead of 30.

use std::time::Duration;

/// xorshift64*: plenty for spreading timers, and no dependency.
#[derive(Debug)]
pub struct Jitter {
    state: u64,
}

impl Jitter {
    pub fn new(seed: u64) -> Jitter {
        // Any state but zero.
        Jitter { state: seed | 1 }
    }

    fn next(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// `base` times a factor drawn uniformly from `low_percent` (included)
    /// to `high_percent` (excluded).
    pub fn spread(&mut self, base: Duration, low_percent: u32, high_percent: u32) -> Duration {
        assert!(low_percent < high_percent);
        let per_mille_span = u64::from(high_percent - low_percent) * 10;
        let per_mille = u64::from(low_percent) * 10 + self.next() % per_mille_span;
        let nanos = base.as_nanos().saturating_mul(u128::from(per_mille)) / 1000;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_stays_within_its_bounds_and_varies() {
        let base = Duration::from_millis(5_000);
        let mut jitter = Jitter::new(7);
        let draws: Vec<Duration> = (0..1_000).map(|_| jitter.spread(base, 75, 125)).collect();
        assert!(
            draws.iter().all(|d| *d >= base * 3 / 4 && *d < base * 5 / 4),
            "{draws:?}"
        );
        let (low, high) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
        assert!(
            *low < base * 4 / 5 && *high > base * 6 / 5,
            "draws cover the range: {low:?}..{high:?}"
        );
    }

    #[test]
    fn different_seeds_give_different_draws() {
        let base = Duration::from_millis(5_000);
        let a: Vec<Duration> = (0..8)
            .scan(Jitter::new(1), |j, _| Some(j.spread(base, 50, 150)))
            .collect();
        let b: Vec<Duration> = (0..8)
            .scan(Jitter::new(2), |j, _| Some(j.spread(base, 50, 150)))
            .collect();
        assert_ne!(a, b);
    }
}
