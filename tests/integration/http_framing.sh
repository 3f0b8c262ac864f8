#!/usr/bin/env bash
# Request framing of the HTTP API (issue 10 item 3): a request whose length a
# proxy in front could read differently from crier — Content-Length twice,
# Content-Length with Transfer-Encoding, a transfer coding other than
# chunked, Transfer-Encoding twice or in HTTP/1.0, a space before a framing
# header's colon, a framing header folded onto the next line — is refused
# with 400 invalid_framing (JSON, Connection: close) before its body is read,
# and the connection is closed: what follows on it (a second, smuggled
# request that would create an event) is never executed. A Content-Length
# with a sign, inner or trailing spaces or a list is refused by libmicrohttpd
# itself (its own 400 page, connection closed). Legitimate framing still
# works: pipelined keep-alive requests, a chunked body, spaces before a
# Content-Length's value.
. "$(dirname "$0")/../support/lib.sh"
new_db
note_rules
start_api serve
KEY=$("$CRIER_BIN" keys create --tenant acme --name tests 2>/dev/null)
[[ $KEY == crk_* ]] || fail "crier keys create printed '$KEY'"

/usr/bin/python3 - "${API#http://}" "$KEY" <<'PY' || fail "framing probes failed (see above)"
import json, socket, sys, time

host, port = sys.argv[1].split(":")
key = sys.argv[2]
failures = []


def event(entity):
    return json.dumps({"type": "note.created", "entity_id": entity, "payload": {"text": entity}})


def post_head(extra, version="HTTP/1.1"):
    return ("POST /v1/events %s\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
            "Content-Type: application/json\r\n%s\r\n" % (version, key, extra)).encode()


def post(entity):
    """A complete, well-framed request creating one event."""
    body = event(entity)
    return post_head("Content-Length: %d\r\n" % len(body)) + body.encode()


def chunked(body):
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def exchange(raw, wait=4.0):
    """Sends raw on a new connection; returns (bytes received, closed by the server)."""
    s = socket.create_connection((host, int(port)))
    s.sendall(raw)
    s.settimeout(0.5)
    data, closed, deadline = b"", False, time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
    s.close()
    return data, closed


def responses(data):
    """The responses in data, as (status, headers, body)."""
    out = []
    while data.startswith(b"HTTP/"):
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        n = int(headers.get("content-length", "0"))
        out.append((int(lines[0].split()[1]), headers, rest[:n]))
        data = rest[n:]
    return out


def refused_by_crier(name, raw):
    data, closed = exchange(raw)
    got = responses(data)
    if not got:
        failures.append("%s: no answer (got %r, closed: %s)" % (name, data[:200], closed))
        return
    status, headers, body = got[0]
    try:
        error = json.loads(body)["error"]
    except Exception:
        error = {}
    if status != 400 or error.get("code") != "invalid_framing" or not error.get("message"):
        failures.append("%s: expected 400 invalid_framing, got %d %r" % (name, status, body[:200]))
    if headers.get("connection", "").lower() != "close":
        failures.append("%s: the 400 does not say Connection: close" % name)
    if len(got) > 1:
        failures.append("%s: %d answers on one connection: what followed was executed as a "
                        "request (%s)" % (name, len(got), [g[0] for g in got]))
    if not closed:
        failures.append("%s: the connection stayed open after the refusal" % name)
    print("-- %s: %d %s" % (name, status, error.get("message", "")), file=sys.stderr)


def refused_by_parser(name, raw):
    data, closed = exchange(raw)
    first = data.split(b"\r\n", 1)[0]
    if not first.startswith(b"HTTP/1.1 400"):
        failures.append("%s: expected 400 from the HTTP parser, got %r" % (name, data[:200]))
    if b"HTTP/1.1 2" in data:
        failures.append("%s: a request was executed: %r" % (name, data[:300]))
    if not closed:
        failures.append("%s: the connection stayed open after the refusal" % name)
    print("-- %s: %s (libmicrohttpd)" % (name, first.decode("latin-1")), file=sys.stderr)


# Each probe: an outer request and, behind it on the same connection, a
# smuggled one; neither may create an event.
def outer(n):
    return event("outer-%s" % n).encode()


smuggled = lambda n: post("smuggled-%s" % n)

o = outer("cl-twice")
refused_by_crier("Content-Length twice, different values",
                 post_head("Content-Length: %d\r\nContent-Length: %d\r\n"
                           % (len(o), len(o) + len(smuggled("cl-twice"))))
                 + o + smuggled("cl-twice"))
s = smuggled("cl-zero")
refused_by_crier("Content-Length 0, then another",
                 post_head("Content-Length: 0\r\nContent-Length: %d\r\n" % len(s)) + s)
o = outer("cl-same")
refused_by_crier("Content-Length twice, same value",
                 post_head("Content-Length: %d\r\nContent-Length: %d\r\n" % (len(o), len(o)))
                 + o + smuggled("cl-same"))
o = outer("cl-te")
refused_by_crier("Content-Length with Transfer-Encoding",
                 post_head("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n")
                 + chunked(o) + smuggled("cl-te"))
o = outer("te-cl")
refused_by_crier("Transfer-Encoding with Content-Length",
                 post_head("Transfer-Encoding: chunked\r\nContent-Length: %d\r\n"
                           % len(chunked(o)))
                 + chunked(o) + smuggled("te-cl"))
o = outer("te-gzip")
refused_by_crier("Transfer-Encoding: gzip",
                 post_head("Transfer-Encoding: gzip\r\n") + o + smuggled("te-gzip"))
o = outer("te-list")
refused_by_crier("Transfer-Encoding: gzip, chunked",
                 post_head("Transfer-Encoding: gzip, chunked\r\n") + chunked(o)
                 + smuggled("te-list"))
o = outer("te-space")
refused_by_crier("Transfer-Encoding: 'chunked ' (trailing space)",
                 post_head("Transfer-Encoding: chunked \r\n") + chunked(o) + smuggled("te-space"))
o = outer("te-twice")
refused_by_crier("Transfer-Encoding twice",
                 post_head("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n")
                 + chunked(o) + smuggled("te-twice"))
o = outer("te-http10")
refused_by_crier("Transfer-Encoding in HTTP/1.0",
                 post_head("Transfer-Encoding: chunked\r\n", "HTTP/1.0") + chunked(o)
                 + smuggled("te-http10"))
# (libmicrohttpd sees no Content-Length in these two: the body a proxy
# forwards would be read as the next request)
s = smuggled("cl-space-colon")
refused_by_crier("a space before Content-Length's colon",
                 post_head("Content-Length : %d\r\n" % len(s)) + s)
o = outer("te-space-colon")
refused_by_crier("a space before Transfer-Encoding's colon",
                 post_head("Content-Length: %d\r\nTransfer-Encoding : chunked\r\n" % len(o))
                 + o + smuggled("te-space-colon"))
s = smuggled("cl-fold")
refused_by_crier("Content-Length folded onto the next line (obs-fold)",
                 post_head("Content-Length: %d\r\n 0\r\n" % len(s)) + s)
o = outer("te-fold")
refused_by_crier("Transfer-Encoding folded onto the next line (obs-fold)",
                 post_head("Content-Length: %d\r\nTransfer-Encoding:\r\n chunked\r\n" % len(o))
                 + o + smuggled("te-fold"))

for name, value in [("a sign", "+%d"), ("a trailing space", "%d "), ("an inner space", "%d 0"),
                    ("a list", "%d, %d")]:
    o = outer("parser-" + name.replace(" ", "-"))
    v = value % ((len(o),) * value.count("%d"))
    refused_by_parser("Content-Length with %s" % name,
                      post_head("Content-Length: %s\r\n" % v) + o + smuggled("parser-" + name))

# Legitimate framing still works, keep-alive included.
data, closed = exchange(post("ok-pipelined-1") + post("ok-pipelined-2"), wait=2.0)
got = [g[0] for g in responses(data)]
if got != [201, 201] or closed:
    failures.append("two pipelined requests: expected [201, 201] on a connection left open, "
                    "got %s (closed: %s)" % (got, closed))
body = event("ok-chunked").encode()
data, _ = exchange(post_head("Transfer-Encoding: chunked\r\nConnection: close\r\n")
                   + chunked(body), wait=2.0)
got = [g[0] for g in responses(data)]
if got != [201]:
    failures.append("a chunked body: expected [201], got %s %r" % (got, data[:200]))
body = event("ok-spaces").encode()
data, _ = exchange(post_head("Content-Length:     %d\r\nConnection: close\r\n" % len(body))
                   + body, wait=2.0)
got = [g[0] for g in responses(data)]
if got != [201]:
    failures.append("spaces before Content-Length's value: expected [201], got %s" % got)

for f in failures:
    print("FAIL: " + f, file=sys.stderr)
sys.exit(1 if failures else 0)
PY

assert_eq "" "$(sql "SELECT string_agg(entity_id, ', ' ORDER BY id) FROM crier.events
                     WHERE entity_id NOT LIKE 'ok-%'")" "no probe created an event"
assert_eq 4 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id LIKE 'ok-%'")" \
    "the well-framed requests created their events"
if grep -q '] ERROR ' "$WORK/serve.log"; then
    fail "the log has errors: $(grep '] ERROR ' "$WORK/serve.log" | head -5)"
fi
note "ok"
