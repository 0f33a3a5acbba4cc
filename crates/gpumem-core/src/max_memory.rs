//! `max_memory` as transformers and accelerate take it (`--max-memory`, the
//! transformers engine's flag): a leaf both the engine and the device-map planner read.

use crate::catalogue::parse_capacity;

/// The flag carrying `max_memory` as users write it.
pub const MAX_MEMORY: &str = "max-memory";

/// `max_memory` as read: the GPUs' (index, bytes) in index order and the CPU's.
pub type MaxMemory = (Vec<(u32, u64)>, Option<u64>);

/// `max_memory` as users write it: `0=20GiB,1=20GiB,cpu=64GiB` (`:` also separates;
/// sizes as accelerate's `convert_file_size_to_int` reads GiB, GB, MiB, MB, or bytes).
pub fn parse_max_memory(text: &str) -> Result<MaxMemory, String> {
    let mut gpus: Vec<(u32, u64)> = Vec::new();
    let mut cpu = None;
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .or_else(|| part.split_once(':'))
            .ok_or_else(|| format!("{part}: write DEVICE=SIZE (0=20GiB, cpu=64GiB)"))?;
        let (k, v) = (
            k.trim().trim_matches(['"', '\'']),
            v.trim().trim_matches(['"', '\'']),
        );
        let bytes = match parse_capacity(v) {
            Some(b) => b,
            None if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
                v.parse::<u64>().map_err(|_| format!("{v}: too large"))?
            }
            None => return Err(format!("{v}: a size such as 20GiB or 22GB")),
        };
        if k.eq_ignore_ascii_case("cpu") {
            if cpu.replace(bytes).is_some() {
                return Err("cpu given twice".into());
            }
        } else {
            let i: u32 = k
                .parse()
                .map_err(|_| format!("{k}: a GPU index (0, 1, …) or cpu"))?;
            // Kept in index order as read.
            let at = gpus.partition_point(|(g, _)| *g < i);
            if gpus.get(at).is_some_and(|(g, _)| *g == i) {
                return Err(format!("GPU {i} given twice"));
            }
            gpus.insert(at, (i, bytes));
        }
    }
    if gpus.is_empty() && cpu.is_none() {
        return Err("no device: 0=20GiB,cpu=64GiB".into());
    }
    Ok((gpus, cpu))
}
