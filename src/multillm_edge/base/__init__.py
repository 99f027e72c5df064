"""The bottom layer: the edge's errors, JSON bytes, runtime-free HTTP and timing (stdlib only)."""
