"""Storage: every SQL statement (store), what a candidate's pages write (page_writes),
the scheduled cleanup."""
