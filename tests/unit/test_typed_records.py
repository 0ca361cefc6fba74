"""The consumers are generic in their records' key and value types, inferred from the
deserializers: what `mypy --strict` says of a typed user's code, and that the runtime class
behind it is still the one tuple class the decoder makes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import eosclient
from eosclient import ConsumerRecord, ReadCommittedConsumer
from eosclient._core import decode
from eosclient.aio import AsyncReadCommittedConsumer

ROOT = Path(__file__).resolve().parents[2]

# Each `reveal_type` line ends with what mypy must reveal; each line marked `error:` with a
# part of the error mypy must report there.
_USER_CODE = '''
import json
from typing import Any

from eosclient import ConsumerRecord, ExactlyOnceProcessor, ReadCommittedConsumer
from eosclient.aio import AsyncExactlyOnceProcessor, AsyncReadCommittedConsumer

plain = ReadCommittedConsumer("127.0.0.1:9092")
typed = ReadCommittedConsumer("127.0.0.1:9092", key_deserializer=bytes.decode,
                              value_deserializer=json.loads)
reveal_type(plain)  # eosclient.consumer.ReadCommittedConsumer[bytes, bytes]
reveal_type(typed)  # eosclient.consumer.ReadCommittedConsumer[str, Any]
reveal_type(plain.poll()[0].value)  # bytes | None
reveal_type(typed.poll()[0].key)  # str | None
reveal_type(typed.poll()[0].value)  # Any | None
for record in typed:
    reveal_type(record.key)  # str | None
reveal_type(next(typed.records()).key)  # str | None
with typed as consumer:
    reveal_type(consumer)  # eosclient.consumer.ReadCommittedConsumer[str, Any]
explicit = ReadCommittedConsumer(key_deserializer=None, value_deserializer=int)
reveal_type(explicit)  # eosclient.consumer.ReadCommittedConsumer[bytes, int]
configured: ReadCommittedConsumer[str, Any] = ReadCommittedConsumer(
    config={"key.deserializer": bytes.decode})
reveal_type(configured.poll()[0].key)  # str | None


def bare(record: ConsumerRecord) -> None:
    reveal_type(record.key)  # bytes | None


async def asynchronous() -> None:
    consumer = AsyncReadCommittedConsumer(value_deserializer=int)
    reveal_type(consumer)  # eosclient.aio.consumer.AsyncReadCommittedConsumer[bytes, int]
    reveal_type((await consumer.poll())[0].value)  # int | None
    async for record in consumer:
        reveal_type(record.value)  # int | None
    async for record in consumer.records():
        reveal_type(record.value)  # int | None
    for records in (await consumer.getmany()).values():
        reveal_type(records[0].value)  # int | None
    async with consumer as started:
        reveal_type(started)  # eosclient.aio.consumer.AsyncReadCommittedConsumer[bytes, int]


# The processors cannot see consumer_config's deserializers: a transform may say what they make.
def each(record: ConsumerRecord[str, Any]) -> list[tuple[str, str]]:
    return [(record.key or "", "seen")]


def batch(records: list[ConsumerRecord[str, Any]]) -> list[tuple[str, str]]:
    return [(record.key or "", "seen") for record in records]


ExactlyOnceProcessor(bootstrap_servers="127.0.0.1:9092", input_topics=["in"],
                     output_topic="out", group_id="g", transactional_id="t", fn=each,
                     consumer_config={"key.deserializer": bytes.decode})
AsyncExactlyOnceProcessor(bootstrap_servers="127.0.0.1:9092", input_topics=["in"],
                          output_topic="out", group_id="g", transactional_id="t",
                          batch_fn=batch, consumer_config={"key.deserializer": bytes.decode})

plain.poll()[0].value.decode()  # error: Item "None" of "bytes | None" has no attribute
typed.poll()[0].key.upper()  # error: Item "None" of "str | None" has no attribute
'''


def test_mypy_infers_the_record_types_from_the_deserializers(tmp_path: Path) -> None:
    # ConsumerRecord.value was `bytes | None` whatever the deserializer: docs/consumer.md's
    # json.loads example failed `mypy --strict`, and a typed user had to cast every record.
    source = tmp_path / "user.py"
    source.write_text(_USER_CODE)
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                             str(ROOT / "pyproject.toml"), "--strict", "--cache-dir",
                             str(tmp_path / ".mypy_cache"), str(source)],
                            cwd=tmp_path, capture_output=True, text=True, check=False,
                            env={**os.environ, "MYPYPATH": str(ROOT / "src")})
    said: dict[int, list[str]] = {}
    for line in result.stdout.splitlines():
        found = re.match(r".*?:(\d+): (note: Revealed type is \"(.*)\"|error: (.*))$", line)
        if found:
            said.setdefault(int(found[1]), []).append(found[3] or found[4])
    expected = {number: text.split("# ", 1)[1]
                for number, text in enumerate(_USER_CODE.splitlines(), 1) if "  # " in text}
    assert len(expected) == 19
    for number, want in expected.items():
        if want.startswith("error: "):
            assert any(want.removeprefix("error: ") in got for got in said.get(number, [])), (
                number, said.get(number), result.stdout)
        else:
            assert said.get(number) == [want], (number, said.get(number), result.stdout)
    assert set(said) == set(expected), result.stdout  # nothing else was reported


def test_the_type_parameters_cost_nothing_at_run_time() -> None:
    # The parameters are the type checker's: one class, made by the decoder's fast path
    # (tuple.__new__, no per-record work), subscriptable in annotations evaluated at run time.
    record = ConsumerRecord("orders", 0, 7, b"k", None, (), 1)
    assert type(record) is decode.ConsumerRecord and isinstance(record, tuple)
    assert ConsumerRecord[str, Any].__origin__ is ConsumerRecord  # type: ignore[attr-defined]
    assert ReadCommittedConsumer[str, Any].__origin__ is ReadCommittedConsumer  # type: ignore[attr-defined]
    assert AsyncReadCommittedConsumer[str, int].__origin__ is AsyncReadCommittedConsumer  # type: ignore[attr-defined]
    assert record._replace(value={"total": 1}).value == {"total": 1}
    assert eosclient.ConsumerRecord is decode.ConsumerRecord


def test_the_type_defaults_need_no_typing_extensions_at_run_time() -> None:
    # PEP 696 defaults come from typing_extensions for the type checker only: it is not a
    # dependency, and Python 3.11's TypeVar takes no default.
    code = ("import sys, eosclient, eosclient.aio\n"
            "print('typing_extensions' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True, env=env)
    assert out.stdout.strip() == "False", out.stderr
