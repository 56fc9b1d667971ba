"""Project-level checks: service boundaries, generated code in sync, compose names every service, lint and types."""

from __future__ import annotations

import ast
import filecmp
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from services.console.stack import SERVICES

REPO = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_services_import_only_common_and_generated_code() -> None:
    offenders = []
    for service in SERVICES:
        for path in (REPO / "services" / service).rglob("*.py"):
            for module in _imported_modules(path):
                if module.startswith("services.") and not module.startswith(
                    ("services.common", f"services.{service}")
                ):
                    offenders.append(f"{path.relative_to(REPO)} imports {module}")
                if module.startswith("proto.") and not module.startswith("proto.gen"):
                    offenders.append(f"{path.relative_to(REPO)} imports {module}")
    assert offenders == []


def test_every_service_runs_as_a_module() -> None:
    for service in SERVICES:
        assert (REPO / "services" / service / "__main__.py").is_file(), service


def test_generated_protobuf_code_is_in_sync(tmp_path: Path) -> None:
    from proto.generate import generate

    generate(tmp_path)
    committed = REPO / "proto" / "gen"
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    stale = [str(rel) for rel in fresh if not filecmp.cmp(tmp_path / rel, committed / rel, shallow=False)]
    missing = [str(rel) for rel in fresh if not (committed / rel).exists()]
    assert (stale, missing) == ([], []), "run `make proto` and commit proto/gen"


def test_compose_parses_and_names_every_service() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    services = compose["services"]
    assert "nats" in services and "--config" in services["nats"]["command"]  # the rest: tests/test_compose.py
    for name in SERVICES:
        assert name in services, name
        assert services[name]["command"][-1] == f"services.{name}"
    for gpu_service in ("engine_host", "verifier"):
        devices = services[gpu_service]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["capabilities"] == ["gpu"]


def test_buf_style_enums_have_unspecified_zero() -> None:
    from proto.gen.polymorph.v1 import engine_service_pb2, events_pb2

    for module in (events_pb2, engine_service_pb2):
        for enum in module.DESCRIPTOR.enum_types_by_name.values():
            zero = enum.values_by_number[0].name
            assert zero.endswith("_UNSPECIFIED"), zero
            assert module.DESCRIPTOR.package == "polymorph.v1"


def _run_tool(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s, check=False)


def test_ruff_is_clean() -> None:
    result = _run_tool("ruff", "check", ".", timeout_s=120)
    assert result.returncode == 0, result.stdout + result.stderr


# mypy reads [tool.mypy] in pyproject.toml (files, excludes); a cold .mypy_cache takes ~20 s on 2 cores
@pytest.mark.timeout(660)
def test_mypy_is_clean() -> None:
    result = _run_tool("mypy", timeout_s=600)
    assert result.returncode == 0, result.stdout + result.stderr
