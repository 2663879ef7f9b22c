#!/usr/bin/python3
"""An HTTP/1.1 fault-injecting proxy for the S3 tests (asyncio, standard
library only). It listens on loopback and forwards every request to one
upstream (MinIO), and on a share of the requests injects a fault instead:

  http500       the request is read whole and answered "500 InternalError"
                (an S3 error document); the upstream never sees it
  http503       the same with "503 SlowDown"
  delay         the request waits 0.3 to 2 s before it is forwarded
  reset         the connection is reset (RST) after the request head and
                part of its body: the upstream never sees it
  reset_after   the request is forwarded and the upstream's whole answer
                read, then the client's connection is reset: the operation
                happened but the client does not know (a lost answer)

It understands HTTP/1.1 framing enough to pick requests apart on a
keep-alive connection: request and response bodies by Content-Length or
chunked transfer coding, "Expect: 100-continue", responses without a body
(HEAD, 1xx, 204, 304) and bodies delimited by the end of the connection.
Each client connection gets its own upstream connection. The Host header
is forwarded unchanged (S3 signatures cover it).

Faults are drawn with probability --rate per request (seeded), and forced
when fewer than --min-rate of the requests so far have had one, so that a
run gets at least that share.

  faultproxy.py --upstream 127.0.0.1:9000 [--port 0] [--rate 0.12]
                [--min-rate 0.06] [--seed 1] [--kinds http500,http503,...]
                [--log FILE [--log-all]]

It prints "listening 127.0.0.1:PORT" once ready; on SIGTERM or SIGINT it
prints one JSON line of counters (requests, faults, per kind, per
operation) and exits.
"""

import argparse
import asyncio
import json
import random
import signal
import socket
import struct
import sys
import time
from collections import Counter
from urllib.parse import parse_qs, unquote, urlsplit

KINDS = ("http500", "http503", "delay", "reset", "reset_after")


class Stats:
    def __init__(self):
        self.requests = 0
        self.faults = 0
        self.kinds = Counter()
        self.ops = Counter()
        self.fault_ops = Counter()
        self.connections = 0
        self.errors = Counter()

    def json(self):
        return json.dumps({
            "requests": self.requests,
            "faults": self.faults,
            "kinds": dict(self.kinds),
            "ops": dict(self.ops),
            "fault_ops": dict(self.fault_ops),
            "connections": self.connections,
            "errors": dict(self.errors),
        }, sort_keys=True)


class Head:
    def __init__(self, raw):
        lines = raw.decode("latin-1").split("\r\n")
        self.raw = raw
        self.start = lines[0]
        self.headers = []
        for line in lines[1:]:
            if not line:
                continue
            k, _, v = line.partition(":")
            self.headers.append((k.strip(), v.strip()))

    def get(self, name, default=None):
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    def chunked(self):
        return "chunked" in (self.get("transfer-encoding") or "").lower()

    def length(self):
        v = self.get("content-length")
        return int(v) if v is not None else None

    def close(self):
        return "close" in (self.get("connection") or "").lower()


def s3_op(method, target, head):
    q = parse_qs(urlsplit(target).query, keep_blank_values=True)
    if method == "PUT" and "partNumber" in q:
        return "UploadPartCopy" if head.get("x-amz-copy-source") else "UploadPart"
    if method == "POST" and "uploads" in q:
        return "CreateMultipartUpload"
    if method == "POST" and "uploadId" in q:
        return "CompleteMultipartUpload"
    if method == "DELETE" and "uploadId" in q:
        return "AbortMultipartUpload"
    if method == "GET" and "uploads" in q:
        return "ListMultipartUploads"
    if method == "GET":
        return "GetObject(range)" if head.get("range") else "GetObject"
    return {"PUT": "PutObject", "HEAD": "HeadObject", "DELETE": "DeleteObject"}.get(method, method)


async def read_head(reader):
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise
    return Head(raw)


async def relay_body(reader, writer, head, until_eof=False):
    """Copy one message body (framed by `head`) from reader to writer
    (writer None: read and drop)."""

    async def put(b):
        if writer is not None and b:
            writer.write(b)
            await writer.drain()

    if head.chunked():
        while True:
            line = await reader.readuntil(b"\r\n")
            await put(line)
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    t = await reader.readuntil(b"\r\n")
                    await put(t)
                    if t == b"\r\n":
                        return
            left = size + 2
            while left:
                b = await reader.read(min(left, 1 << 16))
                if not b:
                    raise ConnectionError("body cut short")
                left -= len(b)
                await put(b)
    n = head.length()
    if n is not None:
        while n:
            b = await reader.read(min(n, 1 << 16))
            if not b:
                raise ConnectionError("body cut short")
            n -= len(b)
            await put(b)
        return
    if until_eof:
        while True:
            b = await reader.read(1 << 16)
            if not b:
                return
            await put(b)


def reset(writer):
    """Close with RST (SO_LINGER 0), not FIN."""
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


def error_response(status, code, message, request_id, head_request, close):
    body = b"" if head_request else (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<RequestId>{request_id}</RequestId></Error>").encode()
    reason = {500: "Internal Server Error", 503: "Service Unavailable"}[status]
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/xml",
             f"Content-Length: {len(body)}", f"x-amz-request-id: {request_id}",
             f"Date: {time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime())}",
             "Server: faultproxy", "Connection: " + ("close" if close else "keep-alive")]
    if status == 503:
        lines.append("Retry-After: 1")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Proxy:
    def __init__(self, args):
        self.up_host, _, port = args.upstream.rpartition(":")
        self.up_port = int(port)
        self.rate = args.rate
        self.min_rate = args.min_rate
        self.kinds = tuple(args.kinds.split(",")) if args.kinds else KINDS
        self.rng = random.Random(args.seed)
        self.stats = Stats()
        self.log = open(args.log, "a", buffering=1) if args.log else None
        self.log_all = args.log_all

    def pick(self):
        s = self.stats
        forced = s.faults < self.min_rate * s.requests - 1
        if forced or self.rng.random() < self.rate:
            return self.rng.choice(self.kinds)
        return None

    def note(self, msg):
        if self.log:
            self.log.write(f"{time.time():.3f} {msg}\n")

    async def handle(self, creader, cwriter):
        self.stats.connections += 1
        up = None  # (reader, writer)
        try:
            while True:
                head = await read_head(creader)
                if head is None:
                    return
                method, _, rest = head.start.partition(" ")
                target = rest.rpartition(" ")[0]
                op = s3_op(method, target, head)
                self.stats.requests += 1
                self.stats.ops[op] += 1
                n = self.stats.requests
                kind = self.pick()
                expect = "100-continue" in (head.get("expect") or "").lower()
                if kind:
                    self.stats.faults += 1
                    self.stats.kinds[kind] += 1
                    self.stats.fault_ops[op] += 1
                    self.note(f"request {n}: {kind} {op} {method} {unquote(target)}")
                if kind in ("http500", "http503"):
                    if not expect:
                        await relay_body(creader, None, head)
                    status, code = (500, "InternalError") if kind == "http500" else (503, "SlowDown")
                    cwriter.write(error_response(status, code, f"injected fault (request {n})", f"FAULT{n:08d}",
                                                 method == "HEAD", close=expect))
                    await cwriter.drain()
                    if expect:
                        return
                    continue
                if kind == "reset":
                    n_body = head.length() or 0
                    if n_body and not expect:
                        try:
                            await asyncio.wait_for(creader.read(self.rng.randrange(0, n_body) + 1), 5)
                        except asyncio.TimeoutError:
                            pass
                    reset(cwriter)
                    return
                if kind == "delay":
                    await asyncio.sleep(self.rng.uniform(0.3, 2.0))
                if up is None:
                    up = await asyncio.open_connection(self.up_host, self.up_port)
                ureader, uwriter = up
                uwriter.write(head.raw)
                await uwriter.drain()
                lost = kind == "reset_after"
                out = None if lost else cwriter
                resp = None
                if expect:
                    resp = await read_head(ureader)
                    if resp is None:
                        raise ConnectionError("upstream closed")
                    if resp.start.split(" ")[1] == "100":
                        # The client waits for it before its body (also
                        # when its final answer is going to be lost).
                        cwriter.write(resp.raw)
                        await cwriter.drain()
                        resp = None
                        await relay_body(creader, uwriter, head)
                else:
                    await relay_body(creader, uwriter, head)
                while True:
                    if resp is None:
                        resp = await read_head(ureader)
                        if resp is None:
                            raise ConnectionError("upstream closed before answering")
                    status = int(resp.start.split(" ")[1])
                    if out is not None:
                        out.write(resp.raw)
                    if 100 <= status < 200:
                        resp = None
                        continue
                    break
                no_body = method == "HEAD" or status in (204, 304)
                eof_body = not no_body and not resp.chunked() and resp.length() is None
                if not no_body:
                    await relay_body(ureader, out, resp, until_eof=True)
                if out is not None:
                    await out.drain()
                if self.log_all:
                    self.note(f"request {n}: {kind or 'forwarded'} {op} {method} {unquote(target)} -> {status}")
                if lost:
                    reset(cwriter)
                    uwriter.close()
                    return
                if eof_body or resp.close():
                    uwriter.close()
                    up = None
                    if eof_body:
                        return
                if head.close():
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError, ValueError) as e:
            self.stats.errors[type(e).__name__] += 1
            self.note(f"connection error: {type(e).__name__}: {e}")
        finally:
            if up is not None:
                up[1].close()
            try:
                cwriter.close()
            except Exception:
                pass


async def main_async(args):
    proxy = Proxy(args)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", args.port, limit=1 << 20)
    port = server.sockets[0].getsockname()[1]
    print(f"listening 127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    print(proxy.stats.json(), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--port", type=int, default=0, help="loopback port to listen on (0: any free one)")
    ap.add_argument("--rate", type=float, default=0.12, help="probability of a fault per request")
    ap.add_argument("--min-rate", type=float, default=0.06, help="faults forced below this share")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", help=f"comma list among {','.join(KINDS)} (default: all)")
    ap.add_argument("--log", help="append one line per fault to this file")
    ap.add_argument("--log-all", action="store_true", help="also log every forwarded request and its status")
    args = ap.parse_args()
    if args.kinds and not set(args.kinds.split(",")) <= set(KINDS):
        ap.error(f"--kinds: known kinds are {', '.join(KINDS)}")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
