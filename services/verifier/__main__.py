"""`python -m services.verifier`: run the verifier as its own process."""

from services.common.runner import run_service
from services.verifier.service import build

if __name__ == "__main__":
    run_service(build)
