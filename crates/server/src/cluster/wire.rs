//! The bytes of the rounds' messages (delta.rs). The encoding is private to
//! one server job (all servers run the same binary), so it has no version:
//! length-prefixed fields, little-endian; a message that does not decode to
//! its last byte is refused, naming the server and the byte.

use paralog_log::EpochId;

use super::summary::{EpochSummary, FileSummary, GenSummary, ShippedManifest};

/// A message from another server could not be read (servers of different
/// builds in one job).
#[derive(Debug, thiserror::Error)]
#[error("round message from server {from}: {what} at byte {at}")]
pub struct DecodeError {
    pub from: usize,
    pub what: &'static str,
    pub at: usize,
}

#[derive(Default)]
pub(super) struct Out(pub Vec<u8>);

impl Out {
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    pub fn bool(&mut self, b: bool) {
        self.0.push(b as u8);
    }
    fn opt_id(&mut self, p: Option<EpochId>) {
        self.bool(p.is_some());
        let id = p.unwrap_or_default();
        self.u64(id.gen);
        self.u64(id.epoch);
    }

    /// A file's summary without its epochs (its gens' `epochs` are not
    /// written).
    pub fn file_header(&mut self, f: &FileSummary) {
        self.bytes(f.job.as_bytes());
        self.bytes(f.dir.as_bytes());
        self.bytes(&f.path);
        self.bytes(&f.rel);
        self.opt_id(f.progress);
        self.bool(f.damaged.is_some());
        self.bytes(f.damaged.as_deref().unwrap_or("").as_bytes());
        self.u64(f.gens.len() as u64);
        for g in &f.gens {
            self.u64(g.gen);
            self.bool(g.closed);
            self.u64(g.ranks.len() as u64);
            for &r in &g.ranks {
                self.u64(r as u64);
            }
        }
    }

    pub fn epoch(&mut self, e: &EpochSummary) {
        self.u64(e.epoch);
        self.bool(e.marked);
        self.u64(e.manifests.len() as u64);
        for m in &e.manifests {
            self.u64(m.rank as u64);
            self.bytes(m.path.as_bytes());
            self.u64(m.offset);
            self.u64(m.version as u64);
            self.bytes(&m.bytes);
        }
    }
}

pub(super) struct In<'a> {
    b: &'a [u8],
    at: usize,
    from: usize,
}

impl<'a> In<'a> {
    pub fn new(b: &'a [u8], from: usize) -> In<'a> {
        In { b, at: 0, from }
    }
    pub fn err(&self, what: &'static str) -> DecodeError {
        DecodeError {
            from: self.from,
            what,
            at: self.at,
        }
    }
    pub fn done(&self) -> Result<(), DecodeError> {
        if self.at != self.b.len() {
            return Err(self.err("trailing bytes"));
        }
        Ok(())
    }
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        if self.b.len() - self.at < n {
            return Err(self.err("truncated"));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let s = self.take(8)?;
        Ok(u64::from_le_bytes(s.try_into().expect("8 bytes")))
    }
    /// A count or length: never more than the bytes left (each item takes
    /// at least one), so a damaged count cannot make a huge allocation.
    pub fn len(&mut self) -> Result<usize, DecodeError> {
        let n = self.u64()?;
        if n > (self.b.len() - self.at) as u64 {
            return Err(self.err("length past the end"));
        }
        Ok(n as usize)
    }
    /// A counted list, each item decoded by `item`.
    pub fn list<T>(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let n = self.len()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(item(self)?);
        }
        Ok(out)
    }
    pub fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let n = self.len()?;
        Ok(self.take(n)?.to_vec())
    }
    pub fn string(&mut self) -> Result<String, DecodeError> {
        String::from_utf8(self.bytes()?).map_err(|_| self.err("not UTF-8"))
    }
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        Ok(self.take(1)?[0] != 0)
    }
    fn opt_id(&mut self) -> Result<Option<EpochId>, DecodeError> {
        let some = self.bool()?;
        let id = EpochId::new(self.u64()?, self.u64()?);
        Ok(some.then_some(id))
    }

    /// A file written by [`Out::file_header`]: every gen without epochs.
    pub fn file_header(&mut self) -> Result<FileSummary, DecodeError> {
        let job = self.string()?;
        let dir = self.string()?;
        let path = self.bytes()?;
        let rel = self.bytes()?;
        let progress = self.opt_id()?;
        let has_damage = self.bool()?;
        let damage = self.string()?;
        let gens = self.list(|i| {
            Ok(GenSummary {
                gen: i.u64()?,
                closed: i.bool()?,
                ranks: i.list(|i| Ok(i.u64()? as u32))?,
                epochs: Vec::new(),
            })
        })?;
        Ok(FileSummary {
            job,
            dir,
            path,
            rel,
            progress,
            damaged: has_damage.then_some(damage),
            gens,
        })
    }

    pub fn epoch(&mut self) -> Result<EpochSummary, DecodeError> {
        let epoch = self.u64()?;
        let marked = self.bool()?;
        let manifests = self.list(|i| {
            Ok(ShippedManifest {
                rank: i.u64()? as u32,
                path: i.string()?,
                offset: i.u64()?,
                version: i.u64()? as u16,
                bytes: i.bytes()?,
            })
        })?;
        Ok(EpochSummary {
            epoch,
            marked,
            manifests,
        })
    }
}
