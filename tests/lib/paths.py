"""Where things are. Everything is found from this file, so that a suite
does not depend on the working directory once it is imported."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "target"
RELEASE = TARGET / "release"
BIN = RELEASE / "paralog"
CAPTURE_LIB = RELEASE / "libparalog_capture.so"
PY = "/usr/bin/python3"

MPI_SRC = ROOT / "tests/mpi"
RUN_DIRECT = MPI_SRC / "run_direct.sh"
MPI_TESTS = TARGET / "mpi-tests"  # what tests/mpi/Makefile builds

POSIX_WRITER = ROOT / "tests/lib/posix_writer.py"
MINIO = TARGET / "go/bin/minio"  # scripts/setup.sh --test
PYLIB = TARGET / "pylib"  # awscli, by scripts/setup.sh --test
