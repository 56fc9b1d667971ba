"""Model zoo: gpt-fast style model files whose swappable ops go through the slot table."""
