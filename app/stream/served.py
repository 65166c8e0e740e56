"""The features.served log read back from Kafka (for `audit-skew --served TOPIC`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson

from app.settings import Settings
from app.stream.inspect import read_topic


def iter_served_rows(settings: Settings, topic: str) -> Iterator[dict[str, Any]]:
    """Every served row in `topic` up to its current end, decoded."""
    for rec in asyncio.run(read_topic(settings, topic, timeout_s=300.0)):
        yield orjson.loads(rec.value)
