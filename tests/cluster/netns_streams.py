"""The streams case of tests/cluster/netns.py (issue 17, "bytes between
nodes counted"): a server job whose servers are separate network hosts
(one namespace each, see netns.py) drains one stream of 4 partitions that
producers on every node append to, to a directory remote. Each partition
is appended by its owner server (p mod N), so an event crosses the network
once when its producer's node is not its partition's owner, and never
otherwise. What is checked:

- every flushed event exactly once in `paralog stream cat`, per producer
  sequence strictly increasing, offsets contiguous;
- the event bytes the servers say they sent each other equal the frames
  of the events off their owner's node (computed from `cat`);
- the nodes' eth0 received at least that and at most 1.10 x that + 4 MiB
  (the rounds' agreements and MPI's own traffic): each event crosses once,
  and the count is not the servers' word alone but the interfaces'.
"""
import re
import time

from tests.cluster.netns_s3 import crossed_once
from tests.lib.check import check
from tests.lib.server import ask
from tests.lib.streams import STREAM, cat_json, check_events, frame_len, produce, producer_report

PARTS = 4


def stored(c, total, timeout=180):
    """Node n0's server once the job stored `total` events (its status)."""
    deadline = time.time() + timeout
    while True:
        st = ask(c.node_dir(0) / ".paralog-server-t.sock", {"cmd": "status"}, timeout=60)
        cl = (st or {}).get("cluster") or {}
        if cl.get("stream_events", 0) >= total:
            return cl
        check(time.time() < deadline, f"the server job stored {cl.get('stream_events')} of {total} events "
                                      f"in {timeout} s: {c.tail()}")
        time.sleep(0.2)


def streams_case(flavour, nodes, per_node, events, payload):
    # Imported here: netns.py imports this module for its list of cases.
    from tests.cluster.netns import Net, NetCluster

    def case(work):
        with Net(nodes, work) as net:
            remote = work / "remote"
            remote.mkdir()
            c = NetCluster(net, work, flavour, str(remote), 1)
            before = net.counters()
            try:
                c.start_servers()
                procs = []
                for k in range(nodes):
                    c.node_dir(k).mkdir(mode=0o700, parents=True, exist_ok=True)
                    procs += [(k, produce(c.node_dir(k), events, flush_every=1000, payload_size=payload,
                                          parts=PARTS)) for _ in range(per_node)]
                flushed, node = {}, {}
                for k, p in procs:
                    pid, f, rc = producer_report(p)
                    check(rc == 0, f"producer on n{k} exited {rc}")
                    flushed[pid], node[pid] = f, k
                total = sum(flushed.values())
                cl = stored(c, total)
                c.wait_said()
                after = net.counters()
            finally:
                c.stop()
            got = cat_json(f"{remote}/{STREAM}", "--from", "earliest")
            check_events(got, flushed)
            check(len(got) == total, f"{len(got)} events read, {total} flushed")
            crossing = sum(frame_len(e) for e in got if e["partition"] % nodes != node[e["producer"]])
            between = cl["stream_bytes_between_nodes"]
            check(between == crossing and crossing > 0,
                  f"the servers sent each other {between} event bytes; {crossing} were off their owner's node")
            said = [x for x in c.tail(20000).splitlines() if "paralog server: streams:" in x]
            m = re.search(r"(\d+) bytes of events between nodes", said[-1] if said else "")
            check(m and int(m.group(1)) == crossing, f"the servers' last line: {said[-1:]}")
            rx = crossed_once(before, after, crossing)
            return (f"{total} events from {len(flushed)} producers on {nodes} nodes, all once; "
                    f"{crossing} event bytes between nodes, the nodes' eth0 received {rx}")
    return case
