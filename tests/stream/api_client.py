"""A client of tests/stream/api.py using `paralog.stream` as a user would
(found by PYTHONPATH=crates/stream-c/python, docs/streams.md).

  produce LOCAL STREAM PARTS EVENTS FLUSH_EVERY [--mpi] [--key] [--time NS]
      prints "producer ID", then "flushed N" after each flush returned
      (--mpi: with mpi4py's COMM_WORLD, a collective open and flush;
      --time: event i at NS + i ms)
  read REMOTE STREAM GROUP COUNT TIMEOUT [--ack-every N] [--from NS|earliest]
         [--order cut|time|watermark] [--idle SECONDS]
      reads as GROUP ("-": none) from its committed offsets (or from the
      time NS) until COUNT events or
      TIMEOUT seconds without one; each event one JSON line; acknowledges
      every event and commits every N (and at the end)
  groupread REMOTE STREAM GROUP SPREAD OUT
      the ranks of mpi4py's COMM_WORLD read as one group (GroupReader:
      SPREAD round-robin|key), each writing its events as JSON lines to
      OUT.<rank> and acknowledging every one; the group leaves (commits)
  error CALL...  (join, reopen, toolarge, quota, idle, ack)
      a call that must fail: prints "code C: MESSAGE"
"""
import json
import sys

import paralog.stream as ps


def produce(local, stream, parts, events, every, *flags):
    comm = None
    if "--mpi" in flags:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    with ps.Producer(stream, int(parts), local=local, comm=comm) as p:
        # One write per line: the ranks' outputs are merged by mpirun.
        sys.stdout.write(f"producer {p.id}\n")
        sys.stdout.flush()
        events, every = int(events), int(every)
        for i in range(events):
            key = f"k{i % 5}".encode() if "--key" in flags else None
            t = int(flags[flags.index("--time") + 1]) + i * 1_000_000 if "--time" in flags else None
            _, seq = p.append(f"{p.id}:{i}:py".encode(), key=key, partition=ps.BY_KEY if key else ps.ROUND_ROBIN,
                              time_ns=t)
            assert seq == i, (seq, i)
            if (i + 1) % every == 0 or i + 1 == events:
                p.flush()
                sys.stdout.write(f"flushed {i + 1}\n")
                sys.stdout.flush()


def read(remote, stream, group, count, timeout, *flags):
    every = int(flags[flags.index("--ack-every") + 1]) if "--ack-every" in flags else 1000
    start = flags[flags.index("--from") + 1] if "--from" in flags else "committed"
    start = int(start) if start.isdigit() else start
    order = flags[flags.index("--order") + 1] if "--order" in flags else "cut"
    idle = float(flags[flags.index("--idle") + 1]) if "--idle" in flags else None
    count, n = int(count), 0
    with ps.Reader(remote, stream, group=None if group == "-" else group, start=start, order=order, idle=idle) as r:
        while n < count:
            ev = r.next(timeout=float(timeout))
            if ev is None:
                break
            print(json.dumps({"partition": ev.partition, "offset": ev.offset, "producer": ev.producer, "seq": ev.seq,
                              "time_ns": ev.time_ns, "key": ev.key and ev.key.decode(),
                              "payload": ev.payload.decode()}))
            r.ack(ev)
            n += 1
            if n % every == 0 and group != "-":
                r.commit()
    sys.stdout.flush()


def groupread(remote, stream, group, spread, out):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    with open(f"{out}.{comm.rank}", "w") as f, ps.GroupReader(remote, stream, group, comm, spread=spread) as r:
        for ev in r:
            f.write(json.dumps({"partition": ev.partition, "offset": ev.offset, "producer": ev.producer,
                                "seq": ev.seq, "key": ev.key and ev.key.decode(),
                                "payload": ev.payload.decode()}) + "\n")
            r.ack(ev)


def error(call, *args):
    try:
        if call == "join":
            ps.Reader(args[0], args[1])
        elif call == "reopen":
            ps.Producer(args[1], int(args[2]), local=args[0])
        elif call == "toolarge":
            with ps.Producer(args[1], 1, local=args[0]) as p:
                p.append(b"x" * (ps.MAX_EVENT + 1))
        elif call == "quota":
            with ps.Producer(args[1], 1, local=args[0], quota=100_000, quota_wait=0.3) as p:
                while True:
                    p.append(b"x" * 1000)
                    p.flush()
        elif call == "idle":  # an idle timeout for a reader in cut order
            ps.Reader(args[0], args[1], start="earliest", idle=0.5)
        elif call == "ack":
            with ps.Reader(args[0], args[1]) as r:
                r.ack(ps.Event(0, 10**9, 0, "", 0, 0, None, b""))
    except ps.StreamError as e:
        print(f"code {e.code}: {e}")
        return
    print("no error")


if __name__ == "__main__":
    {"produce": produce, "read": read, "groupread": groupread, "error": error}[sys.argv[1]](*sys.argv[2:])
