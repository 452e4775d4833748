//! The agent's token bound: an upper bound on tasks at once, taken from
//! the allocation the engine gave it (its cpuset and CPU quota), never
//! from the node's CPU count (docs/DESIGN.md §14). Admission itself stays
//! the Governor's.

use lardon::CgroupSample;

/// Tokens for an allocation: the fewest of its cpuset's CPUs, its CPU
/// quota rounded up to whole CPUs, and the CPUs of the affinity mask
/// (`allowed_cpus`, itself the allocation's cpuset when the engine pins);
/// at least 1.
pub fn default_tokens(cgroup: Option<&CgroupSample>, allowed_cpus: u32) -> u32 {
    let mut tokens = allowed_cpus;
    if let Some(c) = cgroup {
        if let Some(cpus) = c.cpuset_cpus {
            tokens = tokens.min(cpus);
        }
        if let Some(millis) = c.cpu_quota_millis {
            tokens = tokens.min(millis.div_ceil(1000));
        }
    }
    tokens.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(cpuset: Option<u32>, quota: Option<u32>) -> CgroupSample {
        CgroupSample { cpuset_cpus: cpuset, cpu_quota_millis: quota, ..CgroupSample::default() }
    }

    #[test]
    fn the_allocation_bounds_the_tokens_not_the_node() {
        // A 64-CPU node, an allocation of 4 CPUs in its cpuset.
        assert_eq!(default_tokens(Some(&sample(Some(4), None)), 64), 4);
        // A quota of 2.5 CPUs: 3 tokens (a partial CPU still runs a task).
        assert_eq!(default_tokens(Some(&sample(None, Some(2500))), 64), 3);
        assert_eq!(default_tokens(Some(&sample(Some(8), Some(2000))), 64), 2);
        // Pinned to 6 CPUs by the affinity mask, no cgroup figures.
        assert_eq!(default_tokens(None, 6), 6);
        // Never zero.
        assert_eq!(default_tokens(Some(&sample(Some(0), Some(0))), 0), 1);
    }
}
