"""The end-to-end oracle refuses to run without the compiled fold (never the live code checking
itself)."""

from __future__ import annotations

import pytest

from app.features import kernel
from app.harness.pipeline import audit_served, oracle_for
from app.settings import load_settings


def test_the_oracle_refuses_to_run_without_the_compiled_fold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert kernel.available(), "the compiled fold is not built here: `make setup`"
    monkeypatch.setattr(kernel, "_fold", None)  # as on a machine where it was never built
    settings = load_settings()
    with pytest.raises(RuntimeError, match=r"needs the compiled fold app\.features\._fold"):
        oracle_for(settings, [])
    with pytest.raises(RuntimeError, match=r"needs the compiled fold app\.features\._fold"):
        audit_served(settings, [])
