#!/usr/bin/python3
"""A real Slurm on this machine (issue 19): Debian's slurm-wlm (slurmctld,
slurmd, munge), configured and started by this test with one node named
after this host, every daemon on 127.0.0.1 (several slurmd on one host
need a Slurm configured for it; one node is what this test runs),
and the shipped batch script examples/slurm/job.sh submitted with sbatch,
as a user would:

  mpich      a real MPI program (tests/mpi epochs: 2 ranks, 4 epochs,
             collective and independent writes, size changes) started by
             Hydra inside the allocation, the servers by srun one per node:
             the job completes, `paralog wait` reports everything drained
             and ends the server step, and the remote file equals a direct
             MPI-IO run byte for byte
  openmpi    the same with Open MPI's mpirun
  scancel    the job cancelled (scancel) while the program runs, after it
             committed at least 2 epochs; then `paralog recover`: the remote
             file is exactly the direct run's file at some committed epoch
             at or after the last one the program saw committed

Where slurmd cannot start here, the cases are reported as skipped, with
the reason (never silently).

Usage: python3 -m tests.slurm.run [--keep]
Ends with "slurm: N passed, N failed".
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.lib.check import Suite, check, fail
from tests.lib.mpi import MPI_TESTS, build_tests, mpi_env, run_direct
from tests.lib.paths import BIN, ROOT
from tests.lib.proc import run

JOB = ROOT / "examples/slurm/job.sh"
ENV = mpi_env()


class Slurm:
    """slurmctld and slurmd for one node, in a directory of their own."""

    def __init__(self, base):
        self.dir = base / "slurm"
        self.procs = []
        self.started_munge = False

    def conf(self):
        host = socket.gethostname().split(".")[0]
        for d in ("state", "spool", "log"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        cpus = os.cpu_count() or 2
        text = f"""ClusterName=paralogtest
SlurmctldHost={host}(127.0.0.1)
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
SlurmctldPidFile={self.dir}/slurmctld.pid
SlurmdPidFile={self.dir}/slurmd.pid
SlurmdSpoolDir={self.dir}/spool
StateSaveLocation={self.dir}/state
SlurmctldLogFile={self.dir}/log/slurmctld.log
SlurmdLogFile={self.dir}/log/slurmd.log
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
InactiveLimit=0
KillWait=5
MinJobAge=600
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=2000 State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
        path = self.dir / "slurm.conf"
        path.write_text(text)
        return path

    def env(self):
        return {**ENV, "SLURM_CONF": str(self.dir / "slurm.conf")}

    def start(self):
        """None if Slurm runs, else why not."""
        for tool in ("slurmctld", "slurmd", "munged", "sbatch"):
            if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
                return f"{tool} is not installed (scripts/setup.sh --test installs slurm-wlm)"
        if subprocess.run("munge -n | unmunge", shell=True, capture_output=True).returncode != 0:
            if not Path("/etc/munge/munge.key").exists():
                subprocess.run(["mungekey", "-c"], capture_output=True)
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            subprocess.run(["/usr/sbin/munged", "--force"], capture_output=True)
            self.started_munge = True
            if subprocess.run("munge -n | unmunge", shell=True, capture_output=True).returncode != 0:
                return "munged does not start here"
        conf = self.conf()
        for daemon in ("slurmctld", "slurmd"):
            r = subprocess.run([f"/usr/sbin/{daemon}", "-f", str(conf)], capture_output=True, text=True)
            if r.returncode != 0:
                return f"{daemon} does not start here: {r.stderr.strip()[-300:]}"
        deadline = time.time() + 30
        while time.time() < deadline:
            r = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env(), capture_output=True, text=True)
            if r.stdout.strip() == "idle":
                return None
            time.sleep(0.5)
        log = (self.dir / "log/slurmd.log").read_text(errors="replace")[-500:]
        return f"the node did not become idle within 30 s: {log}"

    def stop(self):
        subprocess.run(["scancel", "--full", "--user=root"], env=self.env(), capture_output=True)
        for pidfile in ("slurmd.pid", "slurmctld.pid"):
            try:
                os.kill(int((self.dir / pidfile).read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        if self.started_munge:
            subprocess.run(["pkill", "-x", "munged"], capture_output=True)


def job_settings(work, mpi, launch, program):
    return {"PARALOG": str(BIN), "MPI": mpi, "LOCAL": str(work / "local"), "PREFIX": str(work / "pfs"),
            "REMOTE": str(work / "remote"), "LAUNCH": launch, "PROGRAM": program}


def sbatch(slurm, work, settings, wait):
    (work / "remote").mkdir(exist_ok=True)
    exports = "ALL," + ",".join(f"{k}={v}" for k, v in settings.items())
    cmd = ["sbatch", "--parsable", "--nodes=1", "--ntasks=2", "--ntasks-per-node=2",
           f"--output={work}/job.out", f"--export={exports}", str(JOB)]
    if wait:
        cmd.insert(1, "--wait")
    return run(cmd, env=slurm.env(), check=False, timeout=300)


def direct(work, flavour, mode, *args):
    out = work / "direct"
    r = run_direct(flavour, mode, "epochs", out, *args, env=ENV, np=2, check=False, timeout=300)
    check(r.returncode == 0, f"direct run failed: {r.stderr[-400:]}")
    return out


def case_run(slurm, work, mpi):
    launch = "mpirun.mpich -n 2" if mpi == "mpich" else "mpirun.openmpi --oversubscribe -n 2"
    program = f"{MPI_TESTS}/{mpi}/epochs {work}/pfs --epochs=4"
    r = sbatch(slurm, work, job_settings(work, mpi, launch, program), wait=True)
    out = (work / "job.out").read_text(errors="replace") if (work / "job.out").exists() else ""
    check(r.returncode == 0, f"the job failed (sbatch --wait exit {r.returncode}): {r.stderr[-300:]} {out[-600:]}")
    check("paralog wait: everything committed is drained" in out, f"paralog wait did not report the drain: {out[-600:]}")
    check("server stopped" in out and "pending=0" in out, f"the server step did not end cleanly: {out[-600:]}")
    ref = direct(work, mpi, "romio" if mpi == "mpich" else "ompio", "--epochs=4")
    want, got = (ref / "epochs.dat").read_bytes(), (work / "remote/epochs.dat").read_bytes()
    check(want == got, f"the remote file differs from direct MPI-IO ({len(got)} vs {len(want)} bytes)")


def case_scancel(slurm, work):
    progress = work / "progress"
    program = f"{MPI_TESTS}/mpich/epochs {work}/pfs --epochs=12 --sleep-ms=600 --progress={progress}"
    r = sbatch(slurm, work, job_settings(work, "mpich", "mpirun.mpich -n 2", program), wait=False)
    check(r.returncode == 0, f"sbatch failed: {r.stderr[-300:]}")
    job = r.stdout.strip().split(";")[0]
    deadline = time.time() + 120
    seen = 0
    while time.time() < deadline:
        lines = progress.read_text().split("\n") if progress.exists() else []
        seen = max([int(l.split()[1]) for l in lines if l.startswith("committed ")] or [0])
        if seen >= 2:
            break
        time.sleep(0.2)
    check(seen >= 2, "the program did not commit 2 epochs within 120 s")
    run(["scancel", job], env=slurm.env())
    deadline = time.time() + 60
    while time.time() < deadline:
        q = run(["squeue", "-h", "-j", job], env=slurm.env(), check=False, timeout=60)
        if not q.stdout.strip():
            break
        time.sleep(0.5)
    time.sleep(1)
    r = run([BIN, "recover", "--local", work / "local", "--remote", work / "remote"], env=ENV, check=False, timeout=300)
    check(r.returncode == 0, f"paralog recover exited {r.returncode}: {r.stderr[-500:]}")
    ref = direct(work, "mpich", "romio", "--epochs=12", "--snapshot")
    got = (work / "remote/epochs.dat").read_bytes()
    match = [k for k in range(1, 13) if (ref / f"epochs.dat.epoch{k}").read_bytes() == got]
    if not match:
        fail("the remote file is no committed epoch of the direct run")
    check(match[-1] >= seen, f"the remote file is epoch {match[-1]}, older than epoch {seen} the program saw committed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", action="store_true")
    opts = ap.parse_args()
    # The MPI programs (the same build as tests/capture's).
    build_tests()
    suite = Suite("slurm", keep=opts.keep)
    slurm = Slurm(suite.base)
    cases = [("mpich: sbatch job.sh, Hydra ranks, srun servers, equal direct MPI-IO",
              lambda w: case_run(slurm, w, "mpich")),
             ("openmpi: sbatch job.sh, Open MPI ranks, equal direct MPI-IO",
              lambda w: case_run(slurm, w, "openmpi")),
             ("scancel mid-run, then recover: a committed epoch", lambda w: case_scancel(slurm, w))]
    try:
        why = slurm.start()
        for name, fn in cases:
            if why:
                suite.skip(name, why)
            else:
                suite.case(name, fn)
    finally:
        slurm.stop()
    return suite.finish()


if __name__ == "__main__":
    sys.exit(main())
