//! The commit rule over a file's epochs, and small helpers shared with the servers.

use std::path::Path;

use super::*;

/// Which of a file's epochs count, given which are committed (`ids` in
/// order, `committed` alongside): an uncommitted epoch blocks the later
/// epochs of its open, unless a later open has committed epochs (then the
/// earlier open ended in a crash and its uncommitted tail never happened).
/// Shared by one node's view and the servers' merged view of all nodes.
pub fn committed_prefix(ids: &[EpochId], committed: &[bool]) -> Vec<EpochId> {
    let mut out = Vec::new();
    let mut blocked_gen = None;
    for (i, &id) in ids.iter().enumerate() {
        if blocked_gen == Some(id.gen) {
            continue;
        }
        if committed[i] {
            out.push(id);
            continue;
        }
        let later_open_committed = ids
            .iter()
            .zip(committed)
            .skip(i)
            .any(|(other, &c)| c && other.gen > id.gen);
        if !later_open_committed {
            break;
        }
        blocked_gen = Some(id.gen);
    }
    out
}

/// `FileInventory::origin` of the file directory `file_dir`.
pub fn origin_of(file_dir: &Path) -> [u8; 16] {
    let Some(job_dir) = file_dir.parent() else {
        return [0; 16];
    };
    let Ok(made) = std::fs::metadata(job_dir).and_then(|m| m.created()) else {
        return [0; 16];
    };
    let nanos = made
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = job_dir
        .file_name()
        .map(|n| n.as_encoded_bytes())
        .unwrap_or_default();
    let fnv = |seed: u64| {
        let mut h = seed;
        for &b in name.iter().chain(&nanos.to_le_bytes()) {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_le_bytes());
    out[8..].copy_from_slice(&fnv(0x8422_2325_cbf2_9ce4).to_le_bytes());
    out
}

pub fn fmt_ids(ids: &[EpochId]) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    ids.iter()
        .map(EpochId::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
