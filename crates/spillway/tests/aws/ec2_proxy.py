"""A small proxy in front of moto for the AWS tests: forwards every request, and on CreateFleet can inject what
moto never does.

  ec2_proxy.py PORT UPSTREAM [--ice TYPE] [--hold-once MARKER]

--ice TYPE: a CreateFleet for instance type TYPE answers with an InsufficientInstanceCapacity fleet error (no
  instance), as EC2 does when it has none of that type.
--hold-once MARKER: the first CreateFleet is forwarded (moto launches the instance), then MARKER is written and
  the answer is held back forever, so the test can kill the daemon between CreateFleet and its store write.
"""
import sys, threading, urllib.parse, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, UPSTREAM = int(sys.argv[1]), sys.argv[2].rstrip("/")
ICE = sys.argv[sys.argv.index("--ice") + 1] if "--ice" in sys.argv else None
HOLD = sys.argv[sys.argv.index("--hold-once") + 1] if "--hold-once" in sys.argv else None
held = threading.Event()

ICE_REPLY = """<?xml version="1.0" encoding="UTF-8"?>
<CreateFleetResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>ice-1</requestId>
<fleetId>fleet-ice</fleetId><errorSet><item><errorCode>InsufficientInstanceCapacity</errorCode>
<errorMessage>We currently do not have sufficient {t} capacity in the Availability Zone you requested.</errorMessage>
<lifecycle>spot</lifecycle></item></errorSet><fleetInstanceSet/></CreateFleetResponse>"""


class Proxy(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        self.forward(None)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        if form.get("Action") == ["CreateFleet"]:
            types = [v[0] for k, v in form.items() if k.endswith(".InstanceType")]
            if ICE and ICE in types:
                return self.reply(200, ICE_REPLY.format(t=ICE).encode(), "text/xml")
            if HOLD and not held.is_set():
                held.set()
                status, data, ctype = self.upstream(body)
                open(HOLD, "w").write("created\n")
                threading.Event().wait()  # never answered: the test kills the daemon now
        self.forward(body)

    def upstream(self, body):
        req = urllib.request.Request(UPSTREAM + self.path, data=body, method=self.command)
        for k, v in self.headers.items():
            if k.lower() not in ("host", "content-length", "connection"):
                req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read(), r.headers.get("Content-Type", "text/xml")
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers.get("Content-Type", "text/xml")

    def forward(self, body):
        self.reply(*self.upstream(body))

    def reply(self, status, data, ctype):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("127.0.0.1", PORT), Proxy).serve_forever()
