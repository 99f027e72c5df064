"""The pure core: limits and settings, the request boundary, paging, compaction, page
signing, the response annotation. No SQL, no runtime: tested in CPython."""
