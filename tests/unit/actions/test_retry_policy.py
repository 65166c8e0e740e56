"""The retry policy: verdict per status, exponential ceiling, full jitter, Retry-After."""

from __future__ import annotations

import random

import pytest

from app.actions.retry import RetryPolicy, parse_retry_after


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (201, "delivered"),
        (200, "delivered"),
        (409, "retry"),
        (408, "retry"),
        (425, "retry"),
        (429, "retry"),
        (500, "retry"),
        (502, "retry"),
        (503, "retry"),
        (504, "retry"),
        (400, "reject"),
        (401, "reject"),
        (404, "reject"),
        (410, "reject"),
        (413, "reject"),
        (422, "reject"),
        (204, "reject"),
        (302, "reject"),
    ],
)
def test_classify(status, verdict):
    assert RetryPolicy.classify(status) == verdict


def test_ceiling_doubles_from_base_up_to_cap():
    policy = RetryPolicy(base_s=0.05, cap_s=5.0)
    assert [policy.ceiling(n) for n in range(9)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert policy.ceiling(10_000) == 5.0  # no overflow, ever


def test_delay_is_full_jitter_within_the_ceiling():
    policy = RetryPolicy(base_s=0.05, cap_s=5.0)
    rng = random.Random(7)
    for attempt in (0, 3, 12):
        samples = [policy.delay(attempt, rng) for _ in range(2000)]
        ceiling = policy.ceiling(attempt)
        assert all(0.0 <= s <= ceiling for s in samples)
        # full jitter: the whole range is used, not just the top
        assert min(samples) < 0.05 * ceiling
        assert max(samples) > 0.95 * ceiling
        assert 0.45 * ceiling < sum(samples) / len(samples) < 0.55 * ceiling


def test_delay_is_reproducible_with_a_seeded_rng():
    policy = RetryPolicy()
    assert [policy.delay(n, random.Random(1)) for n in range(5)] == [
        policy.delay(n, random.Random(1)) for n in range(5)
    ]


def test_retry_after_raises_the_wait_but_never_past_the_cap():
    policy = RetryPolicy(base_s=0.05, cap_s=2.0)
    rng = random.Random(3)
    assert all(policy.delay(0, rng, retry_after_s=1.0) >= 1.0 for _ in range(100))
    assert policy.delay(0, rng, retry_after_s=30.0) == 2.0
    assert policy.delay(0, rng, retry_after_s=0.0) <= 0.05


@pytest.mark.parametrize(("base", "cap"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_invalid_policies_are_refused(base, cap):
    with pytest.raises(ValueError):
        RetryPolicy(base_s=base, cap_s=cap)


def test_negative_attempt_is_refused():
    with pytest.raises(ValueError):
        RetryPolicy().ceiling(-1)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("", None),
        ("1", 1.0),
        ("0.5", 0.5),
        ("-1", None),
        ("nan", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None),
    ],
)
def test_parse_retry_after(value, seconds):
    assert parse_retry_after(value) == seconds
