//! NVIDIA GPUs through NVML, loaded with `dlopen` at run time.

use std::sync::Arc;

use nvml_wrapper::Nvml;

/// A detected device: name, NVML index, total memory, the shared handle.
pub(super) type Found = (String, u32, u64, Arc<Nvml>);

/// Every NVIDIA device, or why there is none. Any `Err` from `Nvml::init()`
/// (no library, no driver, no device) means "no NVIDIA GPU".
pub(super) fn detect() -> Result<Vec<Found>, String> {
    let nvml = Arc::new(Nvml::init().map_err(|e| format!("NVML unavailable: {e}"))?);
    let count = nvml.device_count().map_err(|e| format!("NVML device count: {e}"))?;
    let mut found = Vec::new();
    for i in 0..count {
        let Ok(dev) = nvml.device_by_index(i) else { continue };
        let Ok(mem) = dev.memory_info() else { continue };
        let name = dev.name().unwrap_or_else(|_| format!("nvidia{i}"));
        found.push((name, i, mem.total, Arc::clone(&nvml)));
    }
    Ok(found)
}

/// Free memory of NVML device `index`, when readable.
pub(super) fn free(nvml: &Nvml, index: u32) -> Option<u64> {
    nvml.device_by_index(index).ok()?.memory_info().ok().map(|m| m.free)
}

#[cfg(test)]
mod tests {
    #[test]
    fn absence_is_no_gpu_not_a_panic() {
        // The CI machine has no NVIDIA driver: detection must say why and
        // report nothing. On a GPU host it lists devices with their memory.
        match super::detect() {
            Err(why) => assert!(why.contains("NVML"), "{why}"),
            Ok(found) => assert!(found.iter().all(|(_, _, total, _)| *total > 0)),
        }
    }
}
