//! Which MPI a command launches (`--mpi`, or the launcher's name and the
//! program's linked libraries), for the shim capture preloads.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::env::Mpi;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MpiChoice {
    Mpich,
    Openmpi,
    None,
}

impl MpiChoice {
    /// The MPI shim to preload (`None` for a plain POSIX program).
    pub fn shim(self) -> Option<Mpi> {
        match self {
            MpiChoice::Mpich => Some(Mpi::Mpich),
            MpiChoice::Openmpi => Some(Mpi::Openmpi),
            MpiChoice::None => None,
        }
    }
}

/// Which MPI a command uses: its launcher's name (through Debian's
/// alternatives symlinks), else the libraries the program links.
pub fn detect_mpi(command: &[String]) -> Option<Mpi> {
    let by_name = |name: &str| -> Option<Mpi> {
        if name.ends_with(".mpich") || name.contains("hydra") {
            Some(Mpi::Mpich)
        } else if name.ends_with(".openmpi") || name == "orterun" || name == "prterun" {
            Some(Mpi::Openmpi)
        } else {
            None
        }
    };
    let first = command.first()?;
    let exe = which(first)?;
    let real = std::fs::canonicalize(&exe).unwrap_or(exe.clone());
    for p in [&exe, &real] {
        if let Some(m) = p.file_name().and_then(|n| n.to_str()).and_then(by_name) {
            return Some(m);
        }
    }
    // A program started without a launcher (singleton MPI), or a launcher
    // we do not know: look at what the programs on the line link.
    for arg in command {
        let Some(p) = which(arg) else { continue };
        if let Some(m) = linked_mpi(&p) {
            return Some(m);
        }
    }
    None
}

pub fn which(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn linked_mpi(prog: &Path) -> Option<Mpi> {
    let mut head = [0u8; 4];
    std::fs::File::open(prog).ok()?.read_exact(&mut head).ok()?;
    if &head != b"\x7fELF" {
        return None;
    }
    let out = Command::new("ldd").arg(prog).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("libmpich") {
        Some(Mpi::Mpich)
    } else if text.contains("libmpi.so") {
        Some(Mpi::Openmpi)
    } else {
        None
    }
}
