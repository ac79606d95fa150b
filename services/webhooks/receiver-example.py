"""A webhook receiver on Python 3's standard library alone: the receiver example of
services/webhooks/README.md (## Receiver) for a stack without Node, doing what verifyWebhook in
contracts/webhook-verify.ts does, refusals in the same words.

Run: WEBHOOK_SECRET=whsec_... python3 receiver-example.py, with key.pem and cert.pem beside it
(made as the README says). It checks X-Service-Timestamp against a 300 s tolerance, the hex
HMAC-SHA256 of "{timestamp}.{rawBody}" keyed with the whole secret string (X-Service-Signature, or
X-Service-Signature-New during a rotation's overlap) in constant time, and that X-Service-Event and
X-Service-Delivery are the signed body's; it handles each delivery_id once.
test/webhooks-receiver-example.e2e.test.ts runs this file against real deliveries.
"""
import hashlib, hmac, json, os, ssl, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = os.environ['WEBHOOK_SECRET'].encode('utf-8')  # the whole whsec_... string is the key
TOLERANCE = 300  # seconds
handled = set()  # delivery ids handled; keep them in your own store to survive a restart
lock = threading.Lock()


def handle(event):  # your code
    print(event, flush=True)


def verify(headers, raw):
    """(body, None) when the delivery is the service's, else (None, reason), in verifyWebhook's words."""
    ts, event, delivery = (headers.get(h) for h in ('X-Service-Timestamp', 'X-Service-Event', 'X-Service-Delivery'))
    # During a secret rotation's overlap the new secret's signature is in X-Service-Signature-New.
    signatures = [s for s in (headers.get('X-Service-Signature'), headers.get('X-Service-Signature-New')) if s]
    if not (ts and event and delivery and signatures):
        return None, 'missing_header'
    if not (ts.isascii() and ts.isdigit()):
        return None, 'bad_timestamp'
    if abs(time.time() - int(ts)) > TOLERANCE:
        return None, 'outside_tolerance'
    expected = hmac.new(SECRET, ts.encode() + b'.' + raw, hashlib.sha256).hexdigest().encode()
    if not any(hmac.compare_digest(expected, s.strip().lower().encode()) for s in signatures):
        return None, 'bad_signature'
    body = json.loads(raw)
    # The signature covers the body, not these headers: trust the body's ids, refuse other headers.
    if body.get('event') != event or body.get('delivery_id') != delivery:
        return None, 'header_mismatch'
    return body, None


class Receiver(BaseHTTPRequestHandler):
    timeout = 30

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get('Content-Length', 0)))  # the raw bytes, never re-serialised
        body, refused = verify(self.headers, raw)
        if refused:
            return self.answer(400, refused)
        with lock:  # a redelivery carries the first one's delivery_id: handle each id once
            if body['delivery_id'] not in handled:
                handle(body)
                handled.add(body['delivery_id'])
        self.answer(200, '')

    def answer(self, status, text):
        self.send_response(status)
        self.send_header('Content-Length', str(len(text)))
        self.end_headers()
        self.wfile.write(text.encode())


tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain('cert.pem', 'key.pem')
server = ThreadingHTTPServer(('', 8443), Receiver)
# The TLS handshake runs in each request's thread, so a client that never completes one blocks no other.
server.socket = tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
server.serve_forever()
