"""`generate --drift SPEC`: parsing, and what a drifted log changes (only from its start on)."""

from __future__ import annotations

import numpy as np
import pytest

from app.datagen.config import DAY_MS, GeneratorConfig
from app.datagen.drift import DriftSpecError, parse_drift_spec
from app.datagen.generator import generate_log


def test_spec_parses_every_clause() -> None:
    spec = parse_drift_spec("from=2026-01-02,amount=x2.5,country=JP:0.3,fraud-rate=0.05")
    assert spec.from_ms == 1_767_312_000_000
    assert (spec.amount_factor, spec.country, spec.country_share, spec.fraud_rate) == (
        2.5, "JP", 0.3, 0.05)


@pytest.mark.parametrize("text", ["", "amount=3", "amount=x0", "amount=x3,amount=x2",
                                  "country=XX:0.5", "country=JP", "country=JP:2",
                                  "fraud-rate=0.9", "from=yesterday,amount=x2", "from=2026-01-02",
                                  "speed=x2", "amount=x3,,country=JP:0.1"])
def test_malformed_specs_say_what_is_expected(text: str) -> None:
    with pytest.raises(DriftSpecError, match=r"bad --drift SPEC .*expected comma-separated"):
        parse_drift_spec(text)


def test_drift_changes_only_what_comes_after_its_start() -> None:
    base = {"cards": 200, "txns": 4000, "days": 2, "seed": 5}
    since = GeneratorConfig(**base).start_ms + DAY_MS
    plain = generate_log(GeneratorConfig(**base)).txns
    drifted = generate_log(GeneratorConfig(
        **base, drift=parse_drift_spec(f"from={since},amount=x3,country=JP:0.5"))).txns
    before = plain.ts < since
    assert np.array_equal(plain.ts, drifted.ts)
    assert np.array_equal(plain.amount[before], drifted.amount[before])
    assert np.array_equal(plain.country[before], drifted.country[before])
    after = ~before
    ratio = drifted.amount[after] / plain.amount[after]
    assert np.allclose(ratio, 3, rtol=0.01)
    assert 0.4 < np.mean(drifted.country[after] != plain.country[after]) < 0.6


def test_fraud_rate_drift_adds_fraud_only_after_its_start() -> None:
    base = {"cards": 200, "txns": 4000, "days": 2, "seed": 5}
    since = GeneratorConfig(**base).start_ms + DAY_MS
    plain = generate_log(GeneratorConfig(**base)).txns
    drifted = generate_log(GeneratorConfig(
        **base, drift=parse_drift_spec(f"from={since},fraud-rate=0.1"))).txns
    assert int((drifted.ts < since).sum()) == int((plain.ts < since).sum())
    extra = int((drifted.pattern[drifted.ts >= since] > 0).sum()) - int(
        (plain.pattern[plain.ts >= since] > 0).sum())
    assert extra > 100


def test_a_drift_start_outside_the_log_is_refused() -> None:
    with pytest.raises(ValueError, match="outside the log"):
        GeneratorConfig(days=1, drift=parse_drift_spec("from=2030-01-01,amount=x2"))
