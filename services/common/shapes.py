"""The one Shape of the project: a traffic bucket an engine runs at, and its text form.

`decode` runs one new token per sequence against `context` cached positions; `prefill` runs
`context` new tokens. The weight is the bucket's share of the traffic. No torch here: every service
(engine, verifier, agent pool, CLI) passes shapes around.
"""

from __future__ import annotations

from dataclasses import dataclass

PHASES = ("decode", "prefill")


class ShapeError(ValueError):
    """A shape that no engine can run (unknown phase, sizes below one, a weight that is not positive)."""


@dataclass(frozen=True)
class Shape:
    phase: str  # "decode" or "prefill"
    batch: int
    context: int  # attended positions T (decode: cached context; prefill: prompt length)
    weight: float = 1.0

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ShapeError(f"unknown phase {self.phase!r}; expected one of {', '.join(PHASES)}")
        if self.batch < 1 or self.context < 1:
            raise ShapeError(f"{self.phase} shape needs batch ≥ 1 and context ≥ 1, got {self.batch}x{self.context}")
        if not self.weight > 0:
            raise ShapeError(f"shape weight must be positive, got {self.weight}")

    @property
    def new_tokens(self) -> int:
        """S: tokens computed per sequence in one step."""
        return 1 if self.phase == "decode" else self.context

    @property
    def key(self) -> str:
        return f"{self.phase}:b{self.batch}:t{self.context}"

    def __str__(self) -> str:
        return f"{self.phase}:{self.batch}x{self.context}"


def parse_shapes(text: str) -> tuple[Shape, ...]:
    """"decode:1:256:0.4,prefill:1x61" → shapes. Each item is phase:batch:context[:weight] or
    phase:BATCHxCONTEXT; raises ShapeError naming the bad item."""
    shapes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        fields = item.split(":")
        try:
            if len(fields) == 2:
                batch, context = (int(v) for v in fields[1].lower().split("x"))
                weight = 1.0
            else:
                batch, context = int(fields[1]), int(fields[2])
                weight = float(fields[3]) if len(fields) > 3 else 1.0
            if len(fields) > 4:
                raise ValueError("too many fields")
            shapes.append(Shape(fields[0], batch, context, weight))
        except (IndexError, ValueError) as exc:
            raise ShapeError(f"bad shape {item!r}: expected phase:batch:context[:weight] "
                             f"or phase:BATCHxCONTEXT ({exc})") from exc
    return tuple(shapes)
