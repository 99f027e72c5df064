"""A test-only Worker for the runner's isolate memory limit (docs/design.md §7.2, §9).

GET /wait?s=N     answers after N seconds (a request in flight while another grows the heap)
GET /grow?mib=N   holds N MiB in the isolate's heap while it waits a moment, then answers
GET /isolate      this isolate's identity: an id drawn on its first request
GET /d1           one D1 statement through the production adapter
"""

import asyncio
import json
from urllib.parse import parse_qs, urlsplit

from workers import Request, Response, WorkerEntrypoint

from multillm_edge.platform.bindings import WorkersPlatform

HELD = []
IDENTITY = []


def _json(doc, status=200):
    return Response(json.dumps(doc), status=status, headers={"content-type": "application/json"})


class Default(WorkerEntrypoint):
    async def fetch(self, request):
        if not isinstance(request, Request):
            request = Request(request)
        url = urlsplit(str(request.url))
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/wait":
            await asyncio.sleep(float(q.get("s", "1")))
            return _json({"waited": True})
        if url.path == "/grow":
            block = bytearray(int(q["mib"]) << 20)
            HELD.append(block)
            await asyncio.sleep(0.2)
            HELD.remove(block)
            return _json({"grown": len(block)})
        if url.path == "/isolate":
            if not IDENTITY:
                import random
                IDENTITY.append(random.getrandbits(64))
            return _json({"isolate": IDENTITY[0]})
        if url.path == "/d1":
            rows = await WorkersPlatform(self.env, request).db.all("SELECT 1 AS one", [])
            return _json({"rows": rows})
        return _json({"unknown": url.path}, 404)
