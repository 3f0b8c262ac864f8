#!/usr/bin/python3
"""A real local SMTP server for tests, built on Debian's python3-aiosmtpd (run it
with /usr/bin/python3): logs every accepted message as one JSON line
{mail_from, rcpt_tos, data, auth_user} to --log (data is the message as it
arrived after the server removed the dot-stuffing, CRLF line endings kept),
writes the port it listens on to --port-file, and can answer --fail-code to
RCPT or DATA (--fail-stage) for the first --fail-first messages (a message is
one MAIL FROM transaction). With --auth USER:PASSWORD it offers AUTH
PLAIN/LOGIN without TLS and refuses mail from unauthenticated sessions. With
--tls-cert and --tls-key it offers STARTTLS with that certificate and refuses
mail before it; each logged message then says "tls": true."""
import argparse
import asyncio
import json
import logging
import os
import signal
import ssl
import sys

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword


class Sink:
    """The aiosmtpd handler: counts transactions, fails the first N on request,
    and appends each accepted message to the log."""

    def __init__(self, args, log):
        self.args = args
        self.log = log
        self.transactions = 0

    def _failing(self, envelope, stage):
        return (self.args.fail_stage == stage and
                getattr(envelope, "crier_index", 0) < self.args.fail_first)

    def _reply(self):
        code = self.args.fail_code
        text = "Try again later" if code < 500 else "Rejected"
        return "%d %s (crier smtp_sink)" % (code, text)

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        if self.args.auth and not session.authenticated:
            return "530 Authentication required"
        envelope.crier_index = self.transactions
        self.transactions += 1
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if self._failing(envelope, "rcpt"):
            return self._reply()
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        if self._failing(envelope, "data"):
            return self._reply()
        data = envelope.original_content or b""
        auth_user = None
        if session.auth_data is not None and isinstance(session.auth_data, LoginPassword):
            auth_user = session.auth_data.login.decode("utf-8", "replace")
        self.log.write(json.dumps({
            "mail_from": envelope.mail_from,
            "rcpt_tos": list(envelope.rcpt_tos),
            "data": data.decode("utf-8", "replace"),
            "auth_user": auth_user,
            "tls": session.ssl is not None,
        }) + "\n")
        self.log.flush()
        return "250 Message accepted"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True, help="file that gets one JSON line per message")
    ap.add_argument("--fail-first", type=int, default=0,
                    help="answer --fail-code for the first N messages")
    ap.add_argument("--fail-code", type=int, default=451)
    ap.add_argument("--fail-stage", choices=("rcpt", "data"), default="rcpt")
    ap.add_argument("--auth", default=None, help="USER:PASSWORD to require")
    ap.add_argument("--tls-cert", default=None, help="PEM certificate chain for STARTTLS")
    ap.add_argument("--tls-key", default=None, help="its PEM private key")
    args = ap.parse_args()
    tls = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)

    # aiosmtpd logs a deprecation warning on every AUTH; keep stderr for errors.
    logging.getLogger("mail.log").setLevel(logging.ERROR)
    log = open(args.log, "a", buffering=1)
    sink = Sink(args, log)

    def authenticator(server, session, envelope, mechanism, auth_data):
        if not isinstance(auth_data, LoginPassword) or not args.auth:
            return AuthResult(success=False, handled=False)
        user, _, password = args.auth.partition(":")
        ok = (auth_data.login == user.encode() and auth_data.password == password.encode())
        return AuthResult(success=ok, handled=False, auth_data=auth_data)

    def factory():
        kw = {}
        if args.auth:
            kw = {"authenticator": authenticator, "auth_require_tls": False}
        if tls:
            kw.update(tls_context=tls, require_starttls=True)
        return SMTP(sink, hostname="crier-smtp-sink", decode_data=False, **kw)

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = loop.run_until_complete(loop.create_server(factory, args.host, args.port))
    port = server.sockets[0].getsockname()[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.replace(tmp, args.port_file)  # readers never see a half-written file

    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    loop.add_signal_handler(signal.SIGINT, loop.stop)
    try:
        loop.run_forever()
    finally:
        server.close()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
