"""The live-load benchmarks' own parts that need no broker: variants and the worker's CPU by
thread."""

from __future__ import annotations

import os
import threading
import time

import click
import pytest
from click.testing import CliRunner

from app.settings import load_settings
from benchmarks.client_ceiling import _bootstrap
from benchmarks.client_ceiling import main as client_ceiling
from benchmarks.live_ab import parse_variant, variant_settings
from benchmarks.live_load import thread_cpu


def test_a_variant_is_its_assignments() -> None:
    assert parse_variant("FRAUDSTREAM_MAX_BATCH=1024  HOOK=a=b") == {
        "FRAUDSTREAM_MAX_BATCH": "1024", "HOOK": "a=b"}
    with pytest.raises(click.BadParameter, match="'HOOK' is not NAME=VALUE"):
        parse_variant("FRAUDSTREAM_MAX_BATCH=1 HOOK")
    with pytest.raises(click.BadParameter):
        parse_variant("=1")


def test_a_setting_is_loaded_as_one_and_the_stack_addresses_are_kept() -> None:
    base = load_settings({}).replace(kafka_bootstrap="127.0.0.1:1", redis_url="redis://x:2/0")
    assert base.max_batch != 1024
    settings = variant_settings(base, {"FRAUDSTREAM_MAX_BATCH": "1024", "AB_HOOK": "1"})
    assert settings.max_batch == 1024
    assert (settings.kafka_bootstrap, settings.redis_url) == ("127.0.0.1:1", "redis://x:2/0")


def test_the_client_ceiling_takes_known_loops_on_a_plaintext_stack_only() -> None:
    settings = load_settings({}).replace(kafka_bootstrap="127.0.0.1:1")
    assert _bootstrap(settings) == {"bootstrap.servers": "127.0.0.1:1"}
    with pytest.raises(click.UsageError, match="PLAINTEXT"):
        _bootstrap(settings.replace(kafka_security_protocol="SSL"))
    result = CliRunner().invoke(client_ceiling, ["--loops", "aiokafka,kafka-python"])
    assert result.exit_code == 2
    assert "unknown loops ['kafka-python']" in result.output


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_thread_cpu_tells_the_main_thread_from_the_others() -> None:
    before = thread_cpu(os.getpid())
    done = threading.Event()
    spinner = threading.Thread(target=lambda: (_burn(0.3), done.wait(10)))
    spinner.start()  # counted while it lives: a thread gone is no longer in /proc
    try:
        deadline = time.monotonic() + 10
        while thread_cpu(os.getpid()).get("other", 0.0) - before.get("other", 0.0) < 0.25:
            assert time.monotonic() < deadline, "the other thread's CPU was not counted"
            time.sleep(0.05)
        main_before = thread_cpu(os.getpid())["main"]
        _burn(0.3)
        assert thread_cpu(os.getpid())["main"] - main_before >= 0.25
    finally:
        done.set()
        spinner.join()
