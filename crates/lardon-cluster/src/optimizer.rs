//! The per-agent optimizer (docs/DESIGN.md §14, kubecc's "optimizer" done
//! with bounds): a controller that moves an agent's token bound — the most
//! tasks the broker sends it at once — from what its cgroup's `cpu.stat`
//! says. Admission stays the agent's Governor's; tokens only bound what
//! the broker offers.
//!
//! The rule is AIMD with hysteresis over a bounded window of samples:
//! * **multiplicative decrease** when the allocation is throttled (CPU time
//!   the quota refused, as a share of wall time, above `throttle_limit`):
//!   too many tasks for the CPUs it was given;
//! * **additive increase** (one token) when every token is busy and the
//!   CPUs are still under `high_utilization`: the tasks wait on something
//!   else (IO, network) and one more fits;
//! * otherwise hold.
//!
//! A verdict (read from the latest interval) must repeat `hysteresis`
//! times in a row before it acts, and each change clears the window (whose
//! averages the decision reports), so one noisy sample never moves the
//! bound and the controller cannot oscillate faster than its window. The
//! bound stays within `min_tokens..=max_tokens`.

use std::collections::VecDeque;
use std::time::Duration;

/// One reading of an agent's cgroup CPU counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    /// When it was read (monotonic, from any fixed origin).
    pub at: Duration,
    /// Total CPU time used by the cgroup, microseconds.
    pub usage_usec: u64,
    /// Total time the cgroup's quota held it back, microseconds.
    pub throttled_usec: u64,
}

impl CpuSample {
    /// Parses a cgroup v2 `cpu.stat` (`usage_usec`, `throttled_usec`; the
    /// latter is absent without the cpu controller: 0) read at `at`.
    ///
    /// # Errors
    /// A message naming the missing or malformed field.
    pub fn parse_v2(text: &str, at: Duration) -> Result<Self, String> {
        let field = |name: &str| -> Result<Option<u64>, String> {
            text.lines()
                .filter_map(|l| l.split_once(' '))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("cpu.stat {name}: `{}` is not a number", v.trim()))
                })
                .transpose()
        };
        let usage_usec = field("usage_usec")?.ok_or("cpu.stat usage_usec: missing")?;
        Ok(CpuSample { at, usage_usec, throttled_usec: field("throttled_usec")?.unwrap_or(0) })
    }
}

/// The controller's bounds and thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptimizerConfig {
    /// The bound never goes below this.
    pub min_tokens: u32,
    /// … nor above this.
    pub max_tokens: u32,
    /// Samples kept (the window the deltas span).
    pub window: usize,
    /// Same verdicts in a row before acting.
    pub hysteresis: u32,
    /// Above this share of the allocation's CPUs used, do not grow.
    pub high_utilization: f64,
    /// Above this share of wall time throttled, shrink.
    pub throttle_limit: f64,
    /// The factor of a decrease (0–1).
    pub decrease: f64,
}

impl OptimizerConfig {
    /// Defaults for an allocation of `cpus` CPUs: tokens from 1 to 4 per
    /// CPU, a window of 10 samples, 3 verdicts in a row, grow below 85 %
    /// use, shrink above 5 % throttled, halve on a decrease.
    #[must_use]
    pub fn for_cpus(cpus: u32) -> Self {
        OptimizerConfig {
            min_tokens: 1,
            max_tokens: cpus.max(1).saturating_mul(4),
            window: 10,
            hysteresis: 3,
            high_utilization: 0.85,
            throttle_limit: 0.05,
            decrease: 0.5,
        }
    }
}

/// Which way the figures point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// One more token.
    Grow,
    /// Fewer tokens.
    Shrink,
    /// Leave it.
    Hold,
}

/// A change of the bound, for `lardon cluster status`.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The bound before.
    pub from: u32,
    /// The bound after.
    pub to: u32,
    /// Why, with the figures.
    pub reason: String,
}

/// One agent's controller. Fields are private: the bound moves only
/// through [`Optimizer::observe`], within the configured range.
#[derive(Debug, Clone)]
pub struct Optimizer {
    config: OptimizerConfig,
    cpus: f64,
    tokens: u32,
    samples: VecDeque<CpuSample>,
    streak: (Verdict, u32),
    last: Option<Decision>,
    latest: Option<(Verdict, String)>,
}

impl Optimizer {
    /// A controller for an allocation of `cpus` CPUs (its quota or cpuset,
    /// not the node's), starting at `tokens` (clamped to the range).
    #[must_use]
    pub fn new(config: OptimizerConfig, cpus: f64, tokens: u32) -> Self {
        debug_assert!(config.min_tokens <= config.max_tokens && config.window >= 2);
        let tokens = tokens.clamp(config.min_tokens, config.max_tokens);
        Optimizer {
            config,
            cpus: cpus.max(0.001),
            tokens,
            samples: VecDeque::new(),
            streak: (Verdict::Hold, 0),
            last: None,
            latest: None,
        }
    }

    /// The latest interval's verdict and why, with the window's figures
    /// (`None` before two samples). A verdict acts only after it repeats
    /// (the hysteresis), so this may say `Shrink` while the bound holds.
    #[must_use]
    pub fn latest(&self) -> Option<(Verdict, &str)> {
        self.latest.as_ref().map(|(v, r)| (*v, r.as_str()))
    }

    /// The current bound.
    #[must_use]
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// The last change, if any.
    #[must_use]
    pub fn last_decision(&self) -> Option<&Decision> {
        self.last.as_ref()
    }

    /// Shares of the allocation's CPUs used and of wall time throttled
    /// between two samples.
    fn shares(&self, from: &CpuSample, to: &CpuSample) -> (f64, f64) {
        let wall = to.at.saturating_sub(from.at).as_micros().max(1) as f64;
        let used = to.usage_usec.saturating_sub(from.usage_usec) as f64 / (wall * self.cpus);
        (used, to.throttled_usec.saturating_sub(from.throttled_usec) as f64 / wall)
    }

    /// Takes a sample, with `busy` tokens in use when it was read; returns
    /// the change of bound it caused, if any. A sample older than the
    /// last one, or with counters going backwards (a new cgroup), restarts
    /// the window.
    pub fn observe(&mut self, sample: CpuSample, busy: u32) -> Option<Decision> {
        if let Some(prev) = self.samples.back()
            && (sample.at <= prev.at
                || sample.usage_usec < prev.usage_usec
                || sample.throttled_usec < prev.throttled_usec)
        {
            self.samples.clear();
        }
        self.samples.push_back(sample);
        while self.samples.len() > self.config.window {
            self.samples.pop_front();
        }
        let n = self.samples.len();
        if n < 2 {
            return None;
        }
        // The verdict reads the latest interval (so a streak means that
        // many intervals in a row agreed); the reason reports the window.
        let (now_used, now_throttled) = self.shares(&self.samples[n - 2], &self.samples[n - 1]);
        let (used, throttled) = self.shares(&self.samples[0], &self.samples[n - 1]);
        let last = self.samples[n - 1];
        let verdict = if now_throttled > self.config.throttle_limit {
            Verdict::Shrink
        } else if busy >= self.tokens && now_used < self.config.high_utilization {
            Verdict::Grow
        } else {
            Verdict::Hold
        };
        self.streak = if self.streak.0 == verdict { (verdict, self.streak.1 + 1) } else { (verdict, 1) };
        let why = format!(
            "{busy} of {} tokens busy, CPUs {:.0} % used, throttled {:.0} % of the time",
            self.tokens,
            used * 100.0,
            throttled * 100.0
        );
        let why = match verdict {
            Verdict::Hold => why,
            _ => format!(
                "{why} ({} of {} in a row)",
                self.streak.1.min(self.config.hysteresis),
                self.config.hysteresis
            ),
        };
        self.latest = Some((verdict, why));
        if verdict == Verdict::Hold || self.streak.1 < self.config.hysteresis {
            return None;
        }
        let from = self.tokens;
        let to = match verdict {
            Verdict::Shrink => {
                ((f64::from(from) * self.config.decrease).floor() as u32).max(self.config.min_tokens)
            }
            Verdict::Grow => from.saturating_add(1).min(self.config.max_tokens),
            Verdict::Hold => from,
        };
        self.streak = (Verdict::Hold, 0);
        if to == from {
            return None;
        }
        // Fresh evidence for the next move: the old samples describe the old bound.
        self.samples.clear();
        self.samples.push_back(last);
        self.tokens = to;
        let reason = match verdict {
            Verdict::Shrink => format!(
                "throttled {:.0} % of the time (limit {:.0} %)",
                throttled * 100.0,
                self.config.throttle_limit * 100.0
            ),
            _ => format!(
                "all {from} tokens busy with CPUs {:.0} % used (below {:.0} %)",
                used * 100.0,
                self.config.high_utilization * 100.0
            ),
        };
        self.latest = Some((verdict, format!("{} → {to} tokens: {reason}", from)));
        let decision = Decision { from, to, reason };
        debug_assert!((self.config.min_tokens..=self.config.max_tokens).contains(&self.tokens));
        self.last = Some(decision.clone());
        Some(decision)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Feeds `n` samples one second apart: `used` CPUs busy and `throttled`
    /// of each second throttled, with `busy` tokens in use.
    fn feed(
        o: &mut Optimizer,
        t: &mut CpuSample,
        n: usize,
        used: f64,
        throttled: f64,
        busy: u32,
    ) -> Vec<Decision> {
        let mut out = Vec::new();
        for _ in 0..n {
            t.at += Duration::from_secs(1);
            t.usage_usec += (used * 1e6) as u64;
            t.throttled_usec += (throttled * 1e6) as u64;
            out.extend(o.observe(*t, busy));
        }
        out
    }

    fn start() -> CpuSample {
        CpuSample { at: Duration::ZERO, usage_usec: 0, throttled_usec: 0 }
    }

    #[test]
    fn throttling_halves_the_bound_after_the_hysteresis() {
        let mut o = Optimizer::new(OptimizerConfig::for_cpus(4), 4.0, 8);
        let mut t = start();
        o.observe(t, 8);
        let d = feed(&mut o, &mut t, 2, 4.0, 0.3, 8);
        assert!(d.is_empty(), "two verdicts are not enough: {d:?}");
        let d = feed(&mut o, &mut t, 1, 4.0, 0.3, 8);
        assert_eq!((d[0].from, d[0].to), (8, 4));
        assert!(d[0].reason.starts_with("throttled 30 %"), "{}", d[0].reason);
        assert_eq!(o.tokens(), 4);
        let (verdict, why) = o.latest().unwrap();
        assert_eq!((verdict, why), (Verdict::Shrink, "8 → 4 tokens: throttled 30 % of the time (limit 5 %)"));
        // A calm interval: held, and said why with the figures.
        feed(&mut o, &mut t, 1, 1.0, 0.0, 2);
        let (verdict, why) = o.latest().unwrap();
        assert_eq!(verdict, Verdict::Hold);
        assert!(why.starts_with("2 of 4 tokens busy, CPUs 25 % used"), "{why}");
    }

    #[test]
    fn idle_cpus_with_every_token_busy_grow_the_bound_one_at_a_time_up_to_the_max() {
        let mut o = Optimizer::new(OptimizerConfig::for_cpus(1), 1.0, 1);
        let mut t = start();
        o.observe(t, 1);
        let mut bounds = Vec::new();
        for _ in 0..30 {
            let busy = o.tokens();
            bounds.extend(feed(&mut o, &mut t, 1, 0.2, 0.0, busy).into_iter().map(|d| d.to));
        }
        assert_eq!(bounds, [2, 3, 4], "one at a time, capped at 4 per CPU");
    }

    #[test]
    fn busy_cpus_or_idle_tokens_hold_and_a_noisy_sample_moves_nothing() {
        let mut o = Optimizer::new(OptimizerConfig::for_cpus(2), 2.0, 4);
        let mut t = start();
        o.observe(t, 4);
        assert!(
            feed(&mut o, &mut t, 10, 1.95, 0.0, 4).is_empty(),
            "CPUs saturated: more tokens would not help"
        );
        assert!(feed(&mut o, &mut t, 10, 0.2, 0.0, 2).is_empty(), "tokens to spare: nothing to grow for");
        // One throttled second among calm ones: the window dilutes it and
        // the streak never reaches three.
        let mut d = feed(&mut o, &mut t, 1, 2.0, 0.9, 2);
        d.extend(feed(&mut o, &mut t, 10, 1.0, 0.0, 2));
        assert!(d.iter().all(|d| d.to >= 2), "{d:?}");
        assert_eq!(o.tokens(), 4);
    }

    #[test]
    fn the_bound_never_leaves_its_range_and_counters_going_back_restart_the_window() {
        let mut o = Optimizer::new(OptimizerConfig::for_cpus(1), 1.0, 100);
        assert_eq!(o.tokens(), 4, "clamped");
        let mut t = start();
        o.observe(t, 4);
        for _ in 0..20 {
            feed(&mut o, &mut t, 1, 1.0, 0.9, 4);
        }
        assert_eq!(o.tokens(), 1, "never below the minimum");
        // A new cgroup: counters restart from zero; no decision from a
        // negative delta.
        let fresh = CpuSample { at: t.at + Duration::from_secs(1), usage_usec: 0, throttled_usec: 0 };
        assert_eq!(o.observe(fresh, 1), None);
    }

    #[test]
    fn cpu_stat_v2_parses_and_names_bad_fields() {
        let s = CpuSample::parse_v2("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 3\nnr_throttled 1\nthrottled_usec 42\n", Duration::from_secs(2)).unwrap();
        assert_eq!((s.usage_usec, s.throttled_usec), (1500, 42));
        assert_eq!(CpuSample::parse_v2("usage_usec 7\n", Duration::ZERO).unwrap().throttled_usec, 0);
        assert_eq!(
            CpuSample::parse_v2("user_usec 7\n", Duration::ZERO).unwrap_err(),
            "cpu.stat usage_usec: missing"
        );
        assert!(
            CpuSample::parse_v2("usage_usec x\n", Duration::ZERO)
                .unwrap_err()
                .contains("`x` is not a number")
        );
    }
}
