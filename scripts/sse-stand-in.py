#!/usr/bin/env python3
"""A provider stand-in for memory benchmarks: answers every request at once.

It reads each request's whole body (by Content-Length, or chunked), appends
one line to LOG naming the path, the body's size and its framing, and
answers with a short SSE response ("resumed", stop) in the dialect the path
asks for: Chat Completions (`…/chat/completions`), Anthropic Messages
(`…/messages`) or OpenAI Responses (anything else). It never inspects the
body, so it measures what Keel sends, not how a model would answer it.

Usage: sse-stand-in.py PORT LOG   (serves 127.0.0.1:PORT until killed)
"""

import json
import socket
import sys
import threading


def chat() -> bytes:
    chunks = [
        {"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "resumed"}}]},
        {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    return ("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n").encode()


def messages() -> bytes:
    events = [
        {"type": "message_start",
         "message": {"id": "m", "model": "m", "usage": {"input_tokens": 1, "output_tokens": 0}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "resumed"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
        {"type": "message_stop"},
    ]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def responses() -> bytes:
    item = {"type": "message", "id": "i", "role": "assistant",
            "content": [{"type": "output_text", "text": "resumed"}]}
    part = {"output_index": 0, "content_index": 0, "item_id": "i"}
    events = [
        {"type": "response.created", "response": {"id": "r", "model": "m"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
        {"type": "response.content_part.added", **part, "part": {"type": "output_text", "text": ""}},
        {"type": "response.output_text.delta", **part, "delta": "resumed"},
        {"type": "response.output_text.done", **part, "text": "resumed"},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed",
         "response": {"id": "r", "model": "m", "status": "completed", "output": [item],
                      "usage": {"input_tokens": 1, "output_tokens": 1}}},
    ]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def read_body(stream, headers: dict) -> tuple[int, str]:
    """Reads the body; returns its size and framing."""
    size = 0
    if "content-length" in headers:
        left = int(headers["content-length"])
        while left:
            chunk = stream.read(min(left, 1 << 20))
            if not chunk:
                break
            size += len(chunk)
            left -= len(chunk)
        return size, "content-length"
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            length = int(stream.readline().split(b";")[0], 16)
            if length == 0:
                stream.readline()
                return size, "chunked"
            size += len(stream.read(length))
            stream.readline()
    return 0, "none"


def serve(connection: socket.socket, log) -> None:
    stream = connection.makefile("rb")
    method, path, _ = stream.readline().decode().split(" ", 2)
    headers = {}
    while (line := stream.readline().decode()) not in ("\r\n", "\n", ""):
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = value.strip()
    size, framing = read_body(stream, headers)
    log.write(f"{method} {path} body={size} framing={framing}\n")
    log.flush()
    if path.endswith("/chat/completions"):
        body = chat()
    elif path.endswith("/messages"):
        body = messages()
    else:
        body = responses()
    head = ("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n\r\n")
    connection.sendall(head.encode() + body)
    connection.close()


def main() -> None:
    port, log = int(sys.argv[1]), open(sys.argv[2], "a", encoding="utf-8")
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(8)
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=serve, args=(connection, log), daemon=True).start()


if __name__ == "__main__":
    main()
