"""A Server-Sent Events client for the tests: connects to URL, writes each
event it receives as one JSON line {"event", "id", "data"} to OUT (flushed at
once), and the response's status and content type as the first line
{"status", "content_type"}. Stops at the end of the stream or when killed.

usage: sse_client.py URL OUT [HEADER: VALUE]...
"""
import http.client
import json
import sys
import urllib.parse


def main():
    url, out_path, headers = sys.argv[1], sys.argv[2], sys.argv[3:]
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    path = u.path + ("?" + u.query if u.query else "")
    hdrs = {"Accept": "text/event-stream"}
    for h in headers:
        k, v = h.split(":", 1)
        hdrs[k.strip()] = v.strip()
    conn.request("GET", path, headers=hdrs)
    resp = conn.getresponse()
    with open(out_path, "w") as out:
        out.write(json.dumps({"status": resp.status,
                              "content_type": resp.getheader("Content-Type")}) + "\n")
        out.flush()
        if resp.status != 200:
            out.write(json.dumps({"body": resp.read().decode()}) + "\n")
            return
        event = {}
        while True:
            line = resp.readline()
            if not line:
                out.write(json.dumps({"end": True}) + "\n")
                return
            line = line.decode().rstrip("\n")
            if line == "":
                if "data" in event or "event" in event:
                    out.write(json.dumps(event) + "\n")
                    out.flush()
                event = {}
            elif line.startswith(":"):
                continue
            else:
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "data":
                    event["data"] = json.loads(value)
                elif field in ("event", "id", "retry"):
                    event[field] = value


if __name__ == "__main__":
    main()
