"""Load for scripts/bench-stream: N live feeds (Server-Sent Events) open on
crier serve's HTTP API, one person each; one statement then emits one event
for each of those people; prints how long after that statement's commit each
stream had its item (p50, p99, max in ms) as one JSON object.

usage: bench-stream-load.py API_URL API_KEY STREAMS DATABASE_URL ROUND
"""
import http.client
import json
import subprocess
import sys
import threading
import time
import urllib.parse


def main():
    api, key, n, dburl, rnd = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    u = urllib.parse.urlsplit(api)
    got, lock = {}, threading.Lock()
    ready = threading.Barrier(n + 1, timeout=60)

    def client(i):
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        c.request("GET", "/v1/feed/stream?user=r%s-u%d" % (rnd, i),
                  headers={"Authorization": "Bearer " + key})
        r = c.getresponse()
        first = True
        while True:
            line = r.readline()
            if not line:
                return
            line = line.decode().strip()
            if line.startswith("data:") and first:
                first = False
                ready.wait()
            if line == "event: item":
                with lock:
                    got[i] = time.time()
                c.close()
                return

    for i in range(n):
        threading.Thread(target=client, args=(i,), daemon=True).start()
    ready.wait()
    subprocess.run(["psql", "-XAtq", dburl, "-c",
                    "SELECT count(crier.emit('bench', 'note.added', 'r%s-' || i,"
                    " jsonb_build_object('to', jsonb_build_array('r%s-u' || i))))"
                    " FROM generate_series(0, %d) i" % (rnd, rnd, n - 1)],
                   check=True, capture_output=True)
    committed = time.time()
    deadline = committed + 60
    while time.time() < deadline and len(got) < n:
        time.sleep(0.01)
    lat = sorted((v - committed) * 1000 for v in got.values())
    q = lambda p: lat[min(len(lat) - 1, max(0, int(p * len(lat) + 0.999) - 1))] if lat else None
    print(json.dumps({"streams": n, "received": len(got), "p50_ms": q(0.5), "p99_ms": q(0.99),
                      "max_ms": lat[-1] if lat else None}))


if __name__ == "__main__":
    main()
