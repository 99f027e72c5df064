"""Worker entry point: hand every request to the edge app."""

from workers import Request, WorkerEntrypoint

from multillm_edge.app import handle
from multillm_edge.bindings import WorkersPlatform, incoming, to_response


class Default(WorkerEntrypoint):
    async def fetch(self, request):
        if not isinstance(request, Request):
            request = Request(request)
        platform = WorkersPlatform(self.env, request)
        return to_response(await handle(incoming(request), platform))
