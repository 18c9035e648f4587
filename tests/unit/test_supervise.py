"""The supervisor: restart on exception with backoff, give up after N and call on_fatal."""

from __future__ import annotations

import asyncio
import threading

from streamiq.supervise import Supervisor


class Flaky:
    """A part's loop that raises ``fails`` times, then returns."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.runs = 0

    def __call__(self) -> None:
        self.runs += 1
        if self.runs <= self.fails:
            raise RuntimeError(f"boom {self.runs}")


def _supervisor(fatal: list[tuple[str, str]], restarts: int = 3) -> Supervisor:
    return Supervisor(on_fatal=lambda name, exc: fatal.append((name, str(exc))),
                      restarts=restarts, backoff_s=0.001, max_backoff_s=0.004)


def test_backoff_doubles_up_to_its_cap_then_gives_up() -> None:
    fatal: list[tuple[str, str]] = []
    sup = Supervisor(on_fatal=lambda n, e: fatal.append((n, str(e))), restarts=5,
                     backoff_s=0.1, max_backoff_s=1.0)
    exc = RuntimeError("x")
    delays = [sup._crashed("part", exc, started=float("inf")) for _ in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, None]
    assert fatal == [("part", "x")] and sup.failed == "part" and sup.faults == {"part": 6}


def test_a_run_that_lasted_resets_the_streak() -> None:
    sup = Supervisor(restarts=2, backoff_s=0.1, healthy_after_s=30)
    exc = RuntimeError("x")
    assert sup._crashed("p", exc, started=float("inf")) == 0.1
    assert sup._crashed("p", exc, started=float("inf")) == 0.2
    assert sup._crashed("p", exc, started=float("-inf")) == 0.1  # ran long: a fresh streak
    assert sup.failed is None and sup.faults == {"p": 3}


def test_thread_restarts_after_exceptions_and_recovers() -> None:
    fatal: list[tuple[str, str]] = []
    sup = _supervisor(fatal)
    run = Flaky(fails=2)
    t = sup.thread("part", run, threading.Event())
    t.start()
    t.join(10)
    assert not t.is_alive()
    assert run.runs == 3 and sup.faults == {"part": 2}
    assert fatal == [] and sup.failed is None and sup.down == set()


def test_thread_gives_up_after_n_restarts_and_calls_the_fatal_hook_once() -> None:
    fatal: list[tuple[str, str]] = []
    sup = _supervisor(fatal, restarts=3)
    run = Flaky(fails=100)
    t = sup.thread("materializer", run, threading.Event())
    t.start()
    t.join(10)
    assert not t.is_alive()
    assert run.runs == 4  # the first run and 3 restarts
    assert fatal == [("materializer", "boom 4")]
    assert sup.failed == "materializer" and sup.faults == {"materializer": 4}


def test_a_second_part_failing_for_good_does_not_call_the_hook_again() -> None:
    fatal: list[tuple[str, str]] = []
    sup = _supervisor(fatal, restarts=0)
    for name in ("a", "b"):
        t = sup.thread(name, Flaky(fails=1), threading.Event())
        t.start()
        t.join(10)
    assert fatal == [("a", "boom 1")] and sup.failed == "a"


def test_stop_ends_the_backoff_and_no_restart_happens_while_stopping() -> None:
    fatal: list[tuple[str, str]] = []
    sup = Supervisor(on_fatal=lambda n, e: fatal.append((n, str(e))), backoff_s=3600)
    stop = threading.Event()
    run = Flaky(fails=100)
    t = sup.thread("part", run, stop)
    t.start()
    while "part" not in sup.down:  # crashed once, now waiting an hour to restart
        t.join(0.01)
    stop.set()
    t.join(10)
    assert not t.is_alive() and run.runs == 1 and fatal == []

    sup.stopping = True  # a node shutting down: a crash is logged, not restarted, not fatal
    run2 = Flaky(fails=1)
    t2 = sup.thread("other", run2, threading.Event())
    t2.start()
    t2.join(10)
    assert run2.runs == 1 and fatal == [] and sup.failed is None


def test_task_restarts_then_gives_up() -> None:
    fatal: list[tuple[str, str]] = []

    async def main() -> tuple[int, int]:
        sup = _supervisor(fatal, restarts=2)
        ok, bad = Flaky(fails=1), Flaky(fails=100)

        async def run_ok() -> None:
            ok()

        async def run_bad() -> None:
            bad()

        await asyncio.wait_for(asyncio.gather(sup.task("sync", run_ok),
                                              sup.task("other", run_bad)), 10)
        assert sup.faults == {"sync": 1, "other": 3}
        return ok.runs, bad.runs

    assert asyncio.run(main()) == (2, 3)
    assert fatal == [("other", "boom 3")]


def test_a_cancelled_task_is_not_a_fault() -> None:
    fatal: list[tuple[str, str]] = []

    async def main() -> Supervisor:
        sup = _supervisor(fatal)

        started = asyncio.Event()

        async def forever() -> None:
            started.set()
            await asyncio.Event().wait()  # until cancelled

        task = sup.task("sync", forever)
        await started.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return sup

    sup = asyncio.run(main())
    assert sup.faults == {} and fatal == []
