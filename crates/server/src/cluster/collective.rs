//! The bytes of a POSIX drain written with collective MPI-IO
//! (`--posix-writes collective`): every server opens the remote file, and
//! each window is one `MPI_File_write_all` of the blocks whose logs this
//! server holds, so that the MPI library aggregates them (ROMIO's
//! two-phase I/O, OMPIO's fcoll) with its file-system tuning. The default
//! is independent writes, measured faster here (docs/benchmarks.md §8).

use std::path::Path;

use paralog_log::reader::SourceReader;
use paralog_log::LogicalFile;

use super::group::Run;
use super::mpi::Reduce;
use super::plan::Group;
use super::{ClusterError, Coordinator};
use crate::retry::Failure;

impl Coordinator {
    /// Write this server's winning bytes of `lf` into `path` together with
    /// the others. Every server calls it; a local failure still takes part
    /// in every collective (with nothing) and is returned for the agreement
    /// that follows. The bytes this server wrote, and its failure.
    pub(super) fn write_collective(
        &self,
        path: &Path,
        g: &Group,
        lf: &LogicalFile,
        reader: &mut SourceReader,
    ) -> Result<(u64, Option<Failure>), ClusterError> {
        let me = self.comm.rank();
        // This server's blocks, in offset order, in windows.
        let windows = super::group::windows(g, lf, self.cfg.buf_bytes as u64, Some(me));
        let mut rounds = [windows.len() as i64];
        self.dog
            .watch(|| self.comm.allreduce(&mut rounds, Reduce::Max))?;
        let opened = self.dog.watch(|| self.comm.file_open(path));
        let (file, open_err) = match opened {
            Ok(f) => (Some(f), None),
            Err(e) => (
                None,
                Some(Failure::Retry(format!("{}: {e}", path.display()))),
            ),
        };
        // Opening is collective: if it failed anywhere, nobody writes.
        if let Some(e) = self.agree(open_err)? {
            if let Some(f) = file {
                let _ = self.dog.watch(|| f.close());
            }
            return Ok((0, Some(e)));
        }
        let file = file.expect("agreed: opened everywhere");
        let mut failed: Option<Failure> = None;
        let mut mine = 0u64;
        let mut data = Vec::new();
        let mut blocks = Vec::new();
        for k in 0..rounds[0] as usize {
            crate::failpoint::hit("cluster.mid_write");
            data.clear();
            blocks.clear();
            if failed.is_none() {
                for &Run {
                    off,
                    len: n,
                    source,
                    skip,
                    ..
                } in windows.get(k).into_iter().flatten()
                {
                    let at = data.len();
                    data.resize(at + n as usize, 0);
                    if let Err(e) = reader.read(&lf.sources[source], skip, &mut data[at..]) {
                        failed = Some(Failure::damaged(e));
                        break;
                    }
                    blocks.push((off, n));
                }
                if failed.is_some() {
                    data.clear();
                    blocks.clear();
                }
            }
            let r = self.dog.watch(|| file.write_all(&blocks, &data));
            match r {
                Ok(()) => mine += data.len() as u64,
                Err(e) => {
                    if failed.is_none() {
                        failed = Some(Failure::Retry(format!("{}: {e}", path.display())));
                    }
                }
            }
        }
        if let Err(e) = self.dog.watch(|| file.sync()) {
            failed.get_or_insert(Failure::Retry(format!("{}: {e}", path.display())));
        }
        if let Err(e) = self.dog.watch(|| file.close()) {
            failed.get_or_insert(Failure::Retry(format!("{}: {e}", path.display())));
        }
        Ok((mine, failed))
    }
}
