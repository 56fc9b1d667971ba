"""A relative data directory (the default `.polymorph`, what `make demo` uses) becomes absolute where it
is read: sandboxes confine themselves to paths under it from another working directory."""

from __future__ import annotations

from pathlib import Path

from services.common.config import CommonSettings, Env
from services.console.stack import Stack


def test_a_relative_data_dir_is_made_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert CommonSettings.from_env(Env({})).data_dir == tmp_path / ".polymorph"
    assert CommonSettings.from_env(Env({"POLYMORPH_DATA_DIR": "state"})).data_dir == tmp_path / "state"
    assert Stack(Path(".polymorph/demo")).data_dir == tmp_path / ".polymorph" / "demo"
