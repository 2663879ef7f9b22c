#!/usr/bin/python3
"""HDF5's own example programs (Debian's libhdf5-doc), which we did not
write, under `paralog run`, compared with direct runs.

  ph5example   HDF5's parallel example: split communicators, independent
               and collective writes, then the files closed and reopened
               and every value read back and checked by the program itself
               (the reopen-and-read pattern of issue 12), MPICH/ROMIO,
               Open MPI/OMPIO and Open MPI/ROMIO, 4 ranks, several rounds
  serial       h5_write then h5_read (sec2 driver, plain POSIX, no MPI):
               the reader's output and the file equal the direct run's

Usage: python3 -m tests.correctness.hdf5_examples [--rounds N]
Ends with "hdf5 examples: N passed, N failed".
"""
import argparse
import gzip
import shutil
import sys
from pathlib import Path

from tests.lib.check import Suite, check
from tests.lib.compare import h5same
from tests.lib.mpi import MODES, compile_program, io_env, launcher, mpi_env
from tests.lib.paralog import paralog_run
from tests.lib.paths import TARGET
from tests.lib.proc import run

EXAMPLES = Path("/usr/share/doc/libhdf5-doc/examples")
BUILD = TARGET / "hdf5-examples"


def source(name):
    """An example's source, uncompressed into the build directory."""
    BUILD.mkdir(parents=True, exist_ok=True)
    plain, packed = EXAMPLES / name, EXAMPLES / f"{name}.gz"
    out = BUILD / name
    if plain.exists():
        shutil.copy(plain, out)
    else:
        out.write_bytes(gzip.decompress(packed.read_bytes()))
    return out


def build(name, compiler):
    exe = BUILD / f"{Path(name).stem}.{compiler}"
    if not exe.exists():
        # cwd: h5pcc leaves its object file in the working directory.
        compile_program(compiler, source(name), exe, cwd=BUILD)
    return exe


def case_ph5(mode, rounds, work):
    flavour, _ = MODES[mode]
    exe = build("ph5example.c", f"h5pcc.{flavour}")
    env = mpi_env(io_env(mode))
    mpirun = launcher(flavour, 4)
    direct = work / "direct"
    direct.mkdir()
    r = run([*mpirun, exe, "-c", "-f", direct], env=env, check=False, timeout=120)
    check(r.returncode == 0 and "finished with no errors" in r.stdout,
          f"direct run failed: {r.stdout[-300:]}{r.stderr[-300:]}")
    for i in range(rounds):
        prefix, local = work / f"p{i}", work / f"l{i}"
        prefix.mkdir()
        r = paralog_run(local, prefix, [*mpirun, exe, "-c", "-f", prefix], mpi=flavour, env=env, check=False,
                        timeout=300)
        check(r.returncode == 0 and "finished with no errors" in r.stdout,
              f"round {i}: paralog run exited {r.returncode}: {r.stdout[-400:]}{r.stderr[-400:]}")
        for f in ("ParaEg0.h5", "ParaEg1.h5"):
            check(h5same(direct / f, prefix / f), f"round {i}: {f} differs from the direct run (h5diff)")


def case_serial(work):
    # Debian's parallel HDF5 is the one installed; its default driver is
    # sec2 (plain POSIX), and these programs call no MPI.
    writer, reader = build("h5_write.c", "h5pcc.mpich"), build("h5_read.c", "h5pcc.mpich")
    direct, prefix, local = work / "direct", work / "prefix", work / "local"
    direct.mkdir()
    prefix.mkdir()
    d1 = run([writer], cwd=direct, check=False)
    d2 = run([reader], cwd=direct, check=False)
    check(not d1.returncode and not d2.returncode, f"direct run failed: {d1.stderr}{d2.stderr}")
    script = f"{writer} && {reader}"
    r = paralog_run(local, prefix, ["/bin/bash", "-c", script], env=mpi_env(), check=False, timeout=300, cwd=prefix)
    check(r.returncode == 0, f"paralog run exited {r.returncode}: {r.stderr[-600:]}")
    check(d2.stdout in r.stdout,
          f"h5_read printed something else under paralog: {r.stdout[:400]!r} vs {d2.stdout[:400]!r}")
    check(h5same(direct / "SDS.h5", prefix / "SDS.h5"), "SDS.h5 differs from the direct run (h5diff)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    suite = Suite("hdf5 examples")
    if not EXAMPLES.is_dir():
        suite.fail_case("setup", f"{EXAMPLES} missing (Debian package libhdf5-doc; scripts/setup.sh --test installs it)")
        return suite.finish()
    cases = [(f"{m} ph5example x{opts.rounds}", lambda w, m=m: case_ph5(m, opts.rounds, w)) for m in MODES]
    cases.append(("serial h5_write + h5_read", case_serial))
    return suite.run(cases)


if __name__ == "__main__":
    sys.exit(main())
