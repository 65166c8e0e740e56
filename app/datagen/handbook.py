"""The Fraud Detection Handbook's simulated card-fraud dataset, reproduced draw for draw."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

# The book's generate_dataset(n_customers=5000, n_terminals=10000, nb_days=183,
# start_date="2018-04-01", r=5) of "Reproducible Machine Learning for Credit Card Fraud
# Detection - Practical Handbook", Chapter 3 "SimulatedDataset".
N_CUSTOMERS: Final = 5_000
N_TERMINALS: Final = 10_000
NB_DAYS: Final = 183
START_DATE: Final = date(2018, 4, 1)
RADIUS: Final = 5.0
CUSTOMER_SEED: Final = 0
TERMINAL_SEED: Final = 1
#: scenario 1: every transaction above this amount is fraud
SCENARIO_1_AMOUNT: Final = 220.0
#: scenario 2: each day 2 terminals are compromised for 28 days
SCENARIO_2_TERMINALS: Final = 2
SCENARIO_2_DAYS: Final = 28
#: scenario 3: each day 3 customers are compromised for 14 days
SCENARIO_3_CUSTOMERS: Final = 3
SCENARIO_3_DAYS: Final = 14
SCENARIO_3_FACTOR: Final = 5
SCENARIOS: Final = (1, 2, 3)

#: what the contract rows say about fields the book does not have
CURRENCY: Final = "EUR"
MCC: Final = 5411
COUNTRY: Final = "BE"
CHANNEL: Final = "pos"
LABEL_SOURCE: Final = "handbook"
LABEL_DELAY_MS: Final = 7 * 86_400_000

_DAY_S: Final = 86_400
_CHUNK_ROWS: Final = 100_000
# orjson.dumps of the rows' dicts, as templates: formatting is some ten times faster.
_TXN_LINE: Final = (
    b'{"txn_id":"h%d","card_id":"c%d","ts_ms":%d,"amount_minor":%d,"currency":"'
    + CURRENCY.encode() + b'","merchant_id":"m%d","mcc":' + str(MCC).encode()
    + b',"country":"' + COUNTRY.encode() + b'","channel":"' + CHANNEL.encode() + b'"}\n')
_LABEL_LINE: Final = (
    b'{"txn_id":"h%d","card_id":"c%d","label":%d,"reported_at":%d,"merchant_id":"m%d",'
    b'"ts_ms":%d,"source":"' + LABEL_SOURCE.encode() + b'"}\n')


@dataclass(frozen=True, slots=True)
class CustomerProfiles:
    """The book's customer_profiles_table: customer i is row i (CUSTOMER_ID == i)."""

    x: np.ndarray
    y: np.ndarray
    mean_amount: np.ndarray
    std_amount: np.ndarray
    mean_nb_tx_per_day: np.ndarray


@dataclass(frozen=True, slots=True)
class TerminalProfiles:
    """The book's terminal_profiles_table: terminal i is row i (TERMINAL_ID == i)."""

    x: np.ndarray
    y: np.ndarray


@dataclass(frozen=True, slots=True)
class HandbookDataset:
    """The book's transactions_df after add_frauds, one numpy array per column, in
    TRANSACTION_ID order (which is time order). TX_DATETIME is in ms since epoch, UTC."""

    transaction_id: np.ndarray
    tx_datetime_ms: np.ndarray
    customer_id: np.ndarray
    terminal_id: np.ndarray
    tx_amount: np.ndarray
    tx_time_seconds: np.ndarray
    tx_time_days: np.ndarray
    tx_fraud: np.ndarray
    tx_fraud_scenario: np.ndarray

    def __len__(self) -> int:
        return len(self.transaction_id)

    @property
    def frauds(self) -> int:
        return int(self.tx_fraud.sum())

    def scenario_counts(self) -> dict[int, int]:
        """Transactions per fraud scenario (1, 2, 3) as the final TX_FRAUD_SCENARIO says."""
        counts = np.bincount(self.tx_fraud_scenario, minlength=len(SCENARIOS) + 1)
        return {s: int(counts[s]) for s in SCENARIOS}


def customer_profiles(n_customers: int, seed: int = CUSTOMER_SEED) -> CustomerProfiles:
    """generate_customer_profiles_table: per customer, in turn, uniform x, y in [0, 100),
    mean_amount in [5, 100), mean_nb_tx_per_day in [0, 4); std_amount = mean_amount / 2."""
    # One (n, 4) draw consumes the legacy stream in the book's loop order, row by row.
    draws = np.random.RandomState(seed).uniform(
        [0.0, 0.0, 5.0, 0.0], [100.0, 100.0, 100.0, 4.0], size=(n_customers, 4))
    mean_amount = draws[:, 2].copy()
    return CustomerProfiles(draws[:, 0].copy(), draws[:, 1].copy(), mean_amount,
                            mean_amount / 2, draws[:, 3].copy())


def terminal_profiles(n_terminals: int, seed: int = TERMINAL_SEED) -> TerminalProfiles:
    """generate_terminal_profiles_table: per terminal, uniform x, y in [0, 100)."""
    draws = np.random.RandomState(seed).uniform(0.0, 100.0, size=(n_terminals, 2))
    return TerminalProfiles(draws[:, 0].copy(), draws[:, 1].copy())


def terminals_within_radius(customers: CustomerProfiles, terminals: TerminalProfiles,
                            radius: float) -> list[list[int]]:
    """get_list_terminals_within_radius for every customer: the terminals (ascending) whose
    Euclidean distance, computed as the book does, is below `radius`."""
    found: list[list[int]] = []
    block = 512  # customers per distance matrix: bounded memory
    for lo in range(0, len(customers.x), block):
        dx = customers.x[lo:lo + block, None] - terminals.x[None, :]
        dy = customers.y[lo:lo + block, None] - terminals.y[None, :]
        near = np.sqrt(np.square(dx) + np.square(dy)) < radius
        found += [np.flatnonzero(row).tolist() for row in near]
    return found


def customer_transactions(customers: CustomerProfiles, available: list[list[int]],
                          nb_days: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """generate_transactions_table for every customer, concatenated in customer order (the
    book's groupby-apply): (CUSTOMER_ID, TX_TIME_SECONDS, TERMINAL_ID, TX_AMOUNT) arrays."""
    rs = np.random.RandomState()
    rnd = random.Random()
    poisson, normal, uniform, choice = rs.poisson, rs.normal, rs.uniform, rnd.choice
    cust: list[int] = []
    secs: list[int] = []
    terms: list[int] = []
    amounts: list[float] = []
    for c in range(len(customers.x)):
        # The book seeds Python's random and numpy's global RandomState with the customer id.
        rnd.seed(c)
        rs.seed(c)
        lam = float(customers.mean_nb_tx_per_day[c])
        mean = float(customers.mean_amount[c])
        std = float(customers.std_amount[c])
        terminals = available[c]
        first = len(secs)
        for day in range(nb_days):
            for _ in range(poisson(lam)):
                time_tx = int(normal(_DAY_S / 2, 20000))
                if 0 < time_tx < _DAY_S:
                    amount = normal(mean, std)
                    if amount < 0:
                        amount = uniform(0, mean * 2)
                    if terminals:
                        secs.append(time_tx + day * _DAY_S)
                        amounts.append(amount)
        # Python's random is drawn only for kept transactions, so it can follow the numpy loop.
        terms += [choice(terminals) for _ in range(len(secs) - first)]
        cust += [c] * (len(secs) - first)
    # np.round(amount, decimals=2) per scalar equals the same rounding on the array.
    return (np.array(cust, np.int64), np.array(secs, np.int64), np.array(terms, np.int64),
            np.round(np.array(amounts, np.float64), 2))


def generate_handbook(*, n_customers: int = N_CUSTOMERS, n_terminals: int = N_TERMINALS,
                      nb_days: int = NB_DAYS, start_date: date = START_DATE,
                      radius: float = RADIUS) -> HandbookDataset:
    """The book's generate_dataset followed by add_frauds, with the book's seeds.

    The draws are the book's, in its order: numpy's legacy RandomState (customers seed 0,
    terminals seed 1, customer c's transactions seed c, day d's compromised terminals and
    customers seed d) and Python's `random` (customer c's terminal choices seed c, day d's
    scenario-3 sample seed d). One difference is known: the book sorts by TX_DATETIME with
    pandas' default (unstable) quicksort, so the order of transactions in the same second,
    hence their TRANSACTION_IDs, came from the numpy of its day and is not reproducible with
    modern numpy (whose quicksort differs by version and CPU). Here ties keep the book's
    concatenation order (customer, then generation order): a stable sort.
    """
    if min(n_customers, n_terminals, nb_days) < 1 or not radius > 0:
        raise ValueError("n_customers, n_terminals, nb_days and radius must be positive")
    customers = customer_profiles(n_customers)
    terminals = terminal_profiles(n_terminals)
    available = terminals_within_radius(customers, terminals, radius)
    cust, secs, terms, amounts = customer_transactions(customers, available, nb_days)
    order = np.argsort(secs, kind="stable")
    cust, secs, terms, amounts = cust[order], secs[order], terms[order], amounts[order]
    days = secs // _DAY_S
    fraud, scenario = _add_frauds(n_customers, n_terminals, cust, terms, days, amounts)
    start_s = int(datetime(start_date.year, start_date.month, start_date.day,
                           tzinfo=UTC).timestamp())
    return HandbookDataset(
        transaction_id=np.arange(len(secs), dtype=np.int64),
        tx_datetime_ms=(secs + start_s) * 1000, customer_id=cust, terminal_id=terms,
        tx_amount=amounts, tx_time_seconds=secs, tx_time_days=days, tx_fraud=fraud,
        tx_fraud_scenario=scenario)


def _add_frauds(n_customers: int, n_terminals: int, cust: np.ndarray, terms: np.ndarray,
                days: np.ndarray, amounts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """add_frauds on time-ordered columns; multiplies scenario-3 amounts in place."""
    fraud = np.zeros(len(days), np.int8)
    scenario = np.zeros(len(days), np.int8)
    above = amounts > SCENARIO_1_AMOUNT
    fraud[above] = 1
    scenario[above] = 1
    # The book loops over range(TX_TIME_DAYS.max()): the last day starts no compromise.
    last = int(days.max()) if len(days) else 0
    # Scenario 2: a terminal compromised on day d makes all of days [d, d + 28) fraud.
    compromised = np.zeros((last + SCENARIO_2_DAYS, n_terminals), bool)
    for day in range(last):
        # Series.sample(n, random_state=day) is RandomState(day).choice(len, n, replace=False),
        # which is the first n of a permutation.
        picked = np.random.RandomState(day).permutation(n_terminals)[:SCENARIO_2_TERMINALS]
        compromised[day:day + SCENARIO_2_DAYS, picked] = True
    hit = compromised[days, terms]
    fraud[hit] = 1
    scenario[hit] = 2
    # Scenario 3: a third of a compromised customer's next 14 days of transactions, drawn by
    # random.sample from the list of their TRANSACTION_IDs in ascending order.
    by_customer = np.argsort(cust, kind="stable")  # TRANSACTION_ID order within a customer
    bounds = np.searchsorted(cust[by_customer], np.arange(n_customers + 1))
    for day in range(last):
        picked = np.random.RandomState(day).permutation(n_customers)[:SCENARIO_3_CUSTOMERS]
        ids = []
        for c in picked.tolist():
            own = by_customer[bounds[c]:bounds[c + 1]]
            lo, hi = np.searchsorted(days[own], [day, day + SCENARIO_3_DAYS])
            ids.append(own[lo:hi])
        population = np.sort(np.concatenate(ids)).tolist()
        chosen = np.array(random.Random(day).sample(population, k=len(population) // 3),
                          np.int64)
        amounts[chosen] = amounts[chosen] * SCENARIO_3_FACTOR
        fraud[chosen] = 1
        scenario[chosen] = 3
    return fraud, scenario


def amount_minor(dataset: HandbookDataset) -> np.ndarray:
    """TX_AMOUNT in cents, rounded, at least 1 (the contract refuses zero amounts)."""
    return np.maximum(np.rint(dataset.tx_amount * 100), 1).astype(np.int64)


def transaction_chunks(dataset: HandbookDataset, rows: int = _CHUNK_ROWS) -> Iterator[bytes]:
    """The transactions as contract JSONL (every line newline-terminated), in TRANSACTION_ID
    order, `rows` lines a chunk: txn_id h<TRANSACTION_ID>, card_id c<CUSTOMER_ID>,
    merchant_id m<TERMINAL_ID>, amount_minor TX_AMOUNT in cents. Byte-identical to orjson."""
    cents = amount_minor(dataset)
    for lo in range(0, len(dataset), rows):
        part = slice(lo, lo + rows)
        yield b"".join([_TXN_LINE % row for row in zip(
            dataset.transaction_id[part].tolist(), dataset.customer_id[part].tolist(),
            dataset.tx_datetime_ms[part].tolist(), cents[part].tolist(),
            dataset.terminal_id[part].tolist(), strict=True)])


def label_chunks(dataset: HandbookDataset, rows: int = _CHUNK_ROWS) -> Iterator[bytes]:
    """A label row per transaction as JSONL, TX_FRAUD reported 7 days after the transaction,
    in reported_at order (with one delay for all, that is TRANSACTION_ID order), `rows` lines
    a chunk. Byte-identical to orjson."""
    for lo in range(0, len(dataset), rows):
        part = slice(lo, lo + rows)
        ts = dataset.tx_datetime_ms[part]
        yield b"".join([_LABEL_LINE % row for row in zip(
            dataset.transaction_id[part].tolist(), dataset.customer_id[part].tolist(),
            dataset.tx_fraud[part].tolist(), (ts + LABEL_DELAY_MS).tolist(),
            dataset.terminal_id[part].tolist(), ts.tolist(), strict=True)])


def scenario_table(dataset: HandbookDataset) -> pa.Table:
    """(txn_id, scenario) per transaction: 0 legitimate, else the fraud scenario 1, 2 or 3."""
    import pyarrow as pa  # only this output pays for pyarrow's import

    return pa.table({
        "txn_id": pa.array([f"h{t}" for t in dataset.transaction_id.tolist()], pa.string()),
        "scenario": pa.array(dataset.tx_fraud_scenario, pa.int8()),
    })
