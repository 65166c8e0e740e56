"""Generator configuration: validation and the time formats --start and --now accept."""

from __future__ import annotations

import pytest

from app.datagen.config import DAY_MS, DEFAULT_START_MS, GeneratorConfig, parse_time_ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2026-01-01", DEFAULT_START_MS),
        ("2026-01-01T00:00:00Z", DEFAULT_START_MS),
        ("2026-01-01T01:00:00+01:00", DEFAULT_START_MS),
        ("2026-01-01T00:00:00.123", DEFAULT_START_MS + 123),
        ("1767225600000", DEFAULT_START_MS),
        (" 1767225600001 ", DEFAULT_START_MS + 1),
    ],
)
def test_parse_time_ms(text: str, ms: int) -> None:
    assert parse_time_ms(text) == ms


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01", "12.5"])
def test_parse_time_ms_rejects_nonsense(text: str) -> None:
    with pytest.raises(ValueError, match="ISO date"):
        parse_time_ms(text)


@pytest.mark.parametrize(
    "changes",
    [{"cards": 0}, {"txns": 0}, {"seed": -1}, {"days": 0}, {"days": 3651}, {"start_ms": 0},
     {"out_of_order": 1.5}, {"redelivery": -0.1}, {"malformed": 2.0}, {"fraud_rate": 0.9},
     {"merchants": 0}, {"allowed_lateness_ms": -1}],
)
def test_invalid_config_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        GeneratorConfig(**changes)  # type: ignore[arg-type]


def test_validation_clock_defaults_to_a_day_after_the_data() -> None:
    config = GeneratorConfig(days=3)
    assert config.end_ms == DEFAULT_START_MS + 3 * DAY_MS
    assert config.validation_now_ms == config.end_ms + DAY_MS
    assert GeneratorConfig(now_ms=5).validation_now_ms == 5
