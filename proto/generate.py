"""Regenerate proto/gen from proto/polymorph (run: python -m proto.generate).

Imports between generated modules are rewritten to `proto.gen.polymorph.v1`, so the generated code
is an ordinary subpackage of `proto` and needs no sys.path tricks.
"""

from __future__ import annotations

import pathlib
import sys

from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent
SOURCES = sorted((ROOT / "polymorph").rglob("*.proto"))


def generate(out_dir: pathlib.Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(p.relative_to(ROOT)) for p in SOURCES],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for pkg in (out_dir, out_dir / "polymorph", out_dir / "polymorph" / "v1"):
        (pkg / "__init__.py").touch()
    # protoc writes imports relative to the include root; our package lives at proto.gen.
    for path in (out_dir / "polymorph" / "v1").glob("*.py*"):
        text = path.read_text()
        path.write_text(text.replace("from polymorph.v1 import", "from proto.gen.polymorph.v1 import"))


if __name__ == "__main__":
    generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "gen")
