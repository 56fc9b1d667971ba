"""Traffic profiler: ingest request records, keep windowed profiles, detect drift, emit shape buckets."""
