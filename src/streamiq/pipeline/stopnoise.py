"""Spark's errors that a stop the pipeline asked for provokes, dropped; every other kept.

Stopping a real-time query kills its long-lived tasks. Each reader of a streaming
shuffle then sees its connection to a writer close before the writer said "done", and
Spark logs ``ERROR ErrorNotifier: A fatal error has occurred`` with that
``SparkException`` ("Connection to streaming shuffle writer N closed before
termination") and its stack: a dozen lines per reader, two dozen blocks for the
warm-up's queries. They are logged from Netty's threads when the channel's close is
handled, after ``StreamingQuery.stop()`` has returned, so turning Spark's log levels
off around the stop and back on after raced with them: some starts printed ~330 lines
of "fatal error" before "all parts ready". A writer task killed while it waited on the
shuffle logs ``ERROR Utils: Aborting task`` (an ``InterruptedException``) and
``ERROR DataWritingSparkTask: Aborting commit for partition N``, and a reader task
``ERROR Utils: Aborting task`` with the closed writer's error: CI starts printed 12
and 2 such lines. A reader task that fails on the closed writer before its own kill
reaches it is reported by the executor as ``ERROR Executor: Exception in task N in
stage M`` with that error (one CI start printed it after the warm-up's stop).

So a log4j2 filter is installed for the whole run (compiled in Spark's JVM by Janino,
which Spark ships for its own code generation: no jar of ours, no ``javac``). It drops
an event only when all hold: the filter is armed (the pipeline asked for a stop and its
queries have not all been started again), the logger and what it logged (the
throwable, else the message) are one of :data:`NOISE`. The same error while nothing is
being stopped (a writer that died) still prints, and so does every other error during
a stop.

Settings streamiq documents may make other lines routine: :data:`EXPECTED_WARNINGS`
are dropped at any level by a plain log4j2 ``RegexFilter`` (:func:`drop_expected`).
Both filters are installed once per JVM (a process's SparkSessions share Spark's JVM).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["EXPECTED_WARNINGS", "NOISE", "StopNoise", "drop_expected", "stop_noise"]

T = TypeVar("T")

log = logging.getLogger("streamiq.pipeline")

#: a streaming shuffle reader's error when its writer's connection closed
_CLOSED_WRITER = (r"org\.apache\.spark\.SparkException: Connection to streaming shuffle "
                  r"writer \d+ closed before termination\b.*")

#: (logger, a regex over what it logged) of each error a requested stop provokes; what it
#: logged is the throwable as ``<class>: <message>`` or, without one, the message. Seen
#: at stops: the reader's ErrorNotifier, its task's ``Aborting task`` and the executor's
#: report of that task's failure (the writer closed before the reader's kill arrived);
#: the killed writer task's ``Aborting task`` (interrupted while it waited on the
#: streaming shuffle) and its commit's abort
NOISE: tuple[tuple[str, str], ...] = (
    ("org.apache.spark.util.ErrorNotifier", _CLOSED_WRITER),
    ("org.apache.spark.executor.Executor", _CLOSED_WRITER),
    ("org.apache.spark.util.Utils",
     rf"(?:java\.lang\.InterruptedException: .*|{_CLOSED_WRITER})"),
    ("org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
     r"Abort(?:ing|ed) commit for partition \d+ \(task \d+, attempt \d+, stage [\d.]+\)"),
)

_CLASS = "streamiq.log.StopNoiseFilter"
_SOURCE = """
package streamiq.log;

import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Pattern;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.Marker;
import org.apache.logging.log4j.core.Filter;
import org.apache.logging.log4j.core.LogEvent;
import org.apache.logging.log4j.core.Logger;
import org.apache.logging.log4j.core.filter.AbstractFilter;
import org.apache.logging.log4j.message.Message;

public class StopNoiseFilter extends AbstractFilter {
    private final Pattern noise;  // "<logger> <throwable's message>"
    private volatile boolean armed;
    private final AtomicLong dropped = new AtomicLong();

    public StopNoiseFilter(String noise) {
        super(Filter.Result.NEUTRAL, Filter.Result.NEUTRAL);
        this.noise = Pattern.compile(noise);
    }

    public static StopNoiseFilter create(String noise) { return new StopNoiseFilter(noise); }

    public void arm(boolean on) { armed = on; }
    public boolean armed() { return armed; }
    public long dropped() { return dropped.get(); }

    public Filter.Result check(String logger, Level level, String message, Throwable t) {
        if (!armed || level != Level.ERROR || logger == null) {
            return Filter.Result.NEUTRAL;
        }
        String what = t != null ? t.getClass().getName() + ": " + t.getMessage() : message;
        if (what == null || !noise.matcher(logger + " " + what).matches()) {
            return Filter.Result.NEUTRAL;
        }
        dropped.incrementAndGet();
        return Filter.Result.DENY;
    }

    public Filter.Result filter(Logger l, Level level, Marker m, Object msg, Throwable t) {
        return check(l.getName(), level, msg == null ? null : msg.toString(), t);
    }

    public Filter.Result filter(Logger l, Level level, Marker m, Message msg, Throwable t) {
        return check(l.getName(), level, msg == null ? null : msg.getFormattedMessage(), t);
    }

    public Filter.Result filter(Logger l, Level level, Marker m, String msg, Object[] params) {
        return check(l.getName(), level, msg, null);
    }

    public Filter.Result filter(LogEvent e) {
        Message msg = e.getMessage();
        return check(e.getLoggerName(), e.getLevel(),
                     msg == null ? null : msg.getFormattedMessage(), e.getThrown());
    }
}
"""

#: log lines (a regex over the whole formatted message) that settings streamiq documents
#: make routine, dropped at any level: with ``modes.SEND_EACH_ROW`` every streaming
#: shuffle writer warns (up to once a second) that its rows are "larger than the block
#: size 1" (any other block size still warns)
EXPECTED_WARNINGS = (r"(?s).*\bRow size \d+ is larger than the block size 1\. .*",)

#: what is installed in which JVM: by filter and py4j gateway
_INSTALLED: dict[tuple[str, int], Any] = {}


def _pattern() -> str:
    return "|".join(f"(?:{re.escape(logger)} {message})" for logger, message in NOISE)


class StopNoise:
    """The run's filter in Spark's JVM: :meth:`arm` before stopping queries of ours,
    :meth:`disarm` once the pipeline's queries all run again (a stop's last errors
    are logged some time after the stop returned: the window ends on that condition,
    not after a delay)."""

    def __init__(self, handle: Any) -> None:
        self._filter = handle  # None: not installed

    def arm(self) -> None:
        if self._filter is not None:
            self._filter.arm(True)

    def disarm(self) -> None:
        if self._filter is not None:
            self._filter.arm(False)

    @property
    def armed(self) -> bool:
        return self._filter is not None and bool(self._filter.armed())

    @property
    def dropped(self) -> int:
        """Errors dropped so far in this JVM."""
        return 0 if self._filter is None else int(self._filter.dropped())


def stop_noise(spark: SparkSession) -> StopNoise:
    """The JVM's filter, compiled and added to log4j2's configuration on first use (if
    that fails, a warning and a filter that drops nothing: the start goes on)."""
    return _once("stop", lambda gateway: StopNoise(_installed(gateway, spark)))


def drop_expected(spark: SparkSession) -> None:
    """:data:`EXPECTED_WARNINGS` dropped by log4j2 filters, once per JVM."""
    _once("expected", lambda gateway: _drop(spark.sparkContext._jvm))


def _once(kind: str, install: Callable[[Any], T]) -> T:
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    assert gateway is not None  # a session is running
    if (kind, id(gateway)) not in _INSTALLED:
        _INSTALLED[kind, id(gateway)] = install(gateway)
    result: T = _INSTALLED[kind, id(gateway)]
    return result


def _installed(gateway: Any, spark: SparkSession) -> Any:
    try:
        return _install(gateway, spark.sparkContext._jvm)
    except Exception as exc:  # e.g. another log4j2 implementation than core's
        log.warning("Spark's errors at a requested stop will print (no filter: %s)", exc)
        return None


def _install(gateway: Any, jvm: Any) -> Any:
    compiler = jvm.org.codehaus.janino.SimpleCompiler()
    compiler.cook(_SOURCE)
    cls = compiler.getClassLoader().loadClass(_CLASS)
    create = cls.getMethod("create", _array(gateway, jvm.java.lang.Class,
                                            cls.forName("java.lang.String")))
    return _add(jvm, create.invoke(None, _array(gateway, jvm.java.lang.Object, _pattern())))


def _drop(jvm: Any) -> bool:
    """Whether the filters went in (if not, a warning: the start goes on)."""
    try:
        result = getattr(jvm, "org.apache.logging.log4j.core.Filter$Result")
        for regex in EXPECTED_WARNINGS:
            _add(jvm, jvm.org.apache.logging.log4j.core.filter.RegexFilter.createFilter(
                regex, None, False, result.DENY, result.NEUTRAL))
    except Exception as exc:  # e.g. another log4j2 implementation than core's
        log.warning("Spark's routine warnings of documented settings will print (no "
                    "filter: %s)", exc)
        return False
    return True


def _add(jvm: Any, handle: Any) -> Any:
    """``handle``, a log4j2 filter, started and added to the whole configuration."""
    handle.start()
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    context.getConfiguration().addFilter(handle)
    context.updateLoggers()
    return handle


def _array(gateway: Any, kind: Any, *items: Any) -> Any:
    """A Java array of ``items`` (py4j passes a Python list as a java.util.List)."""
    out = gateway.new_array(kind, len(items))
    for i, item in enumerate(items):
        out[i] = item
    return out
