"""Engine host: model zoo, slot table, candidate loader, isolated workers, timing, gRPC EngineService."""
