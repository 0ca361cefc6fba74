"""eos_error_of: an eosclient error read back from the text Spark wraps it in."""

from __future__ import annotations

from eosclient.errors import FencedError, KafkaTimeoutError
from eosclient.spark import eos_error_of

TRACEBACK = """org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "...", line 3, in write
eosclient.errors.KafkaTimeoutError: EndTxn(commit) of 's-w0' not answered in time
During handling of the above exception, another exception occurred:
eosclient.errors.FencedError: EndTxn: PRODUCER_FENCED (90): There is a newer producer
"""


def test_the_innermost_eosclient_error_comes_back_with_its_class_and_code() -> None:
    error = eos_error_of(RuntimeError(TRACEBACK))
    assert isinstance(error, FencedError)
    assert (error.code, error.code_name) == (90, "PRODUCER_FENCED")
    assert str(error).startswith("EndTxn: PRODUCER_FENCED (90)")


def test_an_error_without_a_code() -> None:
    error = eos_error_of(RuntimeError(TRACEBACK.split("During", maxsplit=1)[0]))
    assert isinstance(error, KafkaTimeoutError) and error.code is None


def test_no_eosclient_error_and_one_raised_on_the_driver() -> None:
    assert eos_error_of(RuntimeError("eosclient.errors.NotAnError: x")) is None
    assert eos_error_of(ValueError("boom")) is None
    raised = FencedError("fenced")
    assert eos_error_of(raised) is raised
