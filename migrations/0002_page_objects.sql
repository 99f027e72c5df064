-- One R2 object per storing request, lazy refresh, lifecycle-safe bodies (docs/design.md §4, §5.9).

-- A page is the byte range [r2_offset, r2_offset + byte_length) of the object r2_key.
-- Rows written before this migration hold a whole per-page object: offset 0.
ALTER TABLE context_pages ADD COLUMN r2_offset INTEGER NOT NULL DEFAULT 0;

-- When the page's body was last written to R2 (Unix seconds). A reused page whose body
-- is older than PAGE_REWRITE_AFTER_SECONDS is written again before the bucket's
-- lifecycle rule can delete it. 0 = unknown (rows from before this migration, or
-- written by another writer): such a body is rewritten the next time its page is reused.
ALTER TABLE context_pages ADD COLUMN body_written_at INTEGER NOT NULL DEFAULT 0;
