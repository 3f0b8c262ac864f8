#!/usr/bin/python3
"""A real local HTTP receiver for tests and benchmarks: logs every request as one
JSON line (method, path, headers lower-cased, body) and answers with a status
taken from --statuses (cycled per request; the last one repeats), after an
optional --delay-ms. Writes the port it listens on to --port-file."""
import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True, help="file that gets one JSON line per request")
    ap.add_argument("--statuses", default="204",
                    help="comma-separated statuses, answered in order; the last repeats")
    ap.add_argument("--delay-ms", type=int, default=0)
    args = ap.parse_args()

    statuses = [int(s) for s in args.statuses.split(",")]
    lock = threading.Lock()
    state = {"n": 0}
    log = open(args.log, "a", buffering=1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode("utf-8", "replace")
            with lock:
                i = state["n"]
                state["n"] += 1
                status = statuses[min(i, len(statuses) - 1)]
                log.write(json.dumps({
                    "method": self.command, "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body, "status": status, "t": time.time()}) + "\n")
            if args.delay_ms:
                time.sleep(args.delay_ms / 1000.0)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_PUT = do_POST

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 1024
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(args.port_file + ".tmp", args.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
