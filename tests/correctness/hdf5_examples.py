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

Usage: tests/correctness/hdf5_examples.py [--rounds N]
Ends with "hdf5 examples: N passed, N failed".
"""
import argparse
import gzip
import shutil
import subprocess
import sys
from pathlib import Path

from common import BIN, ENV, ROOT, run_cases

EXAMPLES = Path("/usr/share/doc/libhdf5-doc/examples")
BUILD = ROOT / "target/hdf5-examples"
MODES = {  # mode: (flavour, launcher, extra environment)
    "mpich": ("mpich", "mpirun.mpich", {}),
    "ompio": ("openmpi", "mpirun.openmpi", {"OMPI_MCA_io": "ompio"}),
    "romio321": ("openmpi", "mpirun.openmpi", {"OMPI_MCA_io": "romio321"}),
}


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
        subprocess.run([compiler, "-o", exe, source(name)], check=True, capture_output=True, cwd=BUILD)
    return exe


def h5same(a, b):
    return subprocess.run(["h5diff", a, b], capture_output=True).returncode == 0


def paralog_run(prefix, local, cmd, mpi, env, cwd=None):
    args = [BIN, "run", "--prefix", prefix, "--local", local, "--job", "t", "--mpi", mpi, "--", *cmd]
    return subprocess.run(list(map(str, args)), env=env, capture_output=True, text=True, timeout=300, cwd=cwd)


def case_ph5(mode, rounds, work):
    flavour, launcher, extra = MODES[mode]
    exe = build("ph5example.c", f"h5pcc.{flavour}")
    env = {**ENV, **extra}
    direct = work / "direct"
    direct.mkdir()
    r = subprocess.run([launcher, "-n", "4", exe, "-c", "-f", direct], env=env, capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or "finished with no errors" not in r.stdout:
        return f"direct run failed: {r.stdout[-300:]}{r.stderr[-300:]}"
    for i in range(rounds):
        prefix, local = work / f"p{i}", work / f"l{i}"
        prefix.mkdir()
        r = paralog_run(prefix, local, [launcher, "-n", "4", exe, "-c", "-f", prefix], flavour, env)
        if r.returncode != 0 or "finished with no errors" not in r.stdout:
            return f"round {i}: paralog run exited {r.returncode}: {r.stdout[-400:]}{r.stderr[-400:]}"
        for f in ("ParaEg0.h5", "ParaEg1.h5"):
            if not h5same(direct / f, prefix / f):
                return f"round {i}: {f} differs from the direct run (h5diff)"
    return None


def case_serial(work):
    # Debian's parallel HDF5 is the one installed; its default driver is
    # sec2 (plain POSIX), and these programs call no MPI.
    writer, reader = build("h5_write.c", "h5pcc.mpich"), build("h5_read.c", "h5pcc.mpich")
    direct, prefix, local = work / "direct", work / "prefix", work / "local"
    direct.mkdir()
    prefix.mkdir()
    d1 = subprocess.run([writer], cwd=direct, capture_output=True, text=True)
    d2 = subprocess.run([reader], cwd=direct, capture_output=True, text=True)
    if d1.returncode or d2.returncode:
        return f"direct run failed: {d1.stderr}{d2.stderr}"
    script = f"{writer} && {reader}"
    r = paralog_run(prefix, local, ["/bin/bash", "-c", script], "none", ENV, cwd=prefix)
    if r.returncode != 0:
        return f"paralog run exited {r.returncode}: {r.stderr[-600:]}"
    if d2.stdout not in r.stdout:
        return f"h5_read printed something else under paralog: {r.stdout[:400]!r} vs {d2.stdout[:400]!r}"
    if not h5same(direct / "SDS.h5", prefix / "SDS.h5"):
        return "SDS.h5 differs from the direct run (h5diff)"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    if not EXAMPLES.is_dir():
        print(f"FAIL setup: {EXAMPLES} missing (Debian package libhdf5-doc; scripts/setup.sh --test installs it)")
        print("hdf5 examples: 0 passed, 1 failed")
        sys.exit(1)
    cases = [(f"{m} ph5example x{opts.rounds}", lambda w, m=m: case_ph5(m, opts.rounds, w)) for m in MODES]
    cases.append(("serial h5_write + h5_read", case_serial))
    run_cases("hdf5 examples", cases)

if __name__ == "__main__":
    main()
