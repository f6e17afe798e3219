"""A scripted SGLang-shaped HTTP server on 127.0.0.1 for the load generator's tests: /generate and the OpenAI routes
stream tokens at set intervals, /server_info and /v1/models answer; faults (an HTTP error, a closed stream, a hang)
on demand. A test double of the server's wire behaviour only (the rows of real SGLang are held in
tests/unit/loadgen/test_real_rows.py)."""
import asyncio
import json
import threading


class FixtureServer:
    """SGLang-shaped loopback server. Knobs: ttft, itl (s), tokens_per_chunk, fault, accept_length, reply (a
    function of the prompt's words giving the output text: one character per token, "t" past its end)."""

    def __init__(self, ttft=0.0, itl=0.0, tokens_per_chunk=1, fault=None, accept_length=None, reply=None):
        self.reply = reply
        self.ttft = ttft
        self.itl = itl
        self.tokens_per_chunk = tokens_per_chunk
        self.fault = fault
        self.accept_length = accept_length
        self.requests = []
        self.connections = 0  # TCP connections accepted (the client's connection mode shows here)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.port = None

    def _run(self):
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()
        server.close()
        pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for task in pending:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    def __enter__(self):
        self.thread.start()
        assert self.ready.wait(5)
        return self

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    async def _handle(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ")
                headers = {k.lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:] if l)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                await self._respond(method, path, headers, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _respond(self, method, path, headers, body, writer):
        if method == "GET" and path in ("/health", "/health_generate", "/v1/models"):
            code = 503 if self.fault == "warming" and path != "/v1/models" else 200
            data = json.dumps({"object": "list", "data": [{"id": "fixture-model"}]} if path == "/v1/models"
                              else {}).encode()
            writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                         % (code, len(data)) + data)
            return
        if method == "GET" and path == "/server_info":
            states = [{"avg_spec_accept_length": self.accept_length}] if self.accept_length else []
            data = json.dumps({"internal_states": states}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                         % len(data) + data)
            return
        req = json.loads(body)
        self.requests.append((path, req, headers))
        if self.fault == "http500":
            data = b'{"error": "boom"}'
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
            return
        if self.fault == "hang":
            await asyncio.sleep(3600)
        if path == "/generate":
            n = req["sampling_params"]["max_new_tokens"]
            prompt = req.get("input_ids") or req.get("text", "").split()
        else:
            n = req["max_tokens"]
            prompt = req.get("prompt") or " ".join(m["content"] for m in req.get("messages", [])).split()
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        steps = 0
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        def chunk(obj):
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))

        await asyncio.sleep(self.ttft)
        sent = 0
        text = ""
        while sent < n:
            step = 1 if sent == 0 else min(self.tokens_per_chunk, n - sent)
            if sent:
                await asyncio.sleep(self.itl)
            sent += step
            steps += 1
            piece = "t" * step
            if self.reply is not None:
                full = self.reply(prompt if isinstance(prompt, list) else str(prompt).split())
                piece = (full[sent - step:sent] + piece)[:step]
            text += piece
            if self.fault == "close_midway" and sent > n // 2:
                writer.transport.abort()
                return
            if path == "/generate":
                meta = {"completion_tokens": sent, "prompt_tokens": prompt_tokens, "finish_reason": None}
                if sent == n:  # real SGLang: the finished chunk has the finish reason and, speculative, spec_*
                    meta["finish_reason"] = {"type": "length", "length": n}
                    if self.tokens_per_chunk > 1 and steps > 1:
                        verify = steps - 1
                        meta.update(spec_verify_ct=verify, spec_accepted_drafts=n - 1 - verify,
                                    spec_proposed_drafts=verify * (self.tokens_per_chunk - 1),
                                    spec_accept_length=n / verify)
                chunk({"text": text, "meta_info": meta, "index": 0})
            elif path == "/v1/completions":
                chunk({"choices": [{"index": 0, "text": piece}]})
            else:
                chunk({"choices": [{"index": 0, "delta": {"content": piece}}]})
            await writer.drain()
        if path != "/generate":
            chunk({"choices": [], "usage": {"completion_tokens": n, "prompt_tokens": prompt_tokens}})
        chunk(b"[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
