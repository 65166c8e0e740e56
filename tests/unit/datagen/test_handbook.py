"""The Handbook's simulated dataset: the book's draws, its fraud scenarios and the contract rows."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from app.cli.main import cli
from app.datagen.handbook import (
    HandbookDataset,
    customer_profiles,
    customer_transactions,
    generate_handbook,
    label_chunks,
    scenario_table,
    terminal_profiles,
    terminals_within_radius,
    transaction_chunks,
)
from app.transactions.contract import parse_transaction
from app.transactions.labels import parse_label_row

SMALL = {"n_customers": 120, "n_terminals": 150, "nb_days": 30, "radius": 12.0}
FAR_FUTURE_MS = 4_102_444_800_000  # 2100-01-01
START_MS = int(datetime(2018, 4, 1, tzinfo=UTC).timestamp()) * 1000
DAY_MS = 86_400_000


@pytest.fixture(scope="module")
def small() -> HandbookDataset:
    return generate_handbook(**SMALL)


@pytest.fixture
def book_globals() -> Iterator[None]:
    """The book seeds numpy's and Python's global generators: put them back after."""
    np_state, py_state = np.random.get_state(), random.getstate()
    yield
    np.random.set_state(np_state)
    random.setstate(py_state)


def _lines(chunks: Iterable[bytes]) -> list[bytes]:
    return b"".join(chunks).split(b"\n")[:-1]


@pytest.mark.usefixtures("book_globals")
def test_first_profiles_are_the_books_draws() -> None:
    # generate_customer_profiles_table(random_state=0): np.random.seed, then per customer
    # uniform(0,100), uniform(0,100), uniform(5,100), uniform(0,4), one call each.
    np.random.seed(0)
    first = [np.random.uniform(0, 100), np.random.uniform(0, 100), np.random.uniform(5, 100),
             np.random.uniform(0, 4)]
    second_x = np.random.uniform(0, 100)
    customers = customer_profiles(3)
    assert [customers.x[0], customers.y[0], customers.mean_amount[0],
            customers.mean_nb_tx_per_day[0]] == first
    assert customers.std_amount[0] == first[2] / 2 and customers.x[1] == second_x
    # the values the notebook prints for customer 0
    assert first == pytest.approx([54.881350, 71.518937, 62.262521, 2.179533], abs=1e-6)
    rs = np.random.RandomState(1)  # generate_terminal_profiles_table(random_state=1)
    terminals = terminal_profiles(2)
    assert [terminals.x[0], terminals.y[0], terminals.x[1]] == [
        rs.uniform(0, 100), rs.uniform(0, 100), rs.uniform(0, 100)]


def test_the_notebooks_five_customer_example() -> None:
    customers, terminals = customer_profiles(5), terminal_profiles(5, seed=0)
    available = terminals_within_radius(customers, terminals, 50)
    assert available == [[0, 1, 2, 3], [0, 1, 2, 3], [1, 4], [0, 1, 2, 3], [2, 3]]
    cust, secs, terms, amounts = customer_transactions(customers, available, nb_days=5)
    zero = cust == 0
    # generate_transactions_table(customer 0, nb_days=5) as the notebook prints it
    assert secs[zero].tolist() == [
        26345, 68522, 64816, 141182, 137138, 143211, 118266, 159887, 216947, 204609, 206749,
        228794, 200484, 263735, 293638, 404349, 373279]
    assert terms[zero].tolist() == [3, 3, 0, 2, 3, 3, 2, 3, 2, 1, 1, 2, 1, 0, 2, 1, 2]
    assert amounts[zero].tolist() == [
        123.59, 46.51, 77.34, 32.35, 63.30, 13.59, 54.72, 51.89, 117.91, 67.72, 28.46, 50.25,
        93.26, 46.40, 23.26, 71.96, 52.69]
    assert len(cust) == 65 and (secs[-1], terms[-1], amounts[-1]) == (391126, 3, 17.53)


def test_radius_is_the_books_distance() -> None:
    customers, terminals = customer_profiles(40), terminal_profiles(300)
    xy_terminals = np.column_stack([terminals.x, terminals.y])
    book = [list(np.where(np.sqrt(np.sum(np.square(
        np.array([customers.x[c], customers.y[c]]) - xy_terminals), axis=1)) < 9)[0])
        for c in range(40)]
    assert terminals_within_radius(customers, terminals, 9) == book


def test_same_configuration_same_dataset(small: HandbookDataset) -> None:
    again = generate_handbook(**SMALL)
    for name in HandbookDataset.__dataclass_fields__:
        assert np.array_equal(getattr(small, name), getattr(again, name)), name
    assert b"".join(transaction_chunks(small)) == b"".join(transaction_chunks(again))
    assert b"".join(label_chunks(small)) == b"".join(label_chunks(again))


def test_time_order_with_ties_in_the_books_concatenation_order(small: HandbookDataset) -> None:
    assert np.array_equal(small.transaction_id, np.arange(len(small)))
    secs, cust = small.tx_time_seconds, small.customer_id
    assert np.all(np.diff(secs) >= 0)
    tie = np.diff(secs) == 0
    assert np.all(np.diff(cust)[tie] >= 0)
    assert np.array_equal(small.tx_datetime_ms, START_MS + secs * 1000)
    assert np.array_equal(small.tx_time_days, secs // 86_400)


@pytest.mark.usefixtures("book_globals")
def test_frauds_are_the_books_scenarios(small: HandbookDataset) -> None:
    """add_frauds written out as the book does it, row by row, on the unfrauded columns."""
    n_customers, n_terminals = SMALL["n_customers"], SMALL["n_terminals"]
    customers, terminals = customer_profiles(n_customers), terminal_profiles(n_terminals)
    available = terminals_within_radius(customers, terminals, SMALL["radius"])
    cust, secs, terms, amounts = customer_transactions(customers, available, SMALL["nb_days"])
    order = np.argsort(secs, kind="stable")
    cust, days, terms, amounts = cust[order], secs[order] // 86_400, terms[order], amounts[order]
    fraud, scenario = np.zeros(len(days), int), np.zeros(len(days), int)
    fraud[amounts > 220], scenario[amounts > 220] = 1, 1
    for day in range(days.max()):
        compromised = np.random.RandomState(day).choice(n_terminals, 2, replace=False)
        hit = (days >= day) & (days < day + 28) & np.isin(terms, compromised)
        fraud[hit], scenario[hit] = 1, 2
    for day in range(days.max()):
        compromised = np.random.RandomState(day).choice(n_customers, 3, replace=False)
        hit = (days >= day) & (days < day + 14) & np.isin(cust, compromised)
        population = list(np.flatnonzero(hit))
        random.seed(day)
        chosen = random.sample(population, k=int(len(population) / 3))
        amounts[chosen] = amounts[chosen] * 5
        fraud[chosen], scenario[chosen] = 1, 3
    assert np.array_equal(small.tx_fraud, fraud)
    assert np.array_equal(small.tx_fraud_scenario, scenario)
    assert np.array_equal(small.tx_amount, amounts)
    assert all(n > 0 for n in small.scenario_counts().values()), small.scenario_counts()


def test_scenario_one_is_exactly_the_amounts_above_220(small: HandbookDataset) -> None:
    scenario = small.tx_fraud_scenario
    not_overridden = scenario <= 1  # scenarios 2 and 3 come later and win
    assert np.array_equal(scenario[not_overridden] == 1, small.tx_amount[not_overridden] > 220)
    assert np.array_equal(small.tx_fraud == 1, scenario > 0)


def test_rows_pass_the_contracts(small: HandbookDataset) -> None:
    txns, labels = _lines(transaction_chunks(small, 97)), _lines(label_chunks(small, 97))
    assert len(txns) == len(labels) == len(small)
    amount = np.maximum(np.rint(small.tx_amount * 100), 1).astype(int)
    for i, (raw, raw_label) in enumerate(zip(txns, labels, strict=True)):
        txn = parse_transaction(raw, now_ms=FAR_FUTURE_MS)
        assert raw == txn.to_json()  # the canonical (orjson) form
        assert txn.to_dict() == {
            "txn_id": f"h{i}", "card_id": f"c{small.customer_id[i]}",
            "ts_ms": int(small.tx_datetime_ms[i]), "amount_minor": int(amount[i]),
            "currency": "EUR", "merchant_id": f"m{small.terminal_id[i]}", "mcc": 5411,
            "country": "BE", "channel": "pos"}
        row = orjson.loads(raw_label)
        assert raw_label == orjson.dumps(row)
        record = parse_label_row(row, now_ms=FAR_FUTURE_MS)
        assert (record.txn_id, record.card_id, record.merchant_id, record.source) == (
            txn.txn_id, txn.card_id, txn.merchant_id, "handbook")
        assert record.label == small.tx_fraud[i]
        assert record.txn_ts_ms == txn.ts_ms and record.reported_at_ms == txn.ts_ms + 7 * DAY_MS
    reported = [orjson.loads(raw)["reported_at"] for raw in labels]
    assert reported == sorted(reported)


def test_scenario_table(small: HandbookDataset) -> None:
    table = scenario_table(small)
    assert table.column_names == ["txn_id", "scenario"]
    assert table.column("txn_id")[3].as_py() == "h3"
    assert table.column("scenario").to_numpy().tolist() == small.tx_fraud_scenario.tolist()


def test_cli_writes_the_three_files(tmp_path: Path) -> None:
    out = tmp_path / "hb.jsonl"
    result = CliRunner().invoke(cli, [
        "generate", "--profile", "handbook", "--out", str(out), "--customers", "40",
        "--terminals", "30", "--days", "12"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    expected = generate_handbook(n_customers=40, n_terminals=30, nb_days=12)
    assert out.read_bytes() == b"".join(transaction_chunks(expected))
    assert (tmp_path / "hb.labels.jsonl").read_bytes() == b"".join(label_chunks(expected))
    assert pq.read_table(tmp_path / "hb.scenarios.parquet").equals(scenario_table(expected))
    assert f"handbook: {len(expected):,} transactions, {expected.frauds:,} frauds" in (
        result.output)
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(("args", "message"), [
    (["--profile", "handbook", "--cards", "5", "--seed", "1"],
     "--profile handbook does not take --cards, --seed"),
    (["--customers", "5"], "--customers: only with --profile handbook"),
    (["--profile", "handbook", "--out", "x.parquet"], "the handbook profile writes JSONL"),
])
def test_cli_refuses_options_of_the_other_profile(tmp_path: Path, args: list[str],
                                                   message: str) -> None:
    out = ["--out", str(tmp_path / "t.jsonl")] if "--out" not in args else []
    result = CliRunner().invoke(cli, ["generate", *out, *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not list(tmp_path.iterdir())
