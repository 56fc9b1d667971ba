"""Agent pool: campaigns of search and LLM agents proposing kernel candidates from the kernel library."""
