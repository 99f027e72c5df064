"""Development parts shared by the tests, the demo, the admin CLI and the benchmarks:
real local stand-ins (recording HTTP servers, the runner launcher), roleplay fixtures,
the sqlite executor, the admin statements and the inverse of a plan. Nothing here ships
in the Worker (which deploys src/ only)."""
