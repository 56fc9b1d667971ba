"""The registry: sole owner of the DuckDB file, system of record for the loop, promotion policy."""
