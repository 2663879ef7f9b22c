#!/usr/bin/python3
"""The shared event streams' benchmark against Apache Kafka (issue 17;
results and their reading: docs/benchmarks.md section 12).

For each (producers N, partitions P) and round, side by side, the order of
the methods rotated from round to round:

  paralog        N producers (bench/streams/loadgen.c over
                 libparalog_stream) appending SIZE-byte events round-robin
                 to P partitions under a node-local root on --tmp, one
                 flush (one fdatasync) every FLUSH_MS ms, while
                 `paralog stream drain --follow --interval-ms 100` moves
                 them to a remote directory under --remote-dir (/dev/shm:
                 not the producers' disk, as a PFS) and one reader of one
                 group (loadgen read) reads them: per event its receive
                 time minus its event time (the append time)
                 (and, the drain stopped, a second group reading the
                 whole stream again from the start: the read rate per
                 partition count)
  paralog-nodrain  the same producers with no drain and no reader running:
                 what the drain and the reader cost the producers here (on
                 a 2-core machine they share the CPUs)
  paralog-paced  the same with each producer paced to --paced-rate events/s
                 (1000: 1 MB/s): the latency when the drain is not behind
  raw            N producers writing the same events to one file each on
                 --tmp: buffered, one write() + fdatasync every FLUSH_MS ms
  kafka          one KRaft broker (combined mode) on 127.0.0.1, log dirs on
                 --tmp, a topic of P partitions; N concurrent
                 org.apache.kafka.tools.ProducerPerformance (one JVM each,
                 --record-size SIZE, --throughput -1, the producer's
                 defaults: acks=all, linger.ms=5, batch.size=16 KiB) and
                 one ConsumerPerformance (one group) meanwhile; Kafka's
                 defaults (no fsync: the page cache)
  kafka-fsync    the same on a topic with flush.messages=1 (an fsync per
                 append to the log)
  sshfs-shared   (root; --no-sshfs: not run) N producers appending their batches to ONE
                 shared file (O_APPEND, one write + fdatasync every FLUSH_MS
                 ms) on the sshfs mount of the end-to-end harness
                 (bench/e2e/testbed.py, --rate-mbit Mbit/s tbf)

--pin: the producers (paralog's, paralog-nodrain's and -paced's, raw's,
the shared file's, Kafka's ProducerPerformance JVMs) run on CPU 0 and
everything that serves or reads them (the drain, the reader groups, the
Kafka broker and its ConsumerPerformance) on CPU 1 (taskset), so that the
producers' cost against raw is seen apart from the drain's CPU (the
disk stays shared).

Throughput: the sum over producers of events / that producer's own time
(ProducerPerformance's records/sec for Kafka, which excludes JVM start-up).
Memory: the max RSS (VmHWM) of the drain and of the broker. The machine is
expected to be shared: read the ratios of one run, not absolute numbers.

Needs: target/release (paralog, libparalog_stream.so), target/kafka/lib
(scripts/setup-bench.sh fetches the jars), cc, java 17.

Usage: bench/streams/run.py [--quick] [--producers 1,2,4,8]
         [--partitions 1,4,16,64] [--rounds 2] [--seconds 4] [--size 1024]
         [--flush-ms 10]
         [--methods paralog,paralog-nodrain,paralog-paced,raw,kafka,kafka-fsync]
         [--paced-rate 1000]
         [--remote-dir /dev/shm]
         [--no-sshfs] [--rate-mbit 200] [--tmp /var/tmp] [--pin]
         [--json target/bench/streams.json] [--keep]
"""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KAFKA_LIB = ROOT / "target/kafka/lib"
ALL_METHODS = ["paralog", "paralog-nodrain", "paralog-paced", "raw", "kafka", "kafka-fsync", "sshfs-shared"]


# --pin: where the producers run, and where what serves or reads them runs.
PRODUCER_CPU, SERVICE_CPU = 0, 1
PIN = {"on": False}


def log(*a):
    print(*a, flush=True)


def pinned(cmd, cpu):
    """cmd on one CPU (taskset) when --pin is on, else as it is."""
    return (["taskset", "-c", str(cpu)] + list(cmd)) if PIN["on"] else list(cmd)


def producer(cmd):
    return pinned(cmd, PRODUCER_CPU)


def service(cmd):
    return pinned(cmd, SERVICE_CPU)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_hwm_kb(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def stop(p, timeout=20):
    if p is None or p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def loadgens(cmds, what):
    """Run the load generators at once; each one's JSON report."""
    prods = [subprocess.Popen(nice_cmd(producer(c)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in cmds]
    res = []
    for pr in prods:
        out, err = pr.communicate()
        if pr.returncode != 0:
            sys.exit(f"loadgen {what} failed: {err}")
        res.append(json.loads(out))
    return res


def nice_cmd(cmd):
    return [str(c) for c in cmd]


class Tools:
    """Copies of the binaries (a rebuild during a run changes nothing) and
    the load generator built against the copy."""

    def __init__(self, base):
        self.dir = base / "bin"
        self.dir.mkdir()
        rel = ROOT / "target/release"
        self.paralog = self.dir / "paralog"
        shutil.copy2(rel / "paralog", self.paralog)
        shutil.copy2(rel / "libparalog_stream.so", self.dir / "libparalog_stream.so")
        self.loadgen = self.dir / "loadgen"
        subprocess.run(["cc", "-O2", "-Wall", "-o", self.loadgen, HERE / "loadgen.c",
                        "-I", ROOT / "crates/stream-c/include", "-L", self.dir, "-lparalog_stream",
                        f"-Wl,-rpath,{self.dir}"], check=True)
        self.rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                  capture_output=True, text=True).stdout.strip()


class Kafka:
    """One KRaft broker+controller on loopback, storage under base."""

    def __init__(self, base):
        self.base = base / "kafka"
        self.base.mkdir()
        self.cp = f"{KAFKA_LIB}/*"
        self.port, self.cport = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc = None
        self.props = self.base / "server.properties"
        self.props.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.cport}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.cport}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={self.base / 'logs'}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            "",
        ]))

    def java(self, main, *args, heap="256m"):
        return ["nice", "java", f"-Xmx{heap}", "-XX:+UseSerialGC", "-Xshare:auto",
                "-cp", self.cp, main, *map(str, args)]

    def start(self):
        cid = subprocess.run(self.java("kafka.tools.StorageTool", "random-uuid"), check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()[-1]
        subprocess.run(self.java("kafka.tools.StorageTool", "format", "-t", cid, "-c", self.props),
                       check=True, capture_output=True, text=True)
        self.log = open(self.base / "broker.log", "wb")
        cmd = service(["nice", "java", "-Xmx1g", "-Xms1g", "-cp", self.cp,
                       f"-Dlog4j2.configurationFile={self.base / 'log4j2.yaml'}", "kafka.Kafka", self.props])
        (self.base / "log4j2.yaml").write_text(
            "Configuration:\n  Appenders:\n    Console:\n      name: STDOUT\n"
            "      PatternLayout:\n        Pattern: \"[%d] %p %m (%c)%n\"\n"
            "  Loggers:\n    Root:\n      level: WARN\n      AppenderRef:\n        - ref: STDOUT\n")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("kafka broker exited: " +
                                   (self.base / "broker.log").read_text(errors="replace")[-2000:])
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("kafka broker did not listen within 120 s")

    def create_topic(self, name, partitions, fsync):
        cmd = self.java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", self.bootstrap,
                        "--create", "--topic", name, "--partitions", partitions,
                        "--replication-factor", 1)
        if fsync:
            cmd += ["--config", "flush.messages=1"]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)

    def delete_topic(self, name):
        subprocess.run(self.java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                                 self.bootstrap, "--delete", "--topic", name),
                       capture_output=True, text=True, timeout=300)

    def close(self):
        stop(self.proc)


# ProducerPerformance's last line:
# "N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency, ..."
PP_RE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), "
                   r"([\d.]+) ms avg latency, ([\d.]+) ms max latency")


def run_kafka(a, kafka, n, p, fsync, tag, guess):
    topic = f"t{tag}"
    kafka.create_topic(topic, p, fsync)
    # Sized from the last run's rate so that a run takes about --seconds,
    # and at least 5,000 records a producer (1,000 with an fsync per
    # append): the JIT's warm-up counts in.
    records = max(1000 if fsync else 5000, int(guess * a.seconds / n))
    prods = []
    for i in range(n):
        prods.append(subprocess.Popen(
            producer(kafka.java("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                                "--num-records", records, "--record-size", a.size, "--throughput", -1,
                                "--producer-props", f"bootstrap.servers={kafka.bootstrap}")),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True))
    cons = subprocess.Popen(
        service(kafka.java("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
                           kafka.bootstrap, "--topic", topic, "--messages", records * n, "--group",
                           f"g{tag}", "--timeout", 30000)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    rates, lat, outs = [], [], []
    for pr in prods:
        out, _ = pr.communicate(timeout=1800)
        outs.append(out)
        m = None
        for m in PP_RE.finditer(out):
            pass
        if pr.returncode != 0 or m is None:
            stop(cons)
            raise RuntimeError(f"ProducerPerformance failed ({pr.returncode}):\n{out[-2000:]}")
        rates.append(float(m.group(2)))
        lat.append(float(m.group(4)))
    try:
        cout, _ = cons.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        stop(cons)
        cout = ""
    consumed = None
    for line in cout.splitlines():
        f = line.split(",")
        # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, ...
        if len(f) >= 6 and re.match(r"\s*\d{4}-", f[0]):
            consumed = int(f[4].strip())
    kafka.delete_topic(topic)
    ev = sum(rates)
    return {"events_s": ev, "mb_s": ev * a.size / 1e6, "records": records * n,
            "ack_lat_avg_ms": sum(lat) / len(lat), "consumed": consumed,
            "broker_rss_mb": (vm_hwm_kb(kafka.proc.pid) or 0) / 1024}


def run_paralog_nodrain(a, tools, work, n, p, tag):
    d = work / f"paralog{tag}"
    (d / "local").mkdir(parents=True)
    res = loadgens([["nice", tools.loadgen, "paralog", d / "local", "s", p, a.seconds, a.size, a.flush_ms]
                    for _ in range(n)], "paralog")
    ev = sum(r["events"] / r["seconds"] for r in res)
    shutil.rmtree(d, ignore_errors=True)
    return {"events_s": ev, "mb_s": ev * a.size / 1e6, "events": sum(r["events"] for r in res),
            "worst_flush_ms": max(r["worst_flush_ms"] for r in res)}


def run_paralog(a, tools, work, n, p, tag, rate=0):
    d = work / f"paralog{tag}"
    local = d / "local"
    local.mkdir(parents=True)
    remote = Path(tempfile.mkdtemp(prefix=f"remote{tag}-", dir=a.remote_base))
    count = d / "count"
    dlog = open(d / "drain.log", "wb")
    drain = subprocess.Popen(nice_cmd(service(["nice", tools.paralog, "stream", "drain", "--local", local,
                                               "--remote", remote, "--follow", "--interval-ms", 100])),
                             stdout=dlog, stderr=subprocess.STDOUT, start_new_session=True)
    reader = subprocess.Popen(nice_cmd(service(["nice", tools.loadgen, "read", remote, "s", "bench", count,
                                                a.seconds + 120])),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    prods = [subprocess.Popen(nice_cmd(producer(["nice", tools.loadgen, "paralog", local, "s", p, a.seconds,
                                                 a.size, a.flush_ms] + ([rate] if rate else []))),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    # Every process of every method runs under nice (the broker, the JVM
    # clients, the drain, the reader, the producers) on a shared machine.
    res = [json.loads(pr.communicate()[0]) if pr.wait() == 0 else
           sys.exit(f"loadgen paralog failed: {pr.stderr.read()}") for pr in prods]
    total = sum(r["events"] for r in res)
    count.write_text(str(total))
    t_done = time.time()
    rout, rerr = reader.communicate(timeout=a.seconds + 180)
    catch_up = time.time() - t_done
    rss = vm_hwm_kb(drain.pid)
    stop(drain)
    if reader.returncode != 0:
        sys.exit(f"loadgen read failed: {rerr}")
    rd = json.loads(rout)
    if not rate:
        # The drained stream read again from the start by a new group (the
        # drain stopped): the reader's own rate, to compare partitions.
        # Its CPU time too: steadier than its wall time on a shared machine.
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        rr = subprocess.run(nice_cmd(service(["nice", tools.loadgen, "read", remote, "s", "reread", count,
                                              120])), capture_output=True, text=True)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        reread_cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        if rr.returncode != 0:
            sys.exit(f"loadgen read (again) failed: {rr.stderr}")
        again = json.loads(rr.stdout)
        if again["events"] != total:
            sys.exit(f"read again: {again['events']} of {total} events")
        reread = again["events"] / max(again["first_to_last_s"], 1e-6)
    ev = sum(r["events"] / r["seconds"] for r in res)
    out = {"events_s": ev, "mb_s": ev * a.size / 1e6, "events": total,
           "worst_flush_ms": max(r["worst_flush_ms"] for r in res),
           "read_events": rd["events"], "lat_p50_ms": rd["lat_p50_ms"],
           "lat_p99_ms": rd["lat_p99_ms"], "lat_max_ms": rd["lat_max_ms"],
           "reader_catch_up_s": catch_up,
           "drain_rss_mb": (rss or 0) / 1024}
    if not rate:
        out["reread_events_s"] = reread
        out["reread_cpu_ns_per_event"] = reread_cpu * 1e9 / max(total, 1)
    if rd["events"] != total:
        out["error"] = f"the reader got {rd['events']} of {total} events"
    if not a.keep:
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(remote, ignore_errors=True)
    return out


def run_files(a, tools, paths, tag):
    res = loadgens([["nice", tools.loadgen, "file", path, a.seconds, a.size, a.flush_ms] for path in paths],
                   "file")
    ev = sum(r["events"] / r["seconds"] for r in res)
    total = sum(r["events"] for r in res)
    size = sum(os.path.getsize(p) for p in set(paths))
    out = {"events_s": ev, "mb_s": ev * a.size / 1e6, "events": total,
           "worst_flush_ms": max(r["worst_flush_ms"] for r in res)}
    if size != total * a.size:
        out["error"] = f"{size} bytes in the file(s), {total * a.size} appended"
    for p in set(paths):
        os.unlink(p)
    return out


def on_term(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main():
    # SIGTERM (and SIGINT, which a background job of a script ignores) tear
    # the broker and the testbed down through the finally below.
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="producers 1,4,8; partitions 1,64; one round of 3 s")
    ap.add_argument("--producers", default="1,2,4,8")
    ap.add_argument("--partitions", default="1,4,16,64")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--flush-ms", type=float, default=10.0)
    ap.add_argument("--methods", default="paralog,paralog-nodrain,paralog-paced,raw,kafka,kafka-fsync")
    ap.add_argument("--paced-rate", type=float, default=1000.0,
                    help="paralog-paced: events/s per producer (latency below saturation)")
    ap.add_argument("--sshfs", action=argparse.BooleanOptionalAction, default=os.geteuid() == 0,
                    help="add sshfs-shared (root: namespaces, tc, sshd, sshfs; default: on as root)")
    ap.add_argument("--rate-mbit", type=float, default=200.0)
    ap.add_argument("--tmp", default="/var/tmp")
    ap.add_argument("--remote-dir", default="/dev/shm",
                    help="where the drain's remote directories go (default: tmpfs, a device other "
                         "than the producers' disk, as a PFS would be)")
    ap.add_argument("--json", default=str(ROOT / "target/bench/streams.json"))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--pin", action="store_true",
                    help=f"producers (paralog's, raw's, the shared file's, Kafka's) on CPU {PRODUCER_CPU}; "
                         f"the drain, the readers, Kafka's broker and consumer on CPU {SERVICE_CPU} (taskset): "
                         "the producers' cost against raw apart from the drain's CPU")
    ap.add_argument("--report", metavar="JSON",
                    help="print the tables of an earlier run's JSON and stop")
    a = ap.parse_args()
    if a.report:
        d = json.loads(Path(a.report).read_text())
        old = argparse.Namespace(**d["args"])
        old.json = a.report
        rs = d["results"]
        order = lambda key: list(dict.fromkeys(sorted(r[key] for r in rs)))
        methods = [m for m in ALL_METHODS if any(r["method"] == m for r in rs)]
        report(old, methods, order("producers"), order("partitions"), rs, d["rev"], d["elapsed_s"],
               write=False)
        return
    if a.quick:
        a.producers, a.partitions, a.rounds, a.seconds = "1,4,8", "1,64", 1, 3.0
    if a.pin:
        if not {PRODUCER_CPU, SERVICE_CPU} <= os.sched_getaffinity(0) or not shutil.which("taskset"):
            sys.exit(f"--pin needs CPUs {PRODUCER_CPU} and {SERVICE_CPU} and taskset (util-linux)")
        PIN["on"] = True
    producers = [int(x) for x in a.producers.split(",")]
    partitions = [int(x) for x in a.partitions.split(",")]
    methods = [m for m in a.methods.split(",") if m]
    if a.sshfs and "sshfs-shared" not in methods:
        methods.append("sshfs-shared")
    for m in methods:
        if m not in ALL_METHODS:
            sys.exit(f"unknown method {m}")
    if any(m.startswith("kafka") for m in methods) and not any(KAFKA_LIB.glob("kafka_2.13-*.jar")):
        sys.exit(f"no Kafka jars in {KAFKA_LIB}: run scripts/setup-bench.sh (make setup-bench)")

    base = Path(tempfile.mkdtemp(prefix="paralog-streams-", dir=a.tmp))
    a.remote_base = tempfile.mkdtemp(prefix="paralog-streams-", dir=a.remote_dir)
    tools = Tools(base)
    work = base / "work"
    work.mkdir()
    kafka = bed = None
    results = []
    t_start = time.time()
    try:
        if any(m.startswith("kafka") for m in methods):
            kafka = Kafka(base)
            kafka.start()
            log(f"kafka broker on {kafka.bootstrap} ({next(KAFKA_LIB.glob('kafka_2.13-*.jar')).name})")
        if "sshfs-shared" in methods:
            sys.path.insert(0, str(HERE.parent / "e2e"))
            from testbed import Testbed  # noqa: E402
            bed = Testbed(base / "bed", a.rate_mbit)
            bed.start(s3=False)
            log(f"sshfs {bed.mnt} over a {a.rate_mbit:g} Mbit/s tbf link")
        log(f"paralog {tools.rev}; {a.size}-byte events, flush every {a.flush_ms:g} ms, "
            f"{a.seconds:g} s per run, {a.rounds} round(s); methods {','.join(methods)}"
            + (f"; pinned: producers on CPU {PRODUCER_CPU}, drain, readers and broker on CPU {SERVICE_CPU}"
               if a.pin else ""))
        guess = {"kafka": 20000.0, "kafka-fsync": 2000.0}
        k = 0
        for rnd in range(a.rounds):
            for n in producers:
                for p in partitions:
                    order = methods[k % len(methods):] + methods[:k % len(methods)]
                    k += 1
                    for m in order:
                        tag = f"{rnd}-{n}-{p}-{m}"
                        if m == "paralog":
                            r = run_paralog(a, tools, work, n, p, tag)
                        elif m == "paralog-nodrain":
                            r = run_paralog_nodrain(a, tools, work, n, p, tag)
                        elif m == "paralog-paced":
                            r = run_paralog(a, tools, work, n, p, tag, a.paced_rate)
                        elif m == "raw":
                            r = run_files(a, tools, [work / f"raw{tag}-{i}" for i in range(n)], tag)
                        elif m == "sshfs-shared":
                            r = run_files(a, tools, [bed.mnt / f"shared{tag}"] * n, tag)
                        else:
                            r = run_kafka(a, kafka, n, p, m == "kafka-fsync",
                                          tag.replace(".", "_"), guess[m])
                            guess[m] = max(200.0, r["events_s"])
                        r.update(round=rnd, producers=n, partitions=p, method=m)
                        results.append(r)
                        extra = "".join(f" {key}={r[key]:.1f}" for key in
                                        ("lat_p50_ms", "lat_p99_ms", "drain_rss_mb",
                                         "broker_rss_mb", "ack_lat_avg_ms") if key in r)
                        log(f"round {rnd} N={n} P={p} {m:13s} {r['events_s']:10.0f} ev/s "
                            f"{r['mb_s']:8.1f} MB/s{extra}{'  ERROR ' + r['error'] if 'error' in r else ''}")
    finally:
        if kafka:
            kafka.close()
        if bed:
            for e in bed.close():
                log("teardown:", e)
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
            shutil.rmtree(a.remote_base, ignore_errors=True)
        else:
            log(f"kept {base}")
    report(a, methods, producers, partitions, results, tools.rev, time.time() - t_start)


def median(xs):
    xs = sorted(xs)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def report(a, methods, producers, partitions, results, rev, elapsed, write=True):
    if write:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"rev": rev, "args": vars(a), "elapsed_s": elapsed, "results": results}, f,
                      indent=1)
    for r in results:
        if "reader_catch_up_s" in r:
            # What the drain and the reader moved end to end: every event
            # over the producers' time plus the reader's catch-up after it.
            r["delivered_mb_s"] = r["events"] * a.size / 1e6 / (a.seconds + r["reader_catch_up_s"])
    log(f"\n{len(results)} runs in {elapsed:.0f} s; JSON: {a.json}"
        + (f"; pinned (producers on CPU {PRODUCER_CPU}, the rest on CPU {SERVICE_CPU})"
           if getattr(a, "pin", False) else ""))
    cell = {}
    for r in results:
        cell.setdefault((r["producers"], r["partitions"], r["method"]), []).append(r)

    def med(n, p, m, key="events_s"):
        return median([r[key] for r in cell.get((n, p, m), []) if key in r])

    log("\nAppend throughput, k events/s of %d bytes (MB/s), median of rounds:\n" % a.size)
    log("| producers | partitions | " + " | ".join(methods) + " |")
    log("|---:|---:|" + "---|" * len(methods))
    for n in producers:
        for p in partitions:
            cols = []
            for m in methods:
                v = med(n, p, m)
                cols.append("–" if v is None else f"{v / 1e3:.1f} ({v * a.size / 1e6:.0f})")
            log(f"| {n} | {p} | " + " | ".join(cols) + " |")
    targets = [("paralog", m, t) for m, t in
               [("kafka", 1.0), ("kafka-fsync", 5.0), ("raw", 0.8), ("sshfs-shared", 3.0)]]
    targets.append(("paralog-nodrain", "raw", 0.8))
    targets = [(x, m, t) for x, m, t in targets if x in methods and m in methods]
    if targets:
        log("\nThroughput ratios (per round, then the median; the issue's target in the header):\n")
        log("| producers | partitions | " + " | ".join(
            f"{'' if x == 'paralog' else x + ' '}vs {m} (≥ {t:g})" for x, m, t in targets) + " |")
        log("|---:|---:|" + "---|" * len(targets))
        for n in producers:
            for p in partitions:
                cols = []
                for x, m, t in targets:
                    rs = []
                    for rnd in range(a.rounds):
                        xs = [r for r in cell.get((n, p, x), []) if r["round"] == rnd]
                        ys = [r for r in cell.get((n, p, m), []) if r["round"] == rnd]
                        if xs and ys and ys[0]["events_s"] > 0:
                            rs.append(xs[0]["events_s"] / ys[0]["events_s"])
                    mr = median(rs)
                    cols.append("–" if mr is None else f"{mr:.2f}{'' if mr >= t else ' (missed)'}")
                log(f"| {n} | {p} | " + " | ".join(cols) + " |")
    for pm in ("paralog", "paralog-paced"):
        if pm not in methods:
            continue
        log(f"\n{pm}: append-to-delivery latency (reader receive time minus event time), "
            "drain max RSS, reader catch-up after the producers stopped, delivered MB/s "
            "(all events / (run + catch-up)) (median of rounds):\n")
        log("| producers | partitions | k events/s | p50 ms | p99 ms | max ms | drain RSS MB | catch-up s | delivered MB/s | all read |")
        log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for n in producers:
            for p in partitions:
                rs = cell.get((n, p, pm), [])
                if not rs:
                    continue
                ok = all("error" not in r for r in rs)
                log(f"| {n} | {p} | {med(n, p, pm) / 1e3:.1f} | {med(n, p, pm, 'lat_p50_ms'):.0f} | "
                    f"{med(n, p, pm, 'lat_p99_ms'):.0f} | {med(n, p, pm, 'lat_max_ms'):.0f} | "
                    f"{med(n, p, pm, 'drain_rss_mb'):.0f} | "
                    f"{med(n, p, pm, 'reader_catch_up_s'):.1f} | "
                    f"{med(n, p, pm, 'delivered_mb_s'):.0f} | {'yes' if ok else 'NO'} |")
    if "paralog" in methods and len(partitions) > 1 and any("reread_events_s" in r for r in results):
        p1 = partitions[0]
        log(f"\nReading the drained stream again from the start (a new group, the drain stopped): "
            f"k events/s, and the ratio to {p1} partition(s) (issue: 64 partitions >= 0.9x one):\n")
        log("| producers | " + " | ".join(f"P={p}" for p in partitions) + " | " +
            " | ".join(f"P={p} / P={p1}" for p in partitions[1:]) + " |")
        log("|---:|" + "---:|" * (2 * len(partitions) - 1))
        for n in producers:
            v = {p: med(n, p, "paralog", "reread_events_s") for p in partitions}
            if v[p1] is None:
                continue
            log(f"| {n} | " + " | ".join("–" if v[p] is None else f"{v[p] / 1e3:.0f}" for p in partitions)
                + " | " + " | ".join("–" if v[p] is None else f"{v[p] / v[p1]:.2f}" for p in partitions[1:])
                + " |")
        if any("reread_cpu_ns_per_event" in r for r in results):
            log(f"\nThe same reads' CPU time (user + system of the reading process), ns per event:\n")
            log("| producers | " + " | ".join(f"P={p}" for p in partitions) + " |")
            log("|---:|" + "---:|" * len(partitions))
            for n in producers:
                c = {p: med(n, p, "paralog", "reread_cpu_ns_per_event") for p in partitions}
                log(f"| {n} | " + " | ".join("–" if c[p] is None else f"{c[p]:.0f}" for p in partitions) + " |")
    if any(m.startswith("kafka") for m in methods):
        rss = max((r.get("broker_rss_mb", 0) for r in results), default=0)
        log(f"\nKafka broker max RSS: {rss:.0f} MB (heap -Xmx1g)")
    bad = [r for r in results if "error" in r]
    for r in bad:
        log(f"ERROR round {r['round']} N={r['producers']} P={r['partitions']} {r['method']}: {r['error']}")
    if bad and write:
        sys.exit(1)


if __name__ == "__main__":
    main()
