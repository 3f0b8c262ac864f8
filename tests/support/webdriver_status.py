#!/usr/bin/python3
"""Drives crier's status page in a real headless Chromium through chromedriver's
WebDriver HTTP API (urllib only, no selenium): opens the page, waits until it
shows the live worker and the dead delivery named on the command line, writes a
screenshot, clicks the delivery's Replay button and waits until the page says
it was replayed (a second screenshot). Exits 1 with the reason on any failure.

usage: webdriver_status.py --url URL --worker NAME --delivery ID --shots DIR
"""
import argparse
import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

CSS = "css selector"
ELEMENT = "element-6066-11e4-a6c6-aeaad6df2fd3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Driver:
    def __init__(self, base):
        self.base = base
        self.session = None

    def call(self, method, path, body=None, timeout=30):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                return json.loads(res.read() or b"{}").get("value")
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: {e.code} {e.read()[:500]!r}") from None

    def s(self, method, path, body=None):
        return self.call(method, f"/session/{self.session}{path}", body)

    def find(self, selector):
        """The element matching selector, or None."""
        found = self.s("POST", "/elements", {"using": CSS, "value": selector})
        if not found:
            return None
        return found[0].get(ELEMENT) or found[0].get("ELEMENT") or next(iter(found[0].values()))

    def wait(self, selector, what, timeout=15):
        end = time.time() + timeout
        while time.time() < end:
            e = self.find(selector)
            if e:
                return e
            time.sleep(0.2)
        lines = [self.text(e) if e else "" for e in (self.find("#error"), self.find("#flash"))]
        raise RuntimeError(f"the page never showed {what} ({selector}) in {timeout} s; "
                           f"its error and message lines: {lines!r}")

    def text(self, element):
        return self.s("GET", f"/element/{element}/text")

    def screenshot(self, path):
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.s("GET", "/screenshot")))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--delivery", required=True)
    ap.add_argument("--shots", required=True)
    ap.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()

    port = free_port()
    log = open(os.path.join(args.shots, "chromedriver.log"), "w")
    # Chromium's profile and scoped directories go under the test's own
    # directory (TMPDIR), not /tmp, where nothing would remove them.
    tmp = os.path.join(args.shots, "chromium-tmp")
    os.makedirs(tmp, exist_ok=True)
    proc = subprocess.Popen([args.chromedriver, f"--port={port}"], stdout=log, stderr=log,
                            env=dict(os.environ, TMPDIR=tmp))
    d = Driver(f"http://127.0.0.1:{port}")
    try:
        for _ in range(100):
            try:
                if d.call("GET", "/status", timeout=1).get("ready"):
                    break
            except Exception:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError("chromedriver did not become ready in 10 s")
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": args.chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1200", "--no-first-run", "--disable-extensions",
                     f"--user-data-dir={os.path.join(tmp, 'profile')}"]}}}}
        d.session = d.call("POST", "/session", caps, timeout=30)["sessionId"]
        d.s("POST", "/url", {"url": args.url})
        # the page renders the worker and the dead letter this test made
        worker = d.wait(f'tr.worker[data-worker="{args.worker}"][data-state="alive"]', "the live worker")
        row = d.wait(f"#dead-delivery-{args.delivery}", "the dead delivery")
        worker_text, row_text = d.text(worker), d.text(row)
        if "alive" not in worker_text:
            raise RuntimeError(f"the worker's row does not say alive: {worker_text!r}")
        if "400" not in row_text:
            raise RuntimeError(f"the dead letter's row does not show the receiver's 400: {row_text!r}")
        d.wait("#chart svg polyline", "the throughput chart")
        before = os.path.join(args.shots, "status_page.png")
        d.screenshot(before)
        # the Replay button replays it
        d.s("POST", f"/element/{d.find(f'#replay-delivery-{args.delivery}')}/click", {})
        d.wait(f'#flash[data-replayed="delivery-{args.delivery}"]', "that the replay was done")
        after = os.path.join(args.shots, "status_page_after_replay.png")
        d.screenshot(after)
        print(f"worker row: {worker_text}")
        print(f"dead letter row: {row_text}")
        print(f"screenshots: {before} {after}")
    except Exception as e:
        print(f"webdriver: {e}", file=sys.stderr)
        return 1
    finally:
        if d.session:
            try:
                d.call("DELETE", f"/session/{d.session}", timeout=10)
            except Exception:
                pass
        proc.kill()
        proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
