"""One base for the validators' errors (app.errors.FieldError): `field`, `reason`, the message."""

from __future__ import annotations

import pytest

from app.action_service.decisions import DecisionError
from app.action_service.reviews import ReviewError
from app.actions.action import ActionError
from app.errors import FieldError
from app.scoring.lists import ListEntryError
from app.transactions.labels import LabelError


@pytest.mark.parametrize("error", [LabelError, ReviewError, DecisionError, ListEntryError])
def test_a_validator_error_is_a_field_error(error: type[FieldError]) -> None:
    exc = error("card_id", "card_id: must be 1..64 characters of [A-Za-z0-9_.:-]")
    assert isinstance(exc, FieldError) and isinstance(exc, ValueError)
    assert (exc.field, exc.reason) == ("card_id", str(exc))
    assert error(None, "row: not valid JSON").field is None


def test_an_action_error_is_a_field_error_with_its_code() -> None:
    exc = ActionError("bad_format", "txn_id", "txn_id: bad")
    assert isinstance(exc, FieldError)
    assert (exc.code, exc.field, exc.reason, str(exc)) == ("bad_format", "txn_id", "txn_id: bad",
                                                          "txn_id: bad")
