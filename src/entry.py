"""Worker entry point: hand every request to the edge app, and Cron Triggers to the cleanup."""

from workers import Request, WorkerEntrypoint

from multillm_edge.app import handle
from multillm_edge.platform.bindings import WorkersPlatform, incoming, to_response
from multillm_edge.storage.cleanup import scheduled_cleanup


class Default(WorkerEntrypoint):
    async def fetch(self, request):
        if not isinstance(request, Request):
            request = Request(request)
        platform = WorkersPlatform(self.env, request, self.ctx)   # ctx: waitUntil (§4.1)
        return to_response(await handle(incoming(request), platform))

    async def scheduled(self, controller, env=None, ctx=None):
        # A Cron Trigger (wrangler.toml [triggers]); self.env is the SDK-wrapped env.
        await scheduled_cleanup(WorkersPlatform(self.env, None, ctx))
