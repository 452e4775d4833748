//! The environment of a task process (docs/DESIGN.md §10).

use lardon::{Contract, format_cpus};

use crate::spec::TaskSpec;

/// Thread-count variables set to the granted whole CPUs unless the task's
/// own environment sets them.
const THREAD_VARS: [&str; 3] = ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"];

/// The variables a run gets, in order (the spec's own `env` last, so it
/// wins): `LARDON_TASK_ID`, `LARDON_CPUS`, `LARDON_MEM_BYTES`,
/// `LARDON_GPU_DEVICES` (+ `CUDA_VISIBLE_DEVICES`/`HIP_VISIBLE_DEVICES`),
/// `LARDON_SCRATCH_DIR` when leased, `LARDON_SOCKET`, `LARDON_GROUP` for
/// a task of a group (a `lardon submit` inside the task defaults to it),
/// the thread counts,
/// and for a batched run `LARDON_ITEM_OFFSET`/`LARDON_BATCH_SIZE`/`LARDON_ITEMS`.
pub fn task_env(
    task_id: &str,
    spec: &TaskSpec,
    contract: &Contract,
    socket: &str,
    scratch_dir: Option<&str>,
    batch: Option<(u64, u64, u64)>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: String| env.push((k.to_owned(), v));
    put("LARDON_TASK_ID", task_id.to_owned());
    put("LARDON_CPUS", format_cpus(contract.cpu_millis));
    put("LARDON_MEM_BYTES", contract.memory.to_string());
    let gpus = contract.gpu_devices.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    put("LARDON_GPU_DEVICES", gpus.clone());
    // A task that was granted no GPU sees none: the Governor did not count it.
    put("CUDA_VISIBLE_DEVICES", gpus.clone());
    put("HIP_VISIBLE_DEVICES", gpus);
    if let Some(dir) = scratch_dir {
        put("LARDON_SCRATCH_DIR", dir.to_owned());
    }
    put("LARDON_SOCKET", socket.to_owned());
    if let Some(group) = &spec.group {
        put("LARDON_GROUP", group.to_string());
    }
    for var in THREAD_VARS {
        if !spec.env.iter().any(|e| e.key == var) {
            put(var, contract.whole_cpus().to_string());
        }
    }
    if let Some((offset, size, items)) = batch {
        put("LARDON_ITEM_OFFSET", offset.to_string());
        put("LARDON_BATCH_SIZE", size.to_string());
        put("LARDON_ITEMS", items.to_string());
    }
    env.extend(spec.env.iter().map(|e| (e.key.clone(), e.value.clone())));
    env
}
