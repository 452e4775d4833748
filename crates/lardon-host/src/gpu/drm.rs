//! AMD/Intel GPUs through DRM sysfs (`/sys/class/drm/cardN/device/…`).

use std::path::{Path, PathBuf};

use crate::parse::{ParseError, one_line, parse_u64};
use crate::root::HostRoot;

const NVIDIA: u16 = 0x10de;

/// One DRM card as read at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmCard {
    /// `cardN`, plus the vendor.
    pub name: String,
    /// The card's `device/` directory.
    pub dir: PathBuf,
    /// PCI vendor id.
    pub vendor: u16,
    /// `mem_info_vram_total`, when readable.
    pub vram_total: Option<u64>,
    /// `mem_info_gtt_total`, when readable.
    pub gtt_total: Option<u64>,
}

impl DrmCard {
    /// `vram_total − mem_info_vram_used`, when both are readable.
    pub fn free(&self) -> Option<u64> {
        let used = read_u64(&self.dir.join("mem_info_vram_used"))?;
        self.vram_total?.checked_sub(used)
    }
}

fn read_u64(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    parse_u64("drm", one_line("drm", &text).ok()?).ok()
}

/// Parses a PCI `vendor` file (`0x1002`).
///
/// # Errors
/// [`ParseError`] unless it is `0x` and 1–4 hex digits.
pub fn parse_vendor(text: &str) -> Result<u16, ParseError> {
    let line = one_line("vendor", text)?;
    let hex = line
        .strip_prefix("0x")
        .filter(|h| (1..=4).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_hexdigit()));
    let hex =
        hex.ok_or_else(|| ParseError::Invalid { field: "vendor".to_owned(), value: line.to_owned() })?;
    u16::from_str_radix(hex, 16).map_err(|_| ParseError::Overflow("vendor".to_owned()))
}

/// The DRM cards under `<sys>/class/drm` (`cardN` only, not connectors),
/// skipping NVIDIA cards (NVML reports those) and cards with no readable
/// vendor.
pub fn scan_drm(root: &HostRoot) -> Vec<DrmCard> {
    let Ok(entries) = std::fs::read_dir(root.sys_path("class/drm")) else { return Vec::new() };
    let mut cards: Vec<(u32, DrmCard)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = parse_u64("card", name.strip_prefix("card")?).ok()?;
            let dir = e.path().join("device");
            let vendor = parse_vendor(&std::fs::read_to_string(dir.join("vendor")).ok()?).ok()?;
            if vendor == NVIDIA {
                return None;
            }
            let label = match vendor {
                0x1002 => "AMD",
                0x8086 => "Intel",
                _ => "GPU",
            };
            let card = DrmCard {
                name: format!("{label} {name}"),
                vram_total: read_u64(&dir.join("mem_info_vram_total")),
                gtt_total: read_u64(&dir.join("mem_info_gtt_total")),
                dir,
                vendor,
            };
            Some((u32::try_from(n).ok()?, card))
        })
        .collect();
    cards.sort_by_key(|(n, _)| *n);
    cards.into_iter().map(|(_, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Gpus;

    const GIB: u64 = 1 << 30;

    fn card(root: &Path, name: &str, vendor: &str, files: &[(&str, &str)]) {
        let dev = root.join("sys/class/drm").join(name).join("device");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), vendor).unwrap();
        for (f, v) in files {
            std::fs::write(dev.join(f), v).unwrap();
        }
    }

    #[test]
    fn vendors() {
        assert_eq!(parse_vendor("0x1002\n"), Ok(0x1002));
        for bad in ["1002", "0x", "0x10020", "0xg002", "-0x1002", "0x1002 x"] {
            assert!(parse_vendor(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn dedicated_unified_and_skipped_cards() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        // A discrete AMD card: 16 GiB VRAM, 4 GiB used.
        card(
            p,
            "card1",
            "0x1002\n",
            &[
                ("mem_info_vram_total", "17179869184\n"),
                ("mem_info_vram_used", "4294967296\n"),
                ("mem_info_gtt_total", "8589934592\n"),
            ],
        );
        // An AMD APU: 512 MiB carve-out, large GTT: unified.
        card(
            p,
            "card0",
            "0x1002\n",
            &[
                ("mem_info_vram_total", "536870912\n"),
                ("mem_info_vram_used", "junk\n"),
                ("mem_info_gtt_total", "17179869184\n"),
            ],
        );
        // Intel iGPU without mem_info: VRAM unknown, unified.
        card(p, "card2", "0x8086\n", &[]);
        // NVIDIA is NVML's; connectors and render nodes are not cards.
        card(p, "card3", "0x10de\n", &[("mem_info_vram_total", "1\n")]);
        card(p, "card1-DP-1", "0x1002\n", &[]);
        card(p, "renderD128", "0x1002\n", &[]);
        card(p, "card4", "-0x1002\n", &[]);

        let root = HostRoot::under(p);
        let cards = scan_drm(&root);
        assert_eq!(
            cards.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["AMD card0", "AMD card1", "Intel card2"]
        );
        assert_eq!(cards[1].free(), Some(12 * GIB));
        assert_eq!(cards[0].free(), None, "malformed used is unknown");

        let gpus = Gpus::detect(&root, 32 * GIB);
        let devices = gpus.devices();
        let drm: Vec<_> = devices.iter().filter(|d| !d.name.starts_with("NVIDIA")).collect();
        assert_eq!(drm.len(), 3);
        assert!(drm[0].unified && !drm[1].unified && drm[2].unified);
        assert_eq!(drm[1].vram_total, Some(16 * GIB));
        assert_eq!(drm[2].vram_total, None);
        let samples = gpus.sample();
        assert_eq!(samples.len(), devices.len());
        assert_eq!(samples.iter().find(|s| s.index == drm[1].index).unwrap().free, Some(12 * GIB));
    }

    #[test]
    fn no_drm_directory_is_no_gpu() {
        assert!(scan_drm(&HostRoot::under("/nonexistent-lardon")).is_empty());
    }
}
