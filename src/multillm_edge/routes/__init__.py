"""The handlers the routing table (app.ROUTES) names: `(Incoming, platform) -> Outgoing`."""
