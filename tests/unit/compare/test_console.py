"""`rlvr compare`'s progress lines (rlvr.compare.console): each run's time, the phase's count and the
time left from the pace so far. A fake clock makes every number exact."""

from __future__ import annotations

import threading

import pytest

from rlvr.compare.console import Console, duration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_end_lines_give_the_run_time_the_count_and_the_time_left():
    clock, lines = Clock(), []
    console = Console("runs", 4, clock=clock, write=lines.append)
    console.skip()  # a reused run: 3 to run
    console.start("grpo seed 0")
    console.start("grpo seed 1")
    clock.now += 90
    console.end("grpo seed 0", ok=True)
    console.start("grpo seed 2")
    clock.now += 30
    console.end("grpo seed 1", ok=False)
    clock.now += 60
    console.end("grpo seed 2", ok=True)
    assert lines == [
        "[rlvr compare] start  grpo seed 0",
        "[rlvr compare] start  grpo seed 1",
        # 1 of 3 ended after 90 s: 2 left at 90 s each
        "[rlvr compare] done   grpo seed 0 in 1m30s (1 of 3 runs ended; 1m30s elapsed, about 3m00s to go)",
        "[rlvr compare] start  grpo seed 2",
        # 2 of 3 after 120 s: 1 left at 60 s
        "[rlvr compare] FAILED grpo seed 1 in 2m00s (2 of 3 runs ended; 2m00s elapsed, about 1m00s to go)",
        "[rlvr compare] done   grpo seed 2 in 1m30s (3 of 3 runs ended; 3m00s elapsed)",
    ]


def test_a_disabled_console_prints_nothing_but_still_counts():
    lines = []
    console = Console("warm starts", 2, enabled=False, clock=Clock(), write=lines.append)
    console.start("warm start seed 0")
    console.end("warm start seed 0", ok=True)
    assert lines == [] and console.ended == 1


def test_threads_ending_at_once_are_each_counted():
    console = Console("runs", 64, clock=Clock(), write=lambda line: None)
    workers = [threading.Thread(target=lambda i=i: (console.start(f"r{i}"), console.end(f"r{i}", ok=True)))
               for i in range(64)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert console.ended == 64


@pytest.mark.parametrize("seconds, text", [(0.4, "0s"), (42, "42s"), (60, "1m00s"), (185.2, "3m05s"),
                                           (3599, "59m59s"), (7620, "2h07m")])
def test_duration_reads_as_a_person_would(seconds, text):
    assert duration(seconds) == text


def test_the_default_writer_puts_each_line_whole_on_stdout(capsys):
    console = Console("runs", 2, clock=Clock())
    workers = [threading.Thread(target=lambda i=i: console.start(f"run {i}")) for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(capsys.readouterr().out.splitlines()) == ["[rlvr compare] start  run 0",
                                                            "[rlvr compare] start  run 1"]
