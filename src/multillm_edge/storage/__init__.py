"""Storage: every SQL statement (store), the scheduled cleanup."""
