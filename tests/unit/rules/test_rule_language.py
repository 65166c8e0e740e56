"""The rule language: what it accepts, what it refuses (with the position), what it computes."""

from __future__ import annotations

import numpy as np
import pytest

from app.rules.language import Columns, RuleSyntaxError, parse


def cols(**arrays: object) -> Columns:
    data = {k: np.asarray(v, dtype=object if isinstance(v[0], str) else np.float64)  # type: ignore[index]
            for k, v in arrays.items()}
    n = len(next(iter(data.values())))
    return Columns(n, data.__getitem__,
                   {"block": np.array([True] + [False] * (n - 1)), "allow": np.zeros(n, bool)})


BATCH = {"amount_minor": [100.0, 600_000.0, 250_000.0, 5.0],
         "merchant_fraud_share_7d": [0.0, 0.3, 0.1, 0.9],
         "score": [0.1, 0.65, 0.7, 0.0],
         "country": ["US", "GB", "US", "FR"],
         "count_1h": [1.0, 0.0, 3.0, 0.0]}


@pytest.mark.parametrize(("text", "want"), [
    ("amount_minor > 500000 and merchant_fraud_share_7d > 0.2", [0, 1, 0, 0]),
    ("score > 0.6 and country != 'US'", [0, 1, 0, 0]),
    ("country in ('US', 'FR')", [1, 0, 1, 1]),
    ("country not in ['US']", [0, 1, 0, 1]),
    ("0.6 < score <= 0.7", [0, 1, 1, 0]),
    ("between(amount_minor, 100, 250000)", [1, 0, 1, 0]),
    ("not (score >= 0.5) or listed('block')", [1, 0, 0, 1]),
    ("amount_minor / count_1h > 90000", [0, 1, 0, 1]),  # x / 0 = inf
    ("max(score, merchant_fraud_share_7d) >= 0.9", [0, 0, 0, 1]),
    ("abs(-amount_minor) == 5", [0, 0, 0, 1]),
    ("True", [1, 1, 1, 1]),
    ("amount_minor < 999999999999999999999999999999", [1, 1, 1, 1]),  # an int past 64 bits
])
def test_expressions_compute_row_by_row(text: str, want: list[int]) -> None:
    got = parse(text).mask(cols(**BATCH))
    assert got.tolist() == [bool(w) for w in want]


def test_nan_compares_false() -> None:
    c = cols(amount_minor=[0.0], count_1h=[0.0])
    assert parse("amount_minor / count_1h > 1").mask(c).tolist() == [False]
    assert parse("amount_minor / count_1h <= 1").mask(c).tolist() == [False]


@pytest.mark.parametrize(("text", "line", "column", "fragment"), [
    ("amount_minor > 5000 and merchant_fraud_shar_7d > 0.2", 1, 25, "unknown name"),
    ("amount_minor > 'US'", 1, 16, "cannot compare a number with a string"),
    ("country < 'US'", 1, 11, "compares only with == or !="),
    ("score + 1", 1, 1, "must be true or false"),
    ("score > 0.5 and )", 1, 17, "syntax"),
    ("score > 0.5 amount_minor", 1, 13, "syntax"),
    ("__import__('os').system('x')", 1, 1, "function"),
    ("score.real > 0", 1, 1, "attribute is not part"),
    ("country in (1, 2)", 1, 13, "a number in a list compared with a string"),
    ("country in countries", 1, 12, "non-empty (tuple"),
    ("listed('gray')", 1, 8, "'block' or 'allow'"),
    ("between(score, 1)", 1, 1, "takes 3 arguments"),
    ("[x for x in (1,)]", 1, 1, "listcomp is not part"),
    ("score > 1 if True else False", 1, 1, "ifexp is not part"),
    ("lambda: True", 1, 1, "lambda is not part"),
    ("amount_minor > 1" + "0" * 400, 1, 16, "is not a number"),  # past a double's range
    ("1e999 > score", 1, 1, "is not a number"),
])
def test_refusals_name_the_position(text: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(RuleSyntaxError) as info:
        parse(text)
    assert fragment in info.value.message, info.value.message
    assert (info.value.line, info.value.column) == (line, column), info.value


def test_names_read_are_recorded() -> None:
    e = parse("amount_minor > 1 and (score < 0.2 or country == 'US')")
    assert e.names == {"amount_minor", "score", "country"}


def test_size_is_bounded() -> None:
    with pytest.raises(RuleSyntaxError, match="longer than"):
        parse("score > 0 or " * 200 + "True")
    with pytest.raises(RuleSyntaxError, match="parts"):
        parse(" or ".join(["score > 0"] * 120))
