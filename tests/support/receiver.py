#!/usr/bin/python3
"""A real local HTTP receiver for tests and benchmarks: logs every request as one
JSON line (method, path, headers lower-cased, body) and answers with a status
taken from --statuses (in order per request; the last one repeats), after an
optional --delay-ms (or per-request --delays-ms), with an optional --body and
Retry-After header. Writes the port it listens on to --port-file. With
--secrets "whsec_a whsec_b", each log line also gets "verified_secrets": the
1-based positions of the secrets whose Standard Webhooks signature is in the
webhook-signature header, comma-separated ("" when none)."""
import argparse
import base64
import hashlib
import hmac
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
    ap.add_argument("--delays-ms", default=None,
                    help="comma-separated delays per request, in order; the last repeats (overrides --delay-ms)")
    ap.add_argument("--body", default="", help="response body sent with every answer")
    ap.add_argument("--retry-after", default=None, help="Retry-After header value sent with every answer")
    ap.add_argument("--secrets", default=None,
                    help="whitespace-separated whsec_ secrets to verify webhook-signature against")
    args = ap.parse_args()

    keys = []
    for secret in (args.secrets or "").split():
        b64 = secret[len("whsec_"):] if secret.startswith("whsec_") else secret
        keys.append(base64.b64decode(b64 + "=" * (-len(b64) % 4), validate=True))

    def verified(headers, body):
        """Positions (1-based) of the secrets whose signature the request carries."""
        msg = ("%s.%s." % (headers.get("webhook-id", ""),
                           headers.get("webhook-timestamp", ""))).encode() + body
        sent = headers.get("webhook-signature", "").split(" ")
        ok = []
        for i, key in enumerate(keys):
            want = "v1," + base64.b64encode(hmac.new(key, msg, hashlib.sha256).digest()).decode()
            if any(hmac.compare_digest(want, s) for s in sent):
                ok.append(str(i + 1))
        return ",".join(ok)

    statuses = [int(s) for s in args.statuses.split(",")]
    delays = [int(s) for s in args.delays_ms.split(",")] if args.delays_ms else [args.delay_ms]
    reply = args.body.encode()
    lock = threading.Lock()
    state = {"n": 0}
    log = open(args.log, "a", buffering=1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            body = raw.decode("utf-8", "replace")
            headers = {k.lower(): v for k, v in self.headers.items()}
            with lock:
                i = state["n"]
                state["n"] += 1
                status = statuses[min(i, len(statuses) - 1)]
                delay = delays[min(i, len(delays) - 1)]
                entry = {"method": self.command, "path": self.path, "headers": headers,
                         "body": body, "status": status, "t": time.time()}
                if keys:
                    entry["verified_secrets"] = verified(headers, raw)
                log.write(json.dumps(entry) + "\n")
            if delay:
                time.sleep(delay / 1000.0)
            try:
                self.send_response(status)
                if args.retry_after is not None:
                    self.send_header("Retry-After", args.retry_after)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout): nothing to answer

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
