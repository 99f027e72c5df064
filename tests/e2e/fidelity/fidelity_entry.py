"""A test-only Worker that drives the platform layer against the runner's real bindings.

It imports the production adapters (`multillm_edge.platform.bindings`) so what passes here is
what the edge itself does with D1 and R2.
"""

import json
from urllib.parse import parse_qs, urlsplit

from workers import Request, Response, WorkerEntrypoint

from multillm_edge.platform.bindings import WorkersPlatform
from multillm_edge.base.errors import StorageError


def _json(doc, status=200):
    return Response(json.dumps(doc), status=status, headers={"content-type": "application/json"})


class Default(WorkerEntrypoint):
    async def fetch(self, request):
        if not isinstance(request, Request):
            request = Request(request)
        platform = WorkersPlatform(self.env, request, self.ctx)
        url = urlsplit(str(request.url))
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/sql":
            doc = json.loads(await platform.read_body(1 << 20))
            try:
                if doc.get("run"):
                    return _json({"changes": await platform.db.run(doc["sql"], doc.get("params", []))})
                return _json({"rows": await platform.db.all(doc["sql"], doc.get("params", []))})
            except StorageError as e:
                return _json({"storage_error": str(e)}, 503)
        if url.path == "/r2" and request.method == "PUT":
            await platform.page_bodies.put(q["key"], await platform.read_body(8 << 20))
            return _json({"stored": True})
        if url.path == "/r2" and request.method == "DELETE":
            await platform.page_bodies.delete(q["key"])
            return _json({"deleted": True})
        if url.path == "/r2" and request.method == "GET":
            if "offset" in q:
                data = await platform.page_bodies.get(q["key"], int(q["offset"]), int(q["length"]))
            else:
                data = await platform.page_bodies.get(q["key"])
            if data is None:
                return _json({"missing": True}, 404)
            return Response(data, headers={"content-type": "application/octet-stream"})
        if url.path == "/fetch":  # an outbound fetch with exactly these headers
            doc = json.loads(await platform.read_body(1 << 20))
            answer = await platform.fetch(doc["url"], doc.get("method", "POST"),
                                          [tuple(h) for h in doc["headers"]],
                                          doc["body"].encode() if "body" in doc else None)
            return _json({"status": answer.status, "body": (await answer.read()).decode()})
        if url.path == "/wait":  # work after the answer (ctx.waitUntil): a D1 write, or a failure
            platform.wait_until(_later(platform, q.get("tag", ""), q.get("fail") == "1"))
            return _json({"answered": True})
        return _json({"unknown": url.path}, 404)


async def _later(platform, tag: str, fail: bool):
    import asyncio
    await asyncio.sleep(0.3)
    if fail:
        raise ValueError("secret text that must not be logged")
    await platform.db.run("CREATE TABLE IF NOT EXISTS fidelity_waits (tag TEXT)", [])
    await platform.db.run("INSERT INTO fidelity_waits (tag) VALUES (?1)", [tag])
