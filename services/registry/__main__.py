"""python -m services.registry"""

from services.common.runner import run_service
from services.registry.config import RegistryConfig
from services.registry.service import RegistryService


def main() -> None:
    run_service(lambda env, common: RegistryService(RegistryConfig.from_env(env, common)))


if __name__ == "__main__":
    main()
