"""A benchmark run of bounded sections: each runs only if the time it needs is left, an error is kept
(not raised) so later sections still run, and the results file is rewritten after every section, so a
run cut short keeps what it measured."""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


class SectionedRun:
    def __init__(self, result_file: Path, budget_s: float, res: dict[str, Any]) -> None:
        self.result_file = result_file
        self.began = time.perf_counter()
        self.deadline = self.began + budget_s
        self.res = res
        res.setdefault("errors", {})
        res.setdefault("sections_s", {})

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def save(self) -> None:
        self.res["meta"]["elapsed_s"] = round(time.perf_counter() - self.began, 1)
        tmp = self.result_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.res, indent=1, default=str))
        tmp.replace(self.result_file)

    def section(self, name: str, fn: Callable[[], None], need_s: float) -> None:
        if self.left() < need_s:
            self.res["errors"][name] = f"skipped: {self.left():.0f} s left, needs ~{need_s:.0f}"
            print(f"## {name}: skipped ({self.left():.0f} s left)", flush=True)
            self.save()
            return
        print(f"## {name} ({self.left():.0f} s left)", flush=True)
        t = time.perf_counter()
        try:
            fn()
        except Exception as exc:
            self.res["errors"][name] = "".join(traceback.format_exception(exc))[-3000:]
            print(self.res["errors"][name], flush=True)
        self.res["sections_s"][name] = round(time.perf_counter() - t, 1)
        self.save()
