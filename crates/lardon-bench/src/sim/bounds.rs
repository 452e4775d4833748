//! The packing lower bound: no schedule that keeps real memory within the
//! budget can finish before `max(Σ memory × time ÷ budget, longest task)`.

use super::workload::SimTask;

/// The smallest real memory × time (byte·ms) that can process all of
/// `task`'s items. Sequences of `b_1 … b_k` items (each ≤ `batch_max`,
/// so `k ≥ ceil(items / batch_max)`) cost
/// `Σ (m0 + m·b_i)(t0 + t·b_i) = k·m0·t0 + (m0·t + m·t0)·N + m·t·Σ b_i²`,
/// and `Σ b_i² ≥ N² / k` (Cauchy–Schwarz); the minimum over `k` is taken.
pub fn min_area(task: &SimTask) -> f64 {
    let n = task.items.max(1) as f64;
    let (m0, m) = (task.real_fixed as f64, task.real_per_item as f64);
    let (t0, t) = (task.time_fixed as f64, task.time_per_item as f64);
    let k_min = task.items.max(1).div_ceil(task.batch_max.max(1));
    (k_min..=task.items.max(1))
        .map(|k| {
            let k = k as f64;
            k * m0 * t0 + (m0 * t + m * t0) * n + m * t * n * n / k
        })
        .fold(f64::INFINITY, f64::min)
}

/// The shortest time `task` can take: its sequences run one after
/// another, at least `ceil(items / batch_max)` of them.
pub fn min_duration(task: &SimTask) -> u64 {
    let k_min = task.items.max(1).div_ceil(task.batch_max.max(1));
    task.time_fixed.saturating_mul(k_min).saturating_add(task.time_per_item.saturating_mul(task.items))
}

/// `max(Σ min_area ÷ budget, max min_duration)`, in ms.
pub fn lower_bound(tasks: &[SimTask], budget: u64) -> f64 {
    let area: f64 = tasks.iter().map(min_area).sum();
    let longest = tasks.iter().map(min_duration).max().unwrap_or(0) as f64;
    (area / budget.max(1) as f64).max(longest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_tasks_by_hand() {
        // Budget 10: areas 4·10 + 6·10 + 5·4 = 120 → 12 ms; longest 10 ms.
        let tasks = [SimTask::simple("a", 4, 10), SimTask::simple("b", 6, 10), SimTask::simple("c", 5, 4)];
        assert_eq!(lower_bound(&tasks, 10), 12.0);
        // A long thin task dominates: longest 100 ms > area 410/10.
        let tasks = [SimTask::simple("a", 1, 100), SimTask::simple("b", 6, 50)];
        assert_eq!(lower_bound(&tasks, 10), 100.0);
        assert_eq!(lower_bound(&[], 10), 0.0);
    }

    #[test]
    fn batched_task_by_hand() {
        // m0 = 10, m = 1, t0 = 5, t = 2, N = 4, batch_max = 4.
        // k = 1: 50 + (20 + 5)·4 + 2·16 = 182; k = 2: 100 + 100 + 16 = 216;
        // k = 4: 200 + 100 + 8 = 308. Minimum 182; duration 5 + 8 = 13.
        let t = SimTask {
            items: 4,
            batch_max: 4,
            real_per_item: 1,
            time_per_item: 2,
            ..SimTask::simple("x", 10, 5)
        };
        assert_eq!(min_area(&t), 182.0);
        assert_eq!(min_duration(&t), 13);
        // batch_max = 2 forces k ≥ 2: 216; duration 2·5 + 8 = 18.
        let t2 = SimTask { batch_max: 2, ..t.clone() };
        assert_eq!(min_area(&t2), 216.0);
        assert_eq!(min_duration(&t2), 18);
        assert_eq!(lower_bound(&[t, t2], 100), 18.0);
    }
}
