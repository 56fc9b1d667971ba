"""Input a real pipeline produces: late and out-of-order records, unsorted files, timestamps in the
wrong unit, empty files, malformed fields; and `polymorph profile` reading the documented variables."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from services.cli import main as cli_main
from services.traffic_profiler.detector import DriftDetector
from services.traffic_profiler.readers import ColumnMapping
from services.traffic_profiler.records import Record
from services.traffic_profiler.report import profile_command
from tests.traffic_profiler.test_detector import run, stream


def _ids(drifts: list) -> list[tuple[float, tuple[str, ...]]]:
    return [(d.t_s, tuple(sorted(c.metric for c in d.changes))) for d in drifts]


def test_one_record_35_minutes_late_is_counted_and_changes_nothing() -> None:
    records = stream(3000, seed=11, shift_at=2000)
    _, expected = run(records)
    assert expected, "the stream must hold a change (else this test proves nothing)"
    late = replace(records[100], arrival_s=records[100].arrival_s)  # re-sent 35 minutes later
    at = next(i for i, r in enumerate(records) if r.arrival_s > late.arrival_s + 35 * 60)
    detector, drifts = run([*records[:at], late, *records[at:]])
    assert detector.rewinds == 0 and detector.epoch == 0 and detector.late == 1
    assert _ids(drifts) == _ids(expected) and [d.drift_id for d in drifts] == [d.drift_id for d in expected]


def test_records_out_of_order_within_the_window_are_put_back_in_order() -> None:
    records = stream(3000, seed=12, shift_at=2000)
    _, expected = run(records)
    # a serving stack publishes a request when it finishes: arrivals come out of order by its latency
    rng = np.random.default_rng(0)
    finished = [r.arrival_s + float(rng.uniform(0, 20)) for r in records]
    shuffled = [records[i] for i in np.argsort(finished, kind="stable")]
    assert shuffled != records
    detector, drifts = run(shuffled)
    assert detector.reordered > 0 and detector.late == 0 and detector.rewinds == 0
    assert [d.drift_id for d in drifts] == [d.drift_id for d in expected]


def test_a_trace_replayed_again_is_a_new_epoch_and_its_first_records_are_not_lost() -> None:
    records = stream(1200, seed=13)
    detector = DriftDetector()
    for r in records:
        detector.observe(r)
    for r in records[:200]:
        detector.observe(r)
    detector.flush()
    assert detector.rewinds == 1 and detector.late == 0
    # every record of both passes reached the windows: the old epoch's last minute and the 50 records
    # that proved the replay included
    assert detector.records == len(records) + 200


def _csv(path: Path, rows: list[tuple[float, int, int]], header: str = "ts,prompt,output") -> Path:
    path.write_text(header + "\n" + "".join(f"{t!r},{p},{o}\n" for t, p, o in rows))
    return path


def _rows(records: list[Record], scale: float = 1.0) -> list[tuple[float, int, int]]:
    return [(round(r.arrival_s * scale, 3), r.prompt_tokens, r.output_tokens) for r in records]


MAPPING = "arrival=ts,prompt=prompt,output=output"


def _profile(capsys, path: Path, *extra: str) -> tuple[int, dict, str]:
    code = cli_main(["profile", str(path), "--json", "--columns", MAPPING, *extra])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if captured.out else {}), " ".join(captured.err.split())  # unwrapped


def test_a_shuffled_file_is_sorted_and_profiled_as_the_sorted_one(tmp_path: Path, capsys) -> None:
    records = stream(2400, seed=14, shift_at=1500)
    rows = _rows(records)
    code, sorted_report, _ = _profile(capsys, _csv(tmp_path / "sorted.csv", rows))
    assert code == 0 and sorted_report["changes"] and sorted_report["out_of_order"] == 0
    shuffled = [rows[i] for i in np.random.default_rng(1).permutation(len(rows))]
    code, report, err = _profile(capsys, _csv(tmp_path / "shuffled.csv", shuffled))
    assert code == 0 and report["out_of_order"] > len(rows) // 2 and report["late"] == 0
    assert report["changes"] == sorted_report["changes"] and report["records"] == len(rows)
    assert "sorted by arrival" in err


def test_a_shuffled_file_that_must_be_read_line_by_line_is_refused_with_the_reason(tmp_path: Path, capsys) -> None:
    rows = _rows(stream(1200, seed=15))
    shuffled = [rows[i] for i in np.random.default_rng(2).permutation(len(rows))]
    path = _csv(tmp_path / "shuffled-bad.csv", shuffled)
    path.write_text(path.read_text() + "12.5,not-a-number,3\n")  # one bad line: no whole-file fast path
    code, report, err = _profile(capsys, path)
    assert code == 2 and not report
    assert "not time-sorted" in err and "sort it by arrival" in err


def test_timestamps_in_another_unit_than_stated_are_warned_about(tmp_path: Path, capsys) -> None:
    sparse = stream(7200, rate=0.03, seed=16)  # two hours written in ms, read as seconds: 83 days
    code, report, err = _profile(capsys, _csv(tmp_path / "ms-as-s.csv", _rows(sparse, scale=1000.0)))
    assert code == 0 and "days" in report["warnings"][0] and "smaller unit" in err
    busy = stream(3600, rate=10.0, seed=16)  # an hour written in seconds, read as ms: 3.6 s
    code, report, err = _profile(capsys, _csv(tmp_path / "s-as-ms.csv", _rows(busy)), "--columns",
                                 "arrival=ts:ms,prompt=prompt,output=output")
    assert code == 0 and "requests/s" in report["warnings"][0] and "larger unit" in err
    code, report, _ = _profile(capsys, _csv(tmp_path / "right.csv", _rows(busy)))
    assert code == 0 and report["warnings"] == []


def test_a_file_without_records_is_an_error(tmp_path: Path, capsys) -> None:
    code, report, err = _profile(capsys, _csv(tmp_path / "header-only.csv", []))
    assert code == 2 and not report and "no records" in err
    bad = tmp_path / "all-bad.csv"
    bad.write_text("ts,prompt,output\n1.0,abc,3\n2.0,4,x\n")
    code, report, err = _profile(capsys, bad)
    assert code == 2 and "no records" in err and "2 malformed" in err


def test_a_malformed_field_is_named(tmp_path: Path, capsys) -> None:
    rows = _rows(stream(600, seed=17))
    path = _csv(tmp_path / "one-bad.csv", rows)
    path.write_text(path.read_text() + "700.0,12x,3\n701.0,5,\n")
    assert profile_command(path, json_out=True, plot=None, mapping=ColumnMapping.parse(MAPPING)) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["malformed"] == 2
    assert "field 'prompt'" in report["errors"][0] and "field 'output'" in report["errors"][1]


def test_profile_reads_the_documented_variables_and_flags_win(tmp_path: Path, capsys, monkeypatch) -> None:
    path = _csv(tmp_path / "t.csv", _rows(stream(600, seed=18)))
    monkeypatch.setenv("POLYMORPH_TRAFFIC_PROFILER_CACHE_BLOCKS", "1234")
    monkeypatch.setenv("POLYMORPH_TRAFFIC_PROFILER_WINDOW_S", "90")
    code, report, _ = _profile(capsys, path)
    assert code == 0 and report["config"]["cache_blocks"] == 1234 and report["config"]["window_s"] == 90
    code, report, _ = _profile(capsys, path, "--cache-blocks", "77", "--reorder", "5")
    assert report["config"]["cache_blocks"] == 77 and report["config"]["reorder_s"] == 5
    assert report["config"]["window_s"] == 90
