"""A scripted MCP client for the tests of MCP (DESIGN §23), run by support/mcp.rs with the python
of target/mcp-venv (scripts/install-mcp puts the official Python MCP SDK, `mcp` 2.x, there).

Usage: mcp_client.py [SCRIPT]. Reads a JSON script from the file SCRIPT, or from stdin:

    {"transport": "stdio", "command": ["sausage", "mcp", "--world", "w"], "env": {"K": "v"},
     "timeout": 120, "steps": [...]}
    {"transport": "http", "url": "http://127.0.0.1:PORT/mcp", "token": "t", "steps": [...]}

`env` is added to the SDK's minimal default environment (HOME, PATH, ...); `token` (optional) is
sent as `Authorization: Bearer`; `timeout` (seconds, default 120) bounds the connection and each
step. Steps run in order on one initialized session, each giving one result:

    {"list_tools": true}              {"tools": [{"name", "description", "inputSchema"}]}
    {"call": NAME, "arguments": {..}, "progress": true}
                                      {"isError", "text" (the text contents joined by newlines),
                                       "structuredContent" (when given),
                                       "progress": [{"progress", "total", "message"}] (if asked)}
    {"list_resources": true}          {"resources": [{"uri", "name", "mimeType"}]}
    {"list_resource_templates": true} {"resourceTemplates": [{"uriTemplate", "name", "mimeType"}]}
    {"read_resource": URI}            {"contents": [{"uri", "mimeType", "text" or "blob"}]}

Prints `{"results": [...], "warnings": [...]}` and exits 0; on any exception prints `{"error":
"<type>: <message>", "results": [what came before], "warnings": [...]}` and exits 2. `warnings`
are what the SDK logged at WARNING or above (such as "Session termination failed: 202"). An HTTP error status met on the way (a 401 for a
refused token) is named in the error. The server's stderr (stdio) passes through to ours.
"""

import json
import logging
import sys
from contextlib import asynccontextmanager

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

DEFAULT_TIMEOUT = 120


def plain(model):
    """A model of the SDK as the JSON the protocol spells it (camelCase, no nulls)."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def pick(model, *fields):
    whole = plain(model)
    return {field: whole[field] for field in fields if field in whole}


async def run_step(session, step, timeout):
    if "list_tools" in step:
        listed = await session.list_tools()
        return {"tools": [pick(t, "name", "description", "inputSchema") for t in listed.tools]}
    if "call" in step:
        progress = []

        async def on_progress(value, total, message):
            progress.append({"progress": value, "total": total, "message": message})

        called = await session.call_tool(
            step["call"],
            step.get("arguments", {}),
            read_timeout_seconds=timeout,
            progress_callback=on_progress if step.get("progress") else None,
        )
        result = {
            "isError": bool(called.is_error),
            "text": "\n".join(c.text for c in called.content if c.type == "text"),
        }
        if called.structured_content is not None:
            result["structuredContent"] = called.structured_content
        if step.get("progress"):
            result["progress"] = progress
        return result
    if "list_resources" in step:
        listed = await session.list_resources()
        return {"resources": [pick(r, "uri", "name", "mimeType") for r in listed.resources]}
    if "list_resource_templates" in step:
        listed = await session.list_resource_templates()
        templates = [pick(t, "uriTemplate", "name", "mimeType") for t in listed.resource_templates]
        return {"resourceTemplates": templates}
    if "read_resource" in step:
        read = await session.read_resource(step["read_resource"])
        return {"contents": [pick(c, "uri", "mimeType", "text", "blob") for c in read.contents]}
    raise ValueError(f"unknown step {json.dumps(step)}")


async def run(script, results, http_errors, at):
    """Runs the script, appending to `results`; `at[0]` says what it is doing, for errors."""
    timeout = script.get("timeout", DEFAULT_TIMEOUT)
    async with connect(script, http_errors) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=timeout) as session:
            with anyio.fail_after(timeout):
                await session.initialize()
            for number, step in enumerate(script["steps"], 1):
                at[0] = f"step {number} {json.dumps(step)}"
                with anyio.fail_after(timeout):
                    results.append(await run_step(session, step, timeout))
            at[0] = "closing"


@asynccontextmanager
async def connect(script, http_errors):
    """The SDK's transport the script names: its (read, write) streams."""
    if script["transport"] == "stdio":
        command, *args = script["command"]
        params = StdioServerParameters(command=command, args=args, env=script.get("env"))
        async with stdio_client(params) as streams:
            yield streams
    elif script["transport"] == "http":
        headers = {}
        if "token" in script:
            headers["Authorization"] = f"Bearer {script['token']}"

        async def note_error(response):
            if response.status_code >= 400:
                request = response.request
                status = response.status_code
                http_errors.append(f"HTTP {status} from {request.method} {request.url}")

        # The SDK's default timeouts (a long read, for event streams); the script's `timeout`
        # is kept by each step.
        client = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(30, read=300),
            event_hooks={"response": [note_error]},
        )
        async with client, streamable_http_client(script["url"], http_client=client) as streams:
            yield streams
    else:
        raise ValueError(f"unknown transport {script['transport']!r} (stdio or http)")


def describe(error):
    """`Type: message` of the one exception that matters, out of anyio's exception groups."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, TimeoutError) and not str(error):
        return "TimeoutError: no answer within the script's timeout"
    return f"{type(error).__name__}: {error}"


class Kept(logging.Handler):
    """Keeps the messages the SDK logs, for the script's `warnings`."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def main():
    text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    results, http_errors, at = [], [], ["connecting"]
    warnings = Kept()
    logging.getLogger("mcp").addHandler(warnings)
    try:
        anyio.run(run, json.loads(text), results, http_errors, at)
    except BaseException as error:  # noqa: BLE001 — every failure is reported as JSON
        message = f"{describe(error)} ({'; '.join([*http_errors, 'at ' + at[0]])})"
        print(json.dumps({"error": message, "results": results, "warnings": warnings.messages}))
        sys.exit(2)
    print(json.dumps({"results": results, "warnings": warnings.messages}))


if __name__ == "__main__":
    main()
