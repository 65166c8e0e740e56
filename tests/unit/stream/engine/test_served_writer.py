"""The compiled served-row writer (app/stream/engine/_served.c) against msgspec, byte for byte."""

from __future__ import annotations

import random
import struct
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.features.declaration import FEATURE_NAMES
from app.kafka.records import SourceMessage
from app.stream.engine.pipeline import Scored
from app.stream.engine.served import (
    decode_served,
    encode_served,
    encode_served_batch,
    encode_served_batch_msgspec,
)
from app.transactions.contract import Transaction

_served = pytest.importorskip("app.stream.engine._served")
WIDTH = len(FEATURE_NAMES)
EDGE_FLOATS = [
    0.0, -0.0, 1.0, -1.0, 0.1, 1 / 3, 2 / 3, 4325.0, 4325.5, 1e-5, 1e-4, 1.5e-5, 1e-7, 9.999e-5,
    1e15, 1e16, 1e17, 123456789012345678.0, 9007199254740993.0, 1e22, 1e21, 1e300, 1e-300,
    5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.30000000000000004,
    float("nan"), float("inf"), float("-inf"), 2.0 ** 63, 2.0 ** 64, -2.0 ** 53, 12345.678,
]


def _random_doubles(n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        out.append(struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0])
        # and values features take: means and shares of integer amounts
        out.append(rng.randrange(1, 10**12) / rng.randrange(1, 400))
    return out


def test_a_float_is_written_as_msgspec_writes_it() -> None:
    for x in EDGE_FLOATS + _random_doubles(100_000, seed=7):
        assert _served.write_float(x) == msgspec.json.encode(x), x


def _item(txn_id: str, card_id: str, features: tuple[Any, ...], *, redelivered: bool = False,
          label_cut_ms: int | None = None, partition: int = 3, offset: int = 17) -> Scored:
    txn = Transaction(txn_id, card_id, 1_767_225_600_000, 100, "EUR", "m1", 5411, "FR", "pos")
    return Scored(SourceMessage("transactions", partition, offset, None, b""), txn, features,
                  redelivered, label_cut_ms)


_number = (st.integers(min_value=-(2**63), max_value=2**63 - 1)
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.sampled_from(EDGE_FLOATS))
_features = st.lists(_number, min_size=WIDTH, max_size=WIDTH).map(tuple)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(_features, st.none() | st.floats(), st.booleans(),
                               st.none() | st.integers(min_value=0, max_value=2**62),
                               st.integers(min_value=0, max_value=2**40)), min_size=1,
                     max_size=6),
       version=st.none() | st.text(max_size=12))
def test_the_compiled_rows_are_msgspec_rows(rows: list[tuple[Any, ...]],
                                            version: str | None) -> None:
    """Whatever the numbers (ints to 64 bits, every float, None) and the model version (quotes
    and non-ASCII escaped by msgspec once per batch), every row is msgspec's, byte for byte."""
    items = [_item(f"t-{i}", "c.1:_x", features, redelivered=redelivered, label_cut_ms=cut,
                   offset=offset)
             for i, (features, _, redelivered, cut, offset) in enumerate(rows)]
    scores = [score for _, score, *_ in rows]
    expected = encode_served_batch_msgspec(items, scores, version)
    compiled = _served.encode_rows(items, scores, msgspec.json.encode(version))
    assert compiled == expected
    assert encode_served_batch(items, scores, version) == expected


def test_a_row_is_encode_served_and_reads_back() -> None:
    features = tuple(range(WIDTH - 2)) + (0.5, 1e-7)
    item = _item("t1", "c1", features, redelivered=True, label_cut_ms=99)
    [row] = _served.encode_rows([item], [0.25], b'"lgbm-x"')
    assert row == encode_served("t1", "c1", item.txn.ts_ms, 3, 17, features, 0.25, "lgbm-x", True,
                                99)
    back = decode_served(row)
    assert list(back.features.values()) == list(features) and back.redelivered


@pytest.mark.parametrize("change", [
    {"txn_id": 't"1'}, {"card_id": "c\\1"}, {"card_id": "cé"}, {"card_id": "c\x01"},
    {"features": (2**63,) + (0,) * (WIDTH - 1)}, {"features": (True,) + (0,) * (WIDTH - 1)},
    {"features": (0,) * (WIDTH - 1)}, {"features": [0] * WIDTH},
    {"features": ("1",) + (0,) * (WIDTH - 1)},
])
def test_what_the_writer_does_not_handle_goes_to_msgspec(change: dict[str, Any]) -> None:
    """A string that needs escaping, a value of another type or width: None from the writer,
    and the batch is msgspec's (or msgspec's own error, a vector of another width)."""
    args = {"txn_id": "t1", "card_id": "c1", "features": (1,) * WIDTH, **change}
    items = [_item("t0", "c0", (0,) * WIDTH), _item(args["txn_id"], args["card_id"],
                                                    args["features"])]
    assert _served.encode_rows(items, [0.5, 0.5], b"null") is None
    try:
        expected = encode_served_batch_msgspec(items, [0.5, 0.5], None)
    except TypeError:
        with pytest.raises(TypeError):
            encode_served_batch(items, [0.5, 0.5], None)
        return
    assert encode_served_batch(items, [0.5, 0.5], None) == expected


def test_the_writer_checks_its_arguments() -> None:
    item = _item("t1", "c1", (0,) * WIDTH)
    with pytest.raises(ValueError):
        _served.encode_rows([item], [], b"null")
    with pytest.raises(TypeError):
        _served.encode_rows([item], [0.5])
    assert _served.encode_rows([], [], b"null") == []
