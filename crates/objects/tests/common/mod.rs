//! Helpers shared by the tests: stores in temporary directories, a small
//! deterministic random generator, and a reference hyperslab.
#![allow(dead_code)]

use paralog_objects::Store;

/// A plain-directory store, and its directory (kept alive by the guard).
pub fn plain() -> (tempfile::TempDir, Store) {
    let t = tempfile::tempdir().unwrap();
    let s = Store::open(&t.path().to_str().unwrap().parse().unwrap()).unwrap();
    (t, s)
}

/// The plain-directory store at `dir` (another handle on it).
pub fn plain_at(dir: &std::path::Path) -> Store {
    Store::open(&dir.to_str().unwrap().parse().unwrap()).unwrap()
}

/// An `objstore://` store with `dirs` storage directories, keeping `keep`.
pub fn objstore(dirs: u32, keep: u64) -> (tempfile::TempDir, Store) {
    let t = tempfile::tempdir().unwrap();
    let url = format!("objstore://{}?dirs={dirs}&keep={keep}", t.path().display());
    let s = Store::open(&url.parse().unwrap()).unwrap();
    (t, s)
}

/// The numbers of the versions of `name` that `store` keeps, oldest first.
pub fn kept_numbers(store: &Store, name: &str) -> Vec<u64> {
    store
        .versions(name)
        .unwrap()
        .iter()
        .map(|v| v.number)
        .collect()
}

/// xorshift64*: reproducible values without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// A random non-empty hyperslab of `shape`.
    pub fn slab(&mut self, shape: &[u64]) -> (Vec<u64>, Vec<u64>) {
        let start: Vec<u64> = shape.iter().map(|&s| self.below(s)).collect();
        let count = shape
            .iter()
            .zip(&start)
            .map(|(&s, &a)| 1 + self.below(s - a))
            .collect();
        (start, count)
    }
}

/// The hyperslab of a row-major array computed element by element: an
/// independent check of the chunked copy.
pub fn slab_of(data: &[u8], isz: usize, shape: &[u64], start: &[u64], count: &[u64]) -> Vec<u8> {
    let d = shape.len();
    let total: u64 = count.iter().product();
    let mut out = Vec::with_capacity(total as usize * isz);
    for k in 0..total {
        // The k-th element of the slab, row-major.
        let mut rem = k;
        let mut idx = vec![0u64; d];
        for i in (0..d).rev() {
            idx[i] = start[i] + rem % count[i];
            rem /= count[i];
        }
        let off = idx.iter().zip(shape).fold(0, |a, (x, s)| a * s + x) as usize * isz;
        out.extend_from_slice(&data[off..off + isz]);
    }
    out
}

/// Every file below `p` (none when it does not exist).
pub fn files_under(p: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(d) = std::fs::read_dir(p) {
        for e in d.flatten() {
            if e.path().is_dir() {
                out.extend(files_under(&e.path()));
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

/// Copy the tree `from` to `to` (a node-local store as it was).
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let t = to.join(e.file_name());
        if e.path().is_dir() {
            copy_tree(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), t).unwrap();
        }
    }
}
