#!/usr/bin/python3
"""Python programs writing files the ways training loops and scripts do.

Usage: pyprogs.py KIND DIR   (KIND below; exit 1 with a line on a failed check)

  numpy      numpy.save/load, tofile/fromfile, savez, pickle dump/load
  atomic     write ckpt.tmp, flush, fsync, os.replace to ckpt (4 rounds,
             replacing the previous one), a rotation keeping the last 2
             (the oldest unlinked), each read back after the rename
  dup2       os.dup2 of a file onto fds 1 and 2, print() and os.write, restored
  subprocess subprocess.run(stdout=f) into a file, the parent writing before
             and after the child
  dirs       os.makedirs of nested directories, files in them, one removed
             again with its directory (os.remove + os.rmdir), a listing checked,
             a tree of 40 files removed by shutil.rmtree
  h5py       a serial HDF5 file through h5py (sec2 driver): created, closed,
             reopened for append, read back
  locks      another process opens an HDF5 file this one has open for
             writing (HDF5's file lock), and tries flock and lockf locks held
             here, then released; the outcomes are printed
  sqlite     Python's sqlite3 (the SQLite library): a database in each
             rollback-journal mode (DELETE, TRUNCATE; PERSIST keeps a
             journal with a random nonce, unlike any direct run), 40
             transactions, a delete, VACUUM, reopened and checked
  terminated writers that never close their files, ended by a signal: the
             workers of a multiprocessing.Pool (its `with` block terminates
             them with SIGTERM) each keeping a file open and appending to a
             shared log through logging.FileHandler; processes blocked in a
             read, killed by SIGTERM and SIGHUP after writing; the log is
             read back sorted (the order of its lines is the scheduler's)
"""
import os
import pickle
import shutil
import subprocess
import sys


def check(cond, what):
    if not cond:
        print(f"pyprogs: {what}", file=sys.stderr)
        sys.exit(1)


def numpy_case(d):
    import numpy as np
    a = np.arange(200000, dtype=np.float64).reshape(400, 500) * 0.25
    np.save(f"{d}/a.npy", a)
    b = np.load(f"{d}/a.npy")
    check((a == b).all(), "numpy.load after numpy.save")
    a[3:7] = -1
    a.tofile(f"{d}/a.raw")
    c = np.fromfile(f"{d}/a.raw", dtype=np.float64).reshape(400, 500)
    check((a == c).all(), "fromfile after tofile")
    np.savez(f"{d}/z.npz", x=a[:10], y=np.ones(7, dtype=np.int32))
    z = np.load(f"{d}/z.npz")
    check(int(z["y"].sum()) == 7, "savez/load")
    with open(f"{d}/state.pkl", "wb") as f:
        pickle.dump({"step": 12, "w": a[:20].tolist()}, f)
    with open(f"{d}/state.pkl", "rb") as f:
        s = pickle.load(f)
    check(s["step"] == 12 and len(s["w"]) == 20, "pickle round trip")


def save_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_case(d):
    for step in range(4):
        data = bytes((step * 11 + i) % 251 for i in range(300000 + step))
        save_atomic(f"{d}/ckpt", data)
        with open(f"{d}/ckpt", "rb") as f:
            check(f.read() == data, f"ckpt after rename {step}")
        check(not os.path.exists(f"{d}/ckpt.tmp"), "no temporary after the rename")
    os.makedirs(f"{d}/rot", exist_ok=True)
    for step in range(5):
        save_atomic(f"{d}/rot/step-{step:03d}", bytes([step]) * (1000 + step))
        kept = sorted(os.listdir(f"{d}/rot"))
        if len(kept) > 2:
            os.unlink(f"{d}/rot/{kept[0]}")
    check(sorted(os.listdir(f"{d}/rot")) == ["step-003", "step-004"], f"rotation kept {os.listdir(d + '/rot')}")


def dup2_case(d):
    sys.stdout.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    fd = os.open(f"{d}/out.txt", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.write(1, b"line one via fd 1\n")
    os.write(2, b"line two via fd 2\n")
    print("line three via print", flush=True)
    os.dup2(saved_out, 1)
    os.dup2(saved_err, 2)
    os.close(saved_out)
    os.close(saved_err)
    with open(f"{d}/out.txt") as f:
        got = f.read()
    check(got == "line one via fd 1\nline two via fd 2\nline three via print\n", f"out.txt is {got!r}")
    print("stdout is back")


def subprocess_case(d):
    with open(f"{d}/child.txt", "w") as f:
        f.write("parent before\n")
        f.flush()
        subprocess.run(["/bin/echo", "child line"], stdout=f, check=True)
        subprocess.run(["/bin/sh", "-c", "echo from sh; printf 'printf %s\\n' 42"], stdout=f, check=True)
        f.write("parent after\n")
    with open(f"{d}/child.txt") as f:
        got = f.read()
    check(got == "parent before\nchild line\nfrom sh\nprintf 42\nparent after\n", f"child.txt is {got!r}")
    print("parent stdout still works")


def dirs_case(d):
    os.makedirs(f"{d}/a/b/c", exist_ok=True)
    os.makedirs(f"{d}/a/x", exist_ok=True)
    for p in ("a/top.txt", "a/b/mid.txt", "a/b/c/deep.txt", "a/x/gone.txt"):
        with open(f"{d}/{p}", "w") as f:
            f.write(p * 3)
    os.remove(f"{d}/a/x/gone.txt")
    os.rmdir(f"{d}/a/x")
    check(sorted(os.listdir(f"{d}/a")) == ["b", "top.txt"], f"listing {sorted(os.listdir(d + '/a'))}")
    os.makedirs(f"{d}/scratch/one/two")
    for i in range(20):
        with open(f"{d}/scratch/one/two/f{i}", "wb") as f:
            f.write(bytes([i]) * 5000)
        with open(f"{d}/scratch/g{i}", "w") as f:
            f.write("g")
    shutil.rmtree(f"{d}/scratch")
    check(not os.path.exists(f"{d}/scratch"), "scratch removed by shutil.rmtree")


def h5py_case(d):
    import h5py
    import numpy as np
    with h5py.File(f"{d}/serial.h5", "w", libver="earliest") as f:
        f.create_dataset("x", data=np.arange(10000, dtype=np.int32))
        f.attrs["note"] = "serial"
    with h5py.File(f"{d}/serial.h5", "a") as f:
        f.create_dataset("y", data=np.linspace(0, 1, 5000))
        f["x"][10:20] = -5
    with h5py.File(f"{d}/serial.h5", "r") as f:
        check(int(f["x"][15]) == -5 and f["y"].shape == (5000,), "h5py read back")


LOCK_CHILD = r"""
import fcntl, sys
kind, path = sys.argv[1], sys.argv[2]
if kind == "h5py":
    import h5py
    try:
        h5py.File(path, "r").close()
        print("h5py: opened while another process writes it")
    except OSError:
        print("h5py: locked")
else:
    with open(path, "r+b") as f:
        try:
            (fcntl.flock if kind == "flock" else fcntl.lockf)(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            print(kind + ": acquired although held")
        except OSError:
            print(kind + ": busy")
"""


def locks_case(d):
    import fcntl
    import h5py
    child = lambda kind, path: subprocess.run([sys.executable, "-c", LOCK_CHILD, kind, path], check=True,
                                              capture_output=True, text=True).stdout.strip()
    with h5py.File(f"{d}/held.h5", "w") as f:
        f["x"] = [1, 2, 3]
        f.flush()
        print(child("h5py", f"{d}/held.h5"))
    print(child("h5py", f"{d}/held.h5").replace("locked", "still locked"))
    for kind, lock in (("flock", fcntl.flock), ("lockf", fcntl.lockf)):
        with open(f"{d}/{kind}.dat", "wb") as f:
            f.write(b"data")
            f.flush()
            lock(f.fileno(), fcntl.LOCK_EX)
            print(child(kind, f"{d}/{kind}.dat"))
            lock(f.fileno(), fcntl.LOCK_UN)
            print(child(kind, f"{d}/{kind}.dat").replace("busy", "busy after unlock"))


def sqlite_case(d):
    import sqlite3
    for mode in ("delete", "truncate"):
        con = sqlite3.connect(f"{d}/{mode}.db")
        con.execute(f"pragma journal_mode={mode}")
        con.execute("create table t (k integer primary key, v text)")
        for i in range(40):
            with con:
                con.executemany("insert into t (v) values (?)", [(f"row {i} {j} " * 4,) for j in range(25)])
        with con:
            con.execute("delete from t where k % 3 = 0")
        con.execute("vacuum")
        con.close()
        con = sqlite3.connect(f"{d}/{mode}.db")
        print(mode, con.execute("select count(*), sum(length(v)) from t").fetchone(),
              con.execute("pragma integrity_check").fetchone())
        con.close()


KEPT = []  # a worker's open files: never closed, as by a long-lived logger


def pool_task(d, k):
    import logging
    f = open(f"{d}/w{k}.txt", "w")
    f.write(f"worker task {k}\n" * (k + 1))
    f.flush()
    KEPT.append(f)
    log = logging.getLogger(f"task{k}")
    log.addHandler(logging.FileHandler(f"{d}/pool.log", mode="a"))
    log.setLevel(logging.INFO)
    for i in range(100):
        log.info("task %d record %d", k, i)
    return k


WAITER = """import sys
f = open(sys.argv[1], 'w'); f.write(sys.argv[2] * 1000); f.flush()
open(sys.argv[1] + '.ready', 'w').close()
sys.stdin.read()
"""


def terminated_case(d):
    import multiprocessing
    import signal
    import time
    with multiprocessing.Pool(4) as pool:
        print("pool", sorted(pool.starmap(pool_task, [(d, k) for k in range(8)], chunksize=1)))
    lines = open(f"{d}/pool.log").read().splitlines()
    open(f"{d}/pool.sorted", "w").write("".join(sorted(l + "\n" for l in lines)))
    os.remove(f"{d}/pool.log")
    for name, sig in (("term", signal.SIGTERM), ("hup", signal.SIGHUP)):
        p = subprocess.Popen([sys.executable, "-c", WAITER, f"{d}/{name}.txt", name[0]], stdin=subprocess.PIPE)
        for _ in range(3000):
            if os.path.exists(f"{d}/{name}.txt.ready"):
                break
            time.sleep(0.01)
        p.send_signal(sig)
        print(name, "exit", p.wait())
        p.stdin.close()


CASES = {"numpy": numpy_case, "atomic": atomic_case, "dup2": dup2_case,
         "subprocess": subprocess_case, "dirs": dirs_case, "h5py": h5py_case,
         "locks": locks_case, "terminated": terminated_case, "sqlite": sqlite_case}

if __name__ == "__main__":
    check(len(sys.argv) == 3 and sys.argv[1] in CASES, f"usage: pyprogs.py {{{','.join(CASES)}}} DIR")
    CASES[sys.argv[1]](sys.argv[2])
