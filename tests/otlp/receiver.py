"""An OTLP/HTTP trace receiver for the tests: decodes every export with the
official OpenTelemetry protobuf definitions (the `opentelemetry-proto`
package) and keeps the spans, flattened to JSON, for the tests to read.

    python receiver.py            # prints "otlp receiver listening on http://127.0.0.1:PORT"

POST /v1/traces       an ExportTraceServiceRequest (application/x-protobuf);
                      answered as the mode says (below)
GET  /spans           every span received so far, as a JSON array
GET  /stats           {"exports": N, "spans": N, "bad": N, "headers": [...]}
POST /mode            {"mode": "ok" | "fail" | "stall", "status": 503}:
                      "fail" answers every export with `status` (spans
                      dropped); "stall" reads the export and never answers

A body that does not decode is answered 400 and counted as bad.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

LOCK = threading.Lock()
SPANS: list[dict] = []
STATS = {"exports": 0, "spans": 0, "bad": 0, "headers": []}
MODE = {"mode": "ok", "status": 503}
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
STATUS = {0: "unset", 1: "ok", 2: "error"}


def any_value(v):
    which = v.WhichOneof("value")
    if which == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which) if which else None


def attributes(kvs) -> dict:
    return {kv.key: any_value(kv.value) for kv in kvs}


def flatten(req: ExportTraceServiceRequest) -> list[dict]:
    out = []
    for rs in req.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    {
                        "resource": resource,
                        "scope": {"name": ss.scope.name, "version": ss.scope.version},
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "trace_state": s.trace_state,
                        "flags": s.flags,
                        "name": s.name,
                        "kind": KINDS.get(s.kind, s.kind),
                        "start_ns": s.start_time_unix_nano,
                        "end_ns": s.end_time_unix_nano,
                        "attributes": attributes(s.attributes),
                        "events": [
                            {"name": e.name, "time_ns": e.time_unix_nano, "attributes": attributes(e.attributes)}
                            for e in s.events
                        ],
                        "status": {"code": STATUS.get(s.status.code, s.status.code), "message": s.status.message},
                    }
                )
    return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def reply(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self) -> None:
        with LOCK:
            if self.path == "/spans":
                return self.reply(200, json.dumps(SPANS).encode())
            if self.path == "/stats":
                return self.reply(200, json.dumps(STATS).encode())
        self.reply(404, b"{}")

    def do_POST(self) -> None:
        body = self.body()
        if self.path == "/mode":
            with LOCK:
                MODE.update(json.loads(body))
            return self.reply(200, b"{}")
        if self.path != "/v1/traces":
            return self.reply(404, b"{}")
        with LOCK:
            mode = dict(MODE)
            STATS["headers"].append({k.lower(): v for k, v in self.headers.items()})
            del STATS["headers"][:-20]
        if mode["mode"] == "stall":
            threading.Event().wait()
        if mode["mode"] == "fail":
            return self.reply(int(mode["status"]), b"{}")
        if self.headers.get("Content-Type") != "application/x-protobuf":
            with LOCK:
                STATS["bad"] += 1
            return self.reply(415, b"{}")
        req = ExportTraceServiceRequest()
        try:
            req.ParseFromString(body)
        except DecodeError:
            with LOCK:
                STATS["bad"] += 1
            return self.reply(400, b"{}")
        spans = flatten(req)
        with LOCK:
            STATS["exports"] += 1
            STATS["spans"] += len(spans)
            SPANS.extend(spans)
        self.reply(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")


def main() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"otlp receiver listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
