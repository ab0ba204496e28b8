"""An MCP server for the tests of the agent's MCP client (DESIGN §23), written with the official
Python MCP SDK (its MCPServer, once FastMCP) and run by support/mcp.rs with the python of
target/mcp-venv (scripts/install-mcp).

Usage: mcp_server.py PORT TOKEN CALLS. Serves streamable HTTP at http://127.0.0.1:PORT/mcp (PORT
0: a free port) and prints the port it listens on as its first line of stdout. Every HTTP request
without `Authorization: Bearer TOKEN` gets 401. Tools: `weather(city)` answers "sunny in CITY";
`slow(seconds)` sleeps that long, then answers "slept". Each tool call appends one JSON line
`{"tool": NAME, "arguments": {...}}` to CALLS, flushed when the call starts.
"""

import json
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer

port, token, calls_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
calls = open(calls_path, "a")
server = MCPServer("sausage-test-tools")


def log_call(tool, arguments):
    calls.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")
    calls.flush()


@server.tool()
def weather(city: str) -> str:
    """The weather in a city."""
    log_call("weather", {"city": city})
    return f"sunny in {city}"


@server.tool()
async def slow(seconds: float) -> str:
    """Sleeps for some seconds, then answers."""
    log_call("slow", {"seconds": seconds})
    await anyio.sleep(seconds)
    return "slept"


def require_token(app):
    """The ASGI app `app` behind a bearer-token check of every HTTP request."""
    expected = f"Bearer {token}".encode()

    async def checked(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            body = b"a bearer token is required\n"
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"text/plain"),
                        (b"content-length", str(len(body)).encode()),
                        (b"www-authenticate", b"Bearer"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return checked


def main():
    # Bound here, not by uvicorn, so that the port is known (and printed) before serving.
    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    listener.listen()
    app = require_token(server.streamable_http_app())
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(listener.getsockname()[1], flush=True)
    uvicorn.Server(config).run(sockets=[listener])


if __name__ == "__main__":
    main()
