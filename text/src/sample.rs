//! The choice of the next token from one row of logits: greedy, or
//! sampled after repetition penalty, temperature, top-k, top-p and min-p
//! (the order `transformers` applies them in), from a seeded generator so
//! that a seed reproduces a run.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

use crate::search::SearchOptions;

/// Chooses next tokens under one set of [`SearchOptions`].
#[derive(Debug, Clone)]
pub struct Sampler {
    options: SearchOptions,
    rng: ChaCha8Rng,
    /// Scratch: the penalized, scaled logits and the candidates.
    scores: Vec<f32>,
    candidates: Vec<(u32, f64)>,
}

impl Sampler {
    /// A sampler drawing from a ChaCha8 generator seeded with `seed`.
    pub fn new(options: SearchOptions, seed: u64) -> Self {
        Self {
            options,
            rng: ChaCha8Rng::seed_from_u64(seed),
            scores: Vec::new(),
            candidates: Vec::new(),
        }
    }

    /// Its options.
    pub fn options(&self) -> &SearchOptions {
        &self.options
    }

    /// The next token after `history` (the prompt and the tokens so far,
    /// which the repetition penalty reads) from `logits`, one score per
    /// vocabulary entry; `None` for an empty row. A NaN logit is never
    /// chosen unless every logit is NaN.
    pub fn next(&mut self, logits: &[f32], history: &[i64]) -> Option<i64> {
        if logits.is_empty() {
            return None;
        }
        let o = &self.options;
        self.scores.clear();
        self.scores.extend(
            logits
                .iter()
                .map(|&x| if x.is_nan() { f32::NEG_INFINITY } else { x }),
        );
        let penalty = o.repetition_penalty;
        if penalty != 1.0 && penalty > 0.0 {
            let mut seen = vec![false; logits.len()];
            for &id in history {
                let Some(i) = usize::try_from(id).ok().filter(|&i| i < logits.len()) else {
                    continue;
                };
                if !std::mem::replace(&mut seen[i], true) {
                    let s = &mut self.scores[i];
                    *s = if *s < 0.0 { *s * penalty } else { *s / penalty };
                }
            }
        }
        if !o.do_sample || o.temperature <= 0.0 {
            return Some(argmax(&self.scores) as i64);
        }
        let inv_t = 1.0 / f64::from(o.temperature);
        let c = &mut self.candidates;
        c.clear();
        c.extend(
            self.scores
                .iter()
                .enumerate()
                .map(|(i, &s)| (i as u32, f64::from(s) * inv_t)),
        );
        let by_score = |a: &(u32, f64), b: &(u32, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if o.top_k > 0 && o.top_k < c.len() {
            c.select_nth_unstable_by(o.top_k - 1, by_score);
            c.truncate(o.top_k);
        }
        c.sort_unstable_by(by_score);
        // Softmax over the candidates (the largest first).
        let max = c[0].1;
        if max == f64::NEG_INFINITY {
            return Some(i64::from(c[0].0));
        }
        let mut total = 0.0;
        for x in c.iter_mut() {
            x.1 = (x.1 - max).exp();
            total += x.1;
        }
        // Top-p: the smallest prefix reaching top_p of the mass.
        if o.top_p < 1.0 {
            let mut sum = 0.0;
            let keep = c
                .iter()
                .position(|x| {
                    sum += x.1 / total;
                    sum >= f64::from(o.top_p)
                })
                .map_or(c.len(), |i| i + 1);
            c.truncate(keep);
        }
        // Min-p: relative to the most likely token (probability 1 / total
        // before normalization, as the largest term is exp(0)).
        if o.min_p > 0.0 {
            let floor = f64::from(o.min_p);
            let keep = c.iter().take_while(|x| x.1 >= floor).count().max(1);
            c.truncate(keep);
        }
        let total: f64 = c.iter().map(|x| x.1).sum();
        let mut u = uniform(&mut self.rng) * total;
        for &(id, p) in c.iter() {
            if u < p {
                return Some(i64::from(id));
            }
            u -= p;
        }
        c.last().map(|&(id, _)| i64::from(id))
    }
}

/// The index of the first largest value.
fn argmax(scores: &[f32]) -> usize {
    scores
        .iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
            if v > best.1 { (i, v) } else { best }
        })
        .0
}

/// A uniform draw in [0, 1) with 53 bits.
fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampling(f: impl FnOnce(&mut SearchOptions)) -> SearchOptions {
        let mut o = SearchOptions {
            do_sample: true,
            ..SearchOptions::default()
        };
        f(&mut o);
        o
    }

    #[test]
    fn greedy_takes_the_first_largest_and_skips_nan() {
        let mut s = Sampler::new(SearchOptions::default(), 0);
        assert_eq!(s.next(&[0.5, 3.0, 3.0, f32::NAN], &[]), Some(1));
        assert_eq!(s.next(&[f32::NAN, -1.0], &[]), Some(1));
        assert_eq!(s.next(&[], &[]), None);
    }

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative_logits() {
        let o = SearchOptions {
            repetition_penalty: 2.0,
            ..SearchOptions::default()
        };
        let mut s = Sampler::new(o, 0);
        // 4.0 seen → 2.0 < 3.0; a token seen twice is penalized once.
        assert_eq!(s.next(&[4.0, 3.0], &[0, 0]), Some(1));
        // -1.0 seen → -2.0 < -1.5.
        assert_eq!(s.next(&[-1.0, -1.5], &[0]), Some(1));
        // Ids outside the row are ignored.
        assert_eq!(s.next(&[4.0, 3.0], &[-1, 7]), Some(0));
    }

    #[test]
    fn a_seed_reproduces_a_run_and_another_seed_differs() {
        let logits: Vec<f32> = (0..64).map(|i| (i % 7) as f32 * 0.3).collect();
        let draw = |seed| {
            let mut s = Sampler::new(sampling(|_| {}), seed);
            (0..200)
                .map(|_| s.next(&logits, &[]).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }

    #[test]
    fn draws_follow_the_softmax_of_the_scaled_logits() {
        // p ∝ exp(l / T) with T = 0.5: exp(0), exp(2), exp(4) over 3 tokens.
        let logits = [0.0f32, 1.0, 2.0];
        let mut s = Sampler::new(sampling(|o| o.temperature = 0.5), 11);
        let n = 60_000;
        let mut counts = [0usize; 3];
        for _ in 0..n {
            counts[s.next(&logits, &[]).unwrap() as usize] += 1;
        }
        let w = [1.0f64, 2f64.exp(), 4f64.exp()];
        let total: f64 = w.iter().sum();
        for i in 0..3 {
            let p = w[i] / total;
            let sd = (p * (1.0 - p) / n as f64).sqrt();
            let got = counts[i] as f64 / n as f64;
            assert!((got - p).abs() < 5.0 * sd + 1e-4, "token {i}: {got} vs {p}");
        }
    }

    #[test]
    fn top_k_top_p_and_min_p_cut_the_tail() {
        let logits = [3.0f32, 2.0, 1.0, 0.0, -1.0];
        let seen = |o: SearchOptions| {
            let mut s = Sampler::new(o, 3);
            let mut ids: Vec<i64> = (0..2000).map(|_| s.next(&logits, &[]).unwrap()).collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        };
        assert_eq!(seen(sampling(|o| o.top_k = 2)), vec![0, 1]);
        assert_eq!(seen(sampling(|o| o.top_k = 1)), vec![0]);
        // Probabilities ≈ .636 .234 .086 .032 .012: 0.8 needs the first two.
        assert_eq!(seen(sampling(|o| o.top_p = 0.8)), vec![0, 1]);
        assert_eq!(seen(sampling(|o| o.top_p = 0.5)), vec![0]);
        // min_p 0.1: keeps p ≥ 0.0636 → the first three.
        assert_eq!(seen(sampling(|o| o.min_p = 0.1)), vec![0, 1, 2]);
        assert_eq!(seen(sampling(|_| {})), vec![0, 1, 2, 3, 4]);
    }
}
