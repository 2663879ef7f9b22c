"""The S3 case of tests/cluster/netns.py: a file of several S3 parts
uploaded by the server job to a MinIO in the hub namespace (see netns.py's
docstring), and the check shared with the streams case that each byte
crossed the network once."""
import re
import subprocess

from tests.lib.check import check
from tests.lib.compare import same_files
from tests.lib.minio import MinIO
from tests.lib.mpi import reference
from tests.lib.paths import PY


class HubMinIO(MinIO):
    """The tests' MinIO, but in the hub namespace on the bridge's address,
    where every node reaches it over its eth0 (as nodes reach a storage
    service over the network); awscli runs in the hub too."""

    def __init__(self, base, net):
        super().__init__(base, port=9000)
        self.net = net

    @property
    def host(self):
        return self.net.hub_ip

    def wrap(self, cmd):
        return ["ip", "netns", "exec", self.net.hub, *map(str, cmd)]

    def console_port(self):
        return self.port + 1

    def live(self):
        probe = (f"import urllib.request,sys\ntry:\n urllib.request.urlopen('{self.url}/minio/health/live',"
                 f"timeout=2)\nexcept Exception:\n sys.exit(1)\n")
        return subprocess.run(self.wrap([PY, "-c", probe])).returncode == 0


def crossed_once(before, after, between):
    """What the nodes' eth0 received from `before` to `after` (counters),
    checked to be at least the `between` bytes the servers say they sent
    each other and at most 1.10x that + 4 MiB (the rounds' agreements and
    MPI's own traffic): each byte crossed once. Returns it."""
    rx = sum(a[0] - b[0] for a, b in zip(after, before))
    most = int(1.10 * between) + (4 << 20)
    check(between <= rx <= most,
          f"the nodes' eth0 received {rx} bytes; the servers sent each other {between} (limit {most})")
    return rx


def s3_parts_case(flavour, nodes, rpn, prog, args):
    """A file of several S3 parts (5 MiB) whose every part holds bytes of
    every node: each part is gathered at its owner over the network, each
    byte once, and uploaded from there to a MinIO in the hub."""
    from tests.cluster.netns import Net, NetCluster

    def case(work):
        with Net(nodes, work) as net:
            ref = work / "direct"
            reference(flavour, prog, args, ref, nodes * rpn)
            minio = HubMinIO(work, net)
            minio.start()
            try:
                minio.mb("parts")
                url = "s3://parts/out?part_size=5M"
                c = NetCluster(net, work, flavour, url, rpn, minio.env())
                try:
                    c.run_app(prog, args)
                    before = net.counters()
                    c.start_servers()
                    said = c.wait_said()
                    after = net.counters()
                finally:
                    c.stop()
                got = work / "got"
                minio.download_all("parts", "out", got)
            finally:
                minio.stop()
            same_files(ref, got)
            m = re.search(r"(\d+) bytes, (\d+) bytes between nodes, parts uploaded by node ([\d/]+)", said)
            check(m, f"paralog wait did not report a shared upload: {said}")
            drained, between = int(m.group(1)), int(m.group(2))
            parts = [int(n) for n in m.group(3).split("/")]
            check(sum(1 for n in parts if n) >= 2, f"parts by node {parts}: not spread")
            check(between > 0.3 * drained, f"the test is too weak: {between} of {drained} bytes between nodes")
            # What the nodes received: the bytes sent between them, MinIO's
            # answers and the servers' summaries.
            rx = crossed_once(before, after, between)
            return (f"{drained} bytes equal direct MPI-IO; parts by node {parts}; {between} bytes between "
                    f"nodes, the nodes' eth0 received {rx}")
    return case
