//! GPUs: NVIDIA through NVML (loaded at run time), AMD/Intel through DRM
//! sysfs. Each detected device gets an index, a [`lardon::GpuDevice`] and a
//! way to read its free memory for every snapshot.

mod drm;
#[cfg(feature = "nvml")]
mod nvml;

use std::fmt;

use lardon::{GpuDevice, GpuSample};

pub use drm::{DrmCard, parse_vendor, scan_drm};

use crate::root::HostRoot;

/// Where a device's free memory is read from.
enum Source {
    #[cfg(feature = "nvml")]
    Nvml(std::sync::Arc<nvml_wrapper::Nvml>, u32),
    Drm(DrmCard),
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            #[cfg(feature = "nvml")]
            Source::Nvml(_, i) => write!(f, "Nvml({i})"),
            Source::Drm(card) => write!(f, "Drm({})", card.dir.display()),
        }
    }
}

/// The host's GPUs, in index order (NVML devices first, then DRM cards).
#[derive(Debug, Default)]
pub struct Gpus {
    devices: Vec<(GpuDevice, Source)>,
    /// Why NVML is not used, when it is not (e.g. the library is absent).
    pub nvml_absent: Option<String>,
}

impl Gpus {
    /// Detects GPUs; `host_ram` feeds the unified-memory rule. A host with
    /// no driver or no GPU yields an empty list, never an error.
    pub fn detect(root: &HostRoot, host_ram: u64) -> Self {
        let mut gpus = Gpus::default();
        #[cfg(feature = "nvml")]
        match nvml::detect() {
            Ok(found) => {
                for (name, index, total, nv) in found {
                    let idx = gpus.next_index();
                    let dev = GpuDevice {
                        index: idx,
                        name,
                        vram_total: Some(total),
                        unified: GpuDevice::is_unified(Some(total), None, host_ram),
                    };
                    gpus.devices.push((dev, Source::Nvml(nv, index)));
                }
            }
            Err(why) => gpus.nvml_absent = Some(why),
        }
        #[cfg(not(feature = "nvml"))]
        {
            gpus.nvml_absent = Some("built without the `nvml` feature".to_owned());
        }
        for card in scan_drm(root) {
            let idx = gpus.next_index();
            let dev = GpuDevice {
                index: idx,
                name: card.name.clone(),
                vram_total: card.vram_total,
                unified: GpuDevice::is_unified(card.vram_total, card.gtt_total, host_ram),
            };
            gpus.devices.push((dev, Source::Drm(card)));
        }
        gpus
    }

    fn next_index(&self) -> u32 {
        u32::try_from(self.devices.len()).unwrap_or(u32::MAX)
    }

    /// The devices, for [`lardon::HostProfile::gpus`].
    pub fn devices(&self) -> Vec<GpuDevice> {
        self.devices.iter().map(|(d, _)| d.clone()).collect()
    }

    /// Free memory of every device now (`None` where unreadable).
    pub fn sample(&self) -> Vec<GpuSample> {
        self.devices
            .iter()
            .map(|(dev, src)| GpuSample {
                index: dev.index,
                free: match src {
                    #[cfg(feature = "nvml")]
                    Source::Nvml(nv, i) => nvml::free(nv, *i),
                    Source::Drm(card) => card.free(),
                },
            })
            .collect()
    }
}
