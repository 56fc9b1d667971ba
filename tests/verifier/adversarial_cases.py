"""The candidate suites as data: cheats in adversarial/ and honest rewrites in honest/, one file each.

Each file starts with three header lines and a docstring:

    # expect: <stage>     the first stage that must fail it with every check on ("pass" if honest)
    # dynamic: <stage>    the stage that must fail it with the static (AST) checks switched off
                          ("a|b": either, where how many calls reach it depends on the machine's load)
    # family: <family>    which kind of attack it is ("honest" for the rewrites)

Parsing reads the text only; cheat files are never imported in the test process (several patch
torch or the engine at import time): they run only where the engine runs candidates, in sandboxes.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
ADVERSARIAL = HERE / "adversarial"
HONEST = HERE / "honest"
CANARY = ADVERSARIAL / "_canary"  # boundary_write_repo_canary.py writes here if a sandbox lets it reach the repo

# The stages in pipeline order: fast-tier benchmark, then the verifier's cascade, then promotion.
STAGES = ("static", "load", "benchmark", "captured", "random", "race", "end_to_end", "not_promoted")
_HEADER = re.compile(r"# (expect|dynamic|family): (\S+)\n")


@dataclass(frozen=True)
class SuiteFile:
    path: Path
    expect: str
    dynamic: str
    family: str
    doc: str
    slot: str | None  # SLOT = "...", or None for a region candidate
    region: str | None
    backend: str | None
    kernel_params: tuple[str, ...] | None  # when kernel is a plain top-level def

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def honest(self) -> bool:
        return self.path.parent == HONEST


def _constant(tree: ast.Module, name: str) -> str | None:
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return None


def _kernel_params(tree: ast.Module) -> tuple[str, ...] | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "kernel":
            return tuple(a.arg for a in (*node.args.posonlyargs, *node.args.args))
    return None


def defines_kernel(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == "kernel":
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "kernel" for t in node.targets):
            return True
    return False


def parse(path: Path) -> SuiteFile:
    """The header and the declarations of one suite file, from its text alone (nothing is imported)."""
    source = path.read_text()
    fields: dict[str, str] = {}
    offset = 0
    for key in ("expect", "dynamic", "family"):
        m = _HEADER.match(source, offset)
        assert m and m.group(1) == key, f"{path.name}: header line {len(fields) + 1} must be '# {key}: <value>'"
        fields[key] = m.group(2)
        offset = m.end()
    assert source[offset:].startswith('"""'), f"{path.name}: the docstring must follow the three header lines"
    tree = ast.parse(source, filename=str(path))
    doc = ast.get_docstring(tree) or ""
    return SuiteFile(path, fields["expect"], fields["dynamic"], fields["family"], doc, _constant(tree, "SLOT"),
                     _constant(tree, "REGION"), _constant(tree, "BACKEND"), _kernel_params(tree))


CHEAT_PATHS = sorted(ADVERSARIAL.glob("*.py"))
HONEST_PATHS = sorted(HONEST.glob("*.py"))
ALL_PATHS = CHEAT_PATHS + HONEST_PATHS




CHEAT_PATHS = sorted(ADVERSARIAL.glob("*.py"))
HONEST_PATHS = sorted(HONEST.glob("*.py"))
ALL_PATHS = CHEAT_PATHS + HONEST_PATHS


def stages(field: str) -> frozenset[str]:
    """The stages a header field allows ("benchmark|random": either)."""
    return frozenset(field.split("|"))


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    op: str  # the slot or region it is a candidate for
    expect: str
    dynamic: str
    family: str

    @property
    def expected(self) -> frozenset[str]:
        return stages(self.expect)

    @property
    def dynamic_stages(self) -> frozenset[str]:
        return stages(self.dynamic)


def load_cases(paths: list[Path]) -> list[Case]:
    out = []
    for path in paths:
        f = parse(path)
        op = f.slot or f.region
        assert op is not None, f"{path.name} declares neither SLOT nor REGION"
        out.append(Case(f.name, path.read_text(), op, f.expect, f.dynamic, f.family))
    return out


CASES = load_cases(CHEAT_PATHS)
HONEST_CASES = load_cases(HONEST_PATHS)
STATIC_CASES = [c for c in CASES if c.expect == "static"]
DYNAMIC_CASES = [c for c in CASES if c.expect != "static"]

HONEST_RMSNORM = (HONEST / "rmsnorm_functional.py").read_text()
