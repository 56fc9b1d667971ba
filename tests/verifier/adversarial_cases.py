"""The adversarial suite as data: each file in adversarial/ states the stage it must fail at."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ADVERSARIAL = Path(__file__).parent / "adversarial"


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    expect: str  # the stage it must fail at


def load_cases() -> list[Case]:
    cases = []
    for path in sorted(ADVERSARIAL.glob("*.py")):
        source = path.read_text()
        first = source.splitlines()[0]
        assert first.startswith("# expect: "), f"{path.name} must start with '# expect: <stage>'"
        cases.append(Case(path.stem, source, first.removeprefix("# expect: ").strip()))
    return cases


CASES = load_cases()
STATIC_CASES = [c for c in CASES if c.expect == "static"]
DYNAMIC_CASES = [c for c in CASES if c.expect != "static"]

HONEST_RMSNORM = '''"""Honest and faster: the fused rms_norm op instead of four separate ones."""
import torch.nn.functional as F

SLOT = "rmsnorm"
BACKEND = "torch"


def kernel(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)
'''
