"""`python -m services.engine_host`: one engine host (fast + slow tier workers, gRPC, bus consumers)."""

from services.common.runner import run_service
from services.engine_host.service import build

if __name__ == "__main__":  # the guard matters: worker processes are spawned and re-import this module
    run_service(build)
