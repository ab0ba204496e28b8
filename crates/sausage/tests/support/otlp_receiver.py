"""An OTLP/HTTP trace receiver for the tests of traces (DESIGN §22), run by support/otlp.rs with
the python of target/otel-venv (scripts/install-observability puts opentelemetry-proto there).

Usage: otlp_receiver.py PORT OUTPUT. Listens on 127.0.0.1:PORT (0: a free port) and prints the
port it listens on as its first line of stdout. Each `POST /v1/traces` whose body is a protobuf
`ExportTraceServiceRequest` (`Content-Type: application/x-protobuf`, gzip allowed) appends one
JSON line per span to OUTPUT, flushed before the answer: 200 with an empty
`ExportTraceServiceResponse`. A body it cannot decode gets 400 and a line on stderr; JSON bodies
get 415; other paths 404. Nothing else is written to stderr.
"""

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def any_value(value):
    """The python value of an OTLP `AnyValue`: arrays and key-value lists become lists and dicts,
    bytes become hex, an empty value None."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return None if kind is None else getattr(value, kind)


def attributes(pairs):
    return {pair.key: any_value(pair.value) for pair in pairs}


def span_lines(request):
    """One JSON line for each span of the request, with its resource and scope."""
    lines = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                line = {
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": span.kind,
                    "start_unix_nano": span.start_time_unix_nano,
                    "end_unix_nano": span.end_time_unix_nano,
                    "attributes": attributes(span.attributes),
                    "events": [
                        {"name": event.name, "attributes": attributes(event.attributes)}
                        for event in span.events
                    ],
                    "links": [attributes(link.attributes) for link in span.links],
                    "status_code": span.status.code,
                    "status_message": span.status.message,
                    "resource": resource,
                    "scope": scope_spans.scope.name,
                }
                lines.append(json.dumps(line) + "\n")
    return "".join(lines)


class Receiver(BaseHTTPRequestHandler):
    # Keep-alive, as exporters reuse their connection; every answer has a Content-Length.
    protocol_version = "HTTP/1.1"
    output = None
    # Requests are handled on threads of their own: one writes its lines at a time, so a
    # request's spans stay together and no line is cut by another's.
    output_lock = threading.Lock()

    def do_POST(self):
        body = self.read_body()
        if self.path.split("?")[0] != "/v1/traces":
            return self.answer(404, "text/plain", b"only /v1/traces is received here\n")
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type != "application/x-protobuf":
            return self.answer(415, "text/plain", b"only application/x-protobuf is received\n")
        try:
            encoding = self.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding != "identity":
                raise ValueError(f"unknown Content-Encoding {encoding!r}")
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            lines = span_lines(request)
        except Exception as error:  # Anything undecodable is the sender's fault: say so.
            print(f"otlp_receiver: POST /v1/traces: cannot decode: {error}", file=sys.stderr,
                  flush=True)
            return self.answer(400, "text/plain", f"cannot decode: {error}\n".encode())
        with Receiver.output_lock:
            Receiver.output.write(lines)
            Receiver.output.flush()
        self.answer(200, "application/x-protobuf", ExportTraceServiceResponse().SerializeToString())

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                chunk = self.rfile.read(size + 2)  # The chunk and its CRLF.
                if size == 0:
                    return body
                body += chunk[:size]
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def answer(self, status, content_type, body):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass  # No access log: stderr is for errors only.


def main():
    port, output = int(sys.argv[1]), sys.argv[2]
    Receiver.output = open(output, "a", encoding="utf-8")
    server = ThreadingHTTPServer(("127.0.0.1", port), Receiver)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
