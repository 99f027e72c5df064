"""MultiLLM roleplay edge: reversible context paging for roleplay traffic."""
