"""The `polymorph` command's pieces: the embedded stack, the demo, live views and tables."""
