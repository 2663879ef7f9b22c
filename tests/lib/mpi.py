"""MPI for the tests: the three modes every MPI suite covers, launchers, the
environment Open MPI needs as root on 2 cores, the programs of tests/mpi
(built by its Makefile, run directly by run_direct.sh) and compiling a
suite's own programs."""

import os
import re
from pathlib import Path

from .check import Failed, suite_options
from .paths import MPI_SRC, MPI_TESTS, RUN_DIRECT
from .proc import run

# mode: (flavour, MPI-IO implementation)
MODES = {
    "mpich": ("mpich", "romio"),
    "ompio": ("openmpi", "ompio"),
    "romio321": ("openmpi", "romio321"),
}
# The MPI-IO of a flavour's default mode.
DEFAULT_IO = {"mpich": "romio", "openmpi": "ompio"}

ALL = tuple(MODES)
OPENMPI = ("ompio", "romio321")

# The capture test programs of tests/mpi (tests/mpi/README.md), run by the
# capture, server and S3 suites: (case name, program, extra arguments per
# mode, modes).
PROGRAMS = [
    ("header_subarray", "header_subarray", {}, ALL),
    ("noncontig_holes", "noncontig_holes", {}, ALL),
    # OMPIO 4.1.4's own MPI_File_preallocate corrupts the direct file
    # (tests/mpi/README.md); the reference there uses set_size instead.
    ("size_ops", "size_ops", {"ompio": ["--no-preallocate"]}, ALL),
    ("fortran use mpi", "f_usempi", {}, ALL),
    ("fortran use mpi_f08", "f_mpif08", {}, ALL),
    ("hdf5", "hdf5_writer", {}, ALL),
    ("pnetcdf", "pnetcdf_writer", {}, OPENMPI),
    ("h5py", "h5py_writer.py", {}, OPENMPI),
    ("mpi4py", "mpi4py_writer.py", {}, OPENMPI),
    ("many files", "many_files", {}, ALL),
    ("threads", "threads", {}, ALL),
    ("fork/exec", "forkexec", {}, ALL),
    # romio321 segfaults in iwrite_all even without paralog.
    ("nonblocking", "nonblocking", {"romio321": ["--no-iwrite-all"]}, ALL),
    ("deferred open", "deferred", {}, ALL),
    ("recreate", "recreate", {}, ALL),
    ("outside the prefix", "outside_prefix", {}, ALL),
]

# Open MPI refuses to run as root without the first two; 4 ranks on 2 cores
# need oversubscription.
OPEN_MPI_AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                    "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def rank_reports(out, after):
    """Each rank's report "rank R<after>TEXT" in `out` as {R: TEXT}, found
    wherever it starts: mpirun forwards the ranks' output and may join a
    line of one rank to another's (Open MPI did, in CI). `after` is the
    regular expression between the rank and the text."""
    marks = list(re.finditer(rf"rank (\d+){after}", out))
    found = {}
    for m, nxt in zip(marks, marks[1:] + [None]):
        text = out[m.end():nxt.start() if nxt else len(out)]
        found[int(m[1])] = text.split("\n", 1)[0].strip()
    return found


def mpi_env(extra=None, drop=()):
    """This process's environment without LD_PRELOAD (and the names starting
    with `drop`), with OPEN_MPI_AS_ROOT and `extra`."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith(tuple(drop))}
    env.update(OPEN_MPI_AS_ROOT)
    env.update(extra or {})
    return env


def io_env(mode):
    """The environment that selects a mode's MPI-IO (Open MPI: OMPI_MCA_io)."""
    flavour, io = MODES[mode]
    return {"OMPI_MCA_io": io} if flavour == "openmpi" else {}


def launcher(flavour, np, io=None):
    """mpirun of a flavour for np ranks (Open MPI: oversubscribed, and
    `--mca io IO` if given)."""
    if flavour == "mpich":
        return ["mpirun.mpich", "-n", str(np)]
    cmd = ["mpirun.openmpi", "-n", str(np), "--oversubscribe"]
    if io:
        cmd += ["--mca", "io", io]
    return cmd


def mode_options():
    """The command line of a suite that runs programs in the MPI modes:
    suite_options() and --mode MODE (repeatable), parsed; `modes` is the
    modes chosen, every mode by default."""
    ap = suite_options()
    ap.add_argument("--mode", choices=list(MODES), action="append")
    a = ap.parse_args()
    a.modes = a.mode or list(MODES)
    return a


def build_tests(*targets):
    """tests/mpi's programs into target/mpi-tests (make: only what changed)."""
    run(["make", "-s", "-C", MPI_SRC, f"OUT={MPI_TESTS}", *targets], timeout=3600)


def program(flavour, prog):
    """The path of a tests/mpi program built for a flavour."""
    p = MPI_TESTS / flavour / prog
    if not p.exists():
        raise Failed(f"{p} is missing: run `make build` (tests/mpi)")
    return p


def run_direct(flavour, io, prog, outdir, *args, env=None, np=None, check=True, timeout=600):
    """A tests/mpi program run directly (no capture) by run_direct.sh; env
    is the whole environment (None: this process's), np the ranks (default
    4)."""
    if np is not None:
        env = {**(env if env is not None else os.environ), "NP": str(np)}
    return run([RUN_DIRECT, flavour, io, prog, outdir, *args], env=env, check=check, timeout=timeout)


def reference(flavour, prog, args, outdir, np):
    """A tests/mpi program run directly with np ranks in its flavour's
    default mode: the reference of the simulated-node tests."""
    run_direct(flavour, DEFAULT_IO[flavour], prog, outdir, *args, env=mpi_env(), np=np, timeout=300)


def compile_program(cc, src, exe, *flags, libs=(), cwd=None, always=False):
    """Compile src into exe with `cc` (`cc FLAGS -o EXE SRC LIBS`) unless exe
    is newer (always: in any case); exe."""
    exe, src = Path(exe), Path(src)
    exe.parent.mkdir(parents=True, exist_ok=True)
    if always or not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        run([cc, *flags, "-o", exe, src, *libs], cwd=cwd, timeout=600)
    return exe
