"""The demo's verdict and exit status, and its progress display (no broker)."""

from __future__ import annotations

import io
from pathlib import Path

from eosclient._demo import DemoResult, Screen, exit_status, render
from eosclient._demo._copier import CopierCounts, counted
from eosclient._demo._report import FaultOutcome
from eosclient._processor import core
from eosclient.testing.checker import Seen, compare

INPUTS = [Seen(0, n, f"in/0/{n}") for n in range(4)]


def result(outputs: list[Seen], *, fired: bool = True) -> DemoResult:
    done = DemoResult("noida-db", 7, records=4, aborted_input=1, killed_open=1,
                      takeover=0.4, elapsed=3.0, work_dir="/somewhere")
    done.processors = [CopierCounts(2, 2, 2, 0), CopierCounts(2, 2, 2, 1)]
    done.faults = [FaultOutcome("EndTxn answer lost", fired)]
    done.check = compare(INPUTS, outputs, aborted=["in/0/9"])
    return done


def test_an_exact_copy_is_exactly_once_and_exits_0() -> None:
    ok = result([Seen(1, n, f"in/0/{n}") for n in range(4)])
    assert exit_status(ok) == 0
    text = render(ok)
    assert "result            exactly once" in text
    assert "aborted 2 (1 by the processor on an error, 1 left open by a kill)" in text
    assert "logs" not in text  # kept (and named) only when the run failed


def test_anomalies_fail_the_demo_and_are_shown() -> None:
    outputs = [Seen(1, n, f"in/0/{n}") for n in (0, 1, 1, 2)] + [Seen(1, 4, "in/0/9")]
    bad = result(outputs)
    assert exit_status(bad) == 1
    text = render(bad)
    assert "FAILED: the output is not an exactly-once copy" in text
    assert "lost 1, duplicated 1, aborted-read 1" in text
    assert "logs              /somewhere" in text


def test_a_fault_that_was_not_injected_fails_the_demo() -> None:
    quiet = result([Seen(1, n, f"in/0/{n}") for n in range(4)], fired=False)
    assert exit_status(quiet) == 1
    assert "NOT INJECTED: EndTxn answer lost" in render(quiet)


def test_a_run_that_stopped_early_fails_with_its_reason() -> None:
    broken = DemoResult("noida-db", 7, error="processor 2 exited with status 1")
    assert exit_status(broken) == 1
    assert "FAILED: processor 2 exited with status 1" in render(broken)


def test_progress_off_a_terminal_is_a_line_per_tenth() -> None:
    out = io.StringIO()
    screen = Screen(out, tty=False)
    for done in range(0, 1001, 10):
        screen.progress(done, 1000)
    screen.say("phase")
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == 12 and lines[-2].startswith("[" + "#" * 30 + "] 100%")


def test_progress_on_a_terminal_redraws_in_place_and_phase_lines_clear_it() -> None:
    out = io.StringIO()
    screen = Screen(out, tty=True)
    screen.progress(1000, 1000, "copied")
    screen.say("next phase")
    text = out.getvalue()
    assert text.startswith("\r[") and "1,000/1,000 records  copied" in text
    assert text.endswith("\rnext phase\n")


def test_quiet_shows_nothing() -> None:
    out = io.StringIO()
    screen = Screen(out, quiet=True, tty=True)
    screen.say("phase")
    screen.progress(5, 10)
    assert out.getvalue() == ""


def test_the_copier_counts_the_processors_own_log_lines() -> None:
    # The demo counts transactions from these messages of the "eosclient.processor" logger (as
    # `eosclient copy --log-level debug` prints them; the processor core logs them): a reworded
    # message must fail here, not hang the demo.
    source = Path(core.__file__).read_text()
    assert 'log.debug("committed %d in, %d out"' in source
    assert 'log.warning("transaction failed, aborting and rewinding: %r"' in source
    counts = CopierCounts()
    for line in ["2026-01-01 00:00:00,000 DEBUG eosclient.processor: committed 20 in, 40 out",
                 "2026-01-01 00:00:00,001 WARNING eosclient.processor: transaction failed, "
                 "aborting and rewinding: AbortableError('x')",
                 "records in 20, out 40, transactions committed 1, aborted 1, 9 records/s",
                 "2026-01-01 00:00:00,002 DEBUG eosclient.processor: committed 5 in, 5 out"]:
        counts = counted(counts, line)
    assert counts == CopierCounts(records_in=25, records_out=45, committed=2, aborted=1)
