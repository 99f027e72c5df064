"""What a request does with storage (docs/architecture.md): access checks (`access`),
page bodies (`bodies`), storing a turn's pages (`storing`), forwarding to the origin
(`origin`). Routes parse, call these, and respond; a service takes typed inputs and
returns what it did."""
