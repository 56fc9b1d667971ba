"""Replace one named section of BENCHMARKS.md, between `<!-- begin:NAME -->` and `<!-- end:NAME -->`."""

from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def update_section(name: str, text: str, path: Path = BENCHMARKS) -> None:
    begin, end = f"<!-- begin:{name} -->", f"<!-- end:{name} -->"
    block = f"{begin}\n{text.strip()}\n{end}"
    current = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        _, tail = rest.split(end, 1)
        path.write_text(head + block + tail)
    else:
        path.write_text(current.rstrip() + "\n\n" + block + "\n")
