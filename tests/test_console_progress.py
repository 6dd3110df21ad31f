"""Progress of long work when stdout is not a terminal: one line every N seconds with the
count, the rate and the time left (rmtl.console.progress)."""

from __future__ import annotations

import io

from rmtl.console import LineProgress, progress


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_line_every_n_seconds_with_count_rate_and_eta():
    clock, out = Clock(), io.StringIO()
    with LineProgress(every=10, stream=out, clock=clock) as bar:
        task = bar.add_task("render s.zarr", total=100, completed=20)
        clock.t += 4
        bar.advance(task, 8)  # 4 s since the last line: quiet
        assert out.getvalue() == ""
        clock.t += 6
        bar.advance(task, 12)  # 10 s: 20 more in 10 s
        clock.t += 3
        bar.advance(task, 10)  # quiet again
        clock.t += 20
        bar.advance(task, 50)  # the total is reached: the closing line
    lines = out.getvalue().splitlines()
    assert lines == ["render s.zarr: 40/100 (40%), 2/s, ETA 30 s",
                     "render s.zarr: 100/100 (100%), 2.42/s"]


def test_the_end_is_printed_at_once_and_once():
    clock, out = Clock(), io.StringIO()
    bar = LineProgress(every=1000, stream=out, clock=clock)
    task = bar.add_task("embed m", total=3)
    clock.t += 1
    for _ in range(3):
        bar.advance(task)
    clock.t += 5
    bar.advance(task, 0)
    assert out.getvalue().splitlines() == ["embed m: 3/3 (100%), 3/s"]


def test_without_a_terminal_progress_prints_lines_and_disabled_prints_nothing(capsys):
    bar = progress(True)  # pytest's captured stdout is not a terminal
    assert isinstance(bar, LineProgress)
    with bar:
        bar.advance(bar.add_task("render x", total=1))
    assert capsys.readouterr().out.startswith("render x: 1/1 (100%)")
    with progress(False) as quiet:
        quiet.advance(quiet.add_task("render y", total=1))
    assert capsys.readouterr().out == ""
