"""Slow clients against an HTTP server, beside a normal one, for the lockout
test (tests/integration/http_slowloris.sh): many connections from one
address that send a request's headers (or its body) a byte at a time, and a
normal client from another address that sends a whole request every little
while. Writes what happened as JSON: for each slow connection whether it was
refused at once and when the server closed it; for each normal request its
status and how long the answer took.

Run by Debian's /usr/bin/python3 (standard library only).
"""
import argparse
import json
import select
import socket
import threading
import time


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True, help="HOST:PORT of the server")
    p.add_argument("--slow-from", default="127.0.0.1", help="source address of the slow clients")
    p.add_argument("--slow", type=int, default=0, help="connections trickling their headers")
    p.add_argument("--slow-body", type=int, default=0,
                   help="connections sending whole headers, then trickling a body")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between trickled bytes")
    p.add_argument("--client-from", default="127.0.0.2", help="source address of the normal client")
    p.add_argument("--client-path", default="/healthz")
    p.add_argument("--client-every", type=float, default=0.2)
    p.add_argument("--client-timeout", type=float, default=10.0)
    p.add_argument("--settle", type=float, default=1.0,
                   help="seconds after opening the slow connections before the normal client starts")
    p.add_argument("--duration", type=float, required=True, help="seconds of the whole run")
    p.add_argument("--out", required=True)
    return p.parse_args()


def connect(target, source, timeout=5.0):
    host, port = target.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect((host, int(port)))
    return s


class Slow:
    """One slow connection: what it still has to send, byte by byte."""

    def __init__(self, args, i, body):
        self.sock = connect(args.target, args.slow_from)
        self.sock.setblocking(False)
        self.opened = time.monotonic()
        self.closed_at = None
        self.answered = False
        self.body = body
        head = "GET /healthz?slow=%d HTTP/1.1\r\nHost: t\r\n" % i
        if body:
            # whole headers now, then a body that never ends
            self.sock.send(("POST /v1/events HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                            "Content-Length: 100000\r\n\r\n").encode())
            self.pending = b"{" + b" " * 99998 + b"}"
        else:
            self.sock.send(head.encode())
            self.pending = b"X-Slow: " + b"a" * 100000 + b"\r\n\r\n"

    def record(self):
        return {"opened": self.opened, "body": self.body, "answered": self.answered,
                "closed_after": None if self.closed_at is None else self.closed_at - self.opened}


def run_slow(args, slows, stop):
    while not stop.is_set():
        live = [s for s in slows if s.closed_at is None]
        if not live:
            break
        readable, _, _ = select.select([s.sock for s in live], [], [], args.interval)
        now = time.monotonic()
        for s in live:
            if s.sock in readable:
                try:
                    data = s.sock.recv(65536)
                except (ConnectionResetError, BlockingIOError):
                    data = b""
                if data:
                    s.answered = True
                else:
                    s.closed_at = now
                    continue
            try:
                s.sock.send(s.pending[:1])
                s.pending = s.pending[1:]
            except (BrokenPipeError, ConnectionResetError):
                s.closed_at = now
            except BlockingIOError:
                pass


def run_client(args, results, stop):
    while not stop.is_set():
        start = time.monotonic()
        status, error = None, None
        try:
            c = connect(args.target, args.client_from, args.client_timeout)
            c.sendall(("GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                       % args.client_path).encode())
            data = b""
            while b"\r\n" not in data:
                chunk = c.recv(4096)
                if not chunk:
                    break
                data += chunk
            c.close()
            if data.startswith(b"HTTP/1.1 "):
                status = int(data.split()[1])
            else:
                error = "no answer (%r)" % data[:60]
        except OSError as e:
            error = str(e)
        took = time.monotonic() - start
        results.append({"at": start, "status": status, "error": error, "latency": took})
        stop.wait(max(0.0, args.client_every - took))


def main():
    args = parse_args()
    start = time.monotonic()
    slows = []
    total = args.slow + args.slow_body
    for i in range(total):
        # the body senders spread evenly among the header senders
        body = args.slow_body > 0 and (i * args.slow_body) // total != ((i + 1) * args.slow_body) // total
        try:
            slows.append(Slow(args, i, body))
        except OSError:
            pass  # refused before it could send: counted as closed at once below
    refused_on_open = args.slow + args.slow_body - len(slows)
    stop = threading.Event()
    slow_thread = threading.Thread(target=run_slow, args=(args, slows, stop))
    slow_thread.start()
    time.sleep(args.settle)
    client = []
    client_thread = threading.Thread(target=run_client, args=(args, client, stop))
    client_thread.start()
    time.sleep(max(0.0, args.duration - (time.monotonic() - start)))
    stop.set()
    slow_thread.join()
    client_thread.join()
    out = {"slow": [s.record() for s in slows], "refused_on_open": refused_on_open,
           "client": [dict(r, at=r["at"] - start) for r in client]}
    for s in out["slow"]:
        s["opened"] -= start
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
