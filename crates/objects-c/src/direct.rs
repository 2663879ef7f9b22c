//! The store behind a C handle: the directory layout (`objstore://`, a
//! plain directory) or S3 (`s3://`), and a writer of either, so that the
//! C functions (and Python's, which call them) are the same for both.

use paralog_backend::RemoteUrl;
use paralog_objects::{
    ArrayMeta, ArrayVersion, Committed, Put, Result, S3Put, S3Store, Store, VersionId,
};

pub enum Direct {
    Layout(Store),
    S3(S3Store),
}

pub enum Writer {
    Layout(Put<'static>),
    S3(S3Put<'static>),
}

impl Direct {
    pub fn open(url: &RemoteUrl) -> Result<Direct> {
        match url {
            RemoteUrl::S3(u) => S3Store::open(u).map(Direct::S3),
            // The views of a program's commits are made by a thread of
            // it while it goes on (docs/objects.md "Views").
            _ => Store::open(url)
                .and_then(Store::background_views)
                .map(Direct::Layout),
        }
    }

    pub fn put(&self, name: &str, m: &ArrayMeta, data: &[u8]) -> Result<Committed> {
        match self {
            Direct::Layout(s) => s.put(name, m, data),
            Direct::S3(s) => s.put(name, m, data),
        }
    }

    pub fn begin(&self, name: &str, m: &ArrayMeta) -> Result<VersionId> {
        match self {
            Direct::Layout(s) => s.begin(name, m).map(|p| p.id()),
            Direct::S3(s) => s.begin(name, m).map(|p| p.id()),
        }
    }

    pub fn join_as(&'static self, name: &str, id: &VersionId, m: &ArrayMeta) -> Result<Writer> {
        match self {
            Direct::Layout(s) => s.join_as(name, id, m).map(Writer::Layout),
            Direct::S3(s) => s.join_as(name, id, m).map(Writer::S3),
        }
    }

    pub fn commit(&self, name: &str, id: &VersionId) -> Result<Committed> {
        match self {
            Direct::Layout(s) => s.commit(name, id),
            Direct::S3(s) => s.commit(name, id),
        }
    }

    pub fn abort(&self, name: &str, id: &VersionId) -> Result<()> {
        match self {
            Direct::Layout(s) => s.abort(name, id),
            Direct::S3(s) => s.abort(name, id),
        }
    }

    pub fn array(&self, name: &str, version: Option<u64>) -> Result<ArrayVersion> {
        match self {
            Direct::Layout(s) => s.array(name, version),
            Direct::S3(s) => s.array(name, version),
        }
    }

    pub fn read(&self, av: &ArrayVersion, start: &[u64], count: &[u64]) -> Result<Vec<u8>> {
        match self {
            Direct::Layout(s) => av.read(s, start, count),
            Direct::S3(s) => s.read(av, start, count),
        }
    }
}

impl Writer {
    pub fn id(&self) -> VersionId {
        match self {
            Writer::Layout(p) => p.id(),
            Writer::S3(p) => p.id(),
        }
    }

    pub fn meta(&self) -> &ArrayMeta {
        match self {
            Writer::Layout(p) => p.meta(),
            Writer::S3(p) => p.meta(),
        }
    }

    pub fn write_chunk(&mut self, coords: &[u64], data: &[u8]) -> Result<()> {
        match self {
            Writer::Layout(p) => p.write_chunk(coords, data),
            Writer::S3(p) => p.write_chunk(coords, data),
        }
    }

    pub fn write_part(&mut self, start: &[u64], count: &[u64], data: &[u8]) -> Result<()> {
        match self {
            Writer::Layout(p) => p.write_part(start, count, data),
            Writer::S3(p) => p.write_part(start, count, data),
        }
    }

    pub fn finish(self) -> Result<()> {
        match self {
            Writer::Layout(p) => p.finish(),
            Writer::S3(p) => p.finish(),
        }
    }
}
