"""The only package services share: config, logging, bus, subjects, embedded nats-server, gRPC helper."""
