//! Interleaved rounds: every contender runs once per round, in an order
//! that rotates from round to round, so a machine that slows down during
//! the run slows every contender alike.

/// Runs each contender once (a warm-up, discarded), then `rounds` times,
/// interleaved; `out[c][r]` is contender `c`'s result in round `r`.
pub fn rotate<T>(rounds: usize, contenders: &mut [&mut dyn FnMut() -> T]) -> Vec<Vec<T>> {
    let n = contenders.len();
    for run in contenders.iter_mut() {
        run();
    }
    let mut out: Vec<Vec<T>> = (0..n).map(|_| Vec::with_capacity(rounds)).collect();
    for round in 0..rounds {
        for k in 0..n {
            let c = (round + k) % n;
            out[c].push(contenders[c]());
        }
    }
    out
}

/// [`rotate`] for ours and one peer.
pub fn pair(
    rounds: usize,
    mut ours: impl FnMut() -> f64,
    mut peer: impl FnMut() -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let mut out = rotate(rounds, &mut [&mut ours, &mut peer]);
    let peer = out.pop().expect("two contenders");
    let ours = out.pop().expect("two contenders");
    (ours, peer)
}

/// The value at quantile `q` (0..=1) of `samples`, nearest rank.
pub fn quantile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let rank = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len());
    samples[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_contender_runs_once_per_round_in_rotating_order() {
        let order = std::cell::RefCell::new(Vec::new());
        let mut a = || order.borrow_mut().push('a');
        let mut b = || order.borrow_mut().push('b');
        let out = rotate(3, &mut [&mut a, &mut b]);
        assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3]);
        let order: String = order.into_inner().into_iter().collect();
        assert_eq!(
            order,
            "ab" /* warm-up */
                .to_owned()
                + "ab"
                + "ba"
                + "ab"
        );
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&mut s, 0.5), 50.0);
        assert_eq!(quantile(&mut s, 0.99), 99.0);
        assert_eq!(quantile(&mut [7.0], 0.99), 7.0);
    }
}
