"""Byte formats of generated lines: transactions as canonical JSON, labels, and the ids in them."""

from __future__ import annotations

from typing import Final

import numpy as np

from app.datagen.catalog import CHANNEL_NAMES, COUNTRIES
from app.datagen.columns import LEGIT, TxnColumns
from app.transactions.contract import Transaction

# Field order and spacing are those of orjson.dumps(Transaction.to_dict()): the canonical form.
_TXN_FORMAT: Final = (
    b'{"txn_id":"t%s-%09d","card_id":"c%07d","ts_ms":%d,"amount_minor":%d,"currency":"%s",'
    b'"merchant_id":"m%07d","mcc":%d,"country":"%s","channel":"%s"}'
)
# The labelled transaction's merchant and event time ride along: they feed the merchant features.
_LABEL_FORMAT: Final = (b'{"txn_id":"t%s-%09d","label":%d,"label_ts_ms":%d,"merchant_id":"m%07d",'
                        b'"ts_ms":%d}')
_CURRENCY: Final = [c.currency.encode() for c in COUNTRIES]
_COUNTRY: Final = [c.code.encode() for c in COUNTRIES]
_CHANNEL: Final = [c.encode() for c in CHANNEL_NAMES]


def txn_id(tag: str, row: int) -> str:
    """The txn_id of transaction `row` in a log whose transactions hash to `tag`."""
    return f"t{tag}-{row:09d}"


def card_id(card: int) -> str:
    """The card_id of card number `card`."""
    return f"c{card:07d}"


def merchant_id(merchant: int) -> str:
    """The merchant_id of merchant number `merchant`."""
    return f"m{merchant:07d}"


def transaction(tag: str, txns: TxnColumns, row: int) -> Transaction:
    """Transaction `row` as the contract's record."""
    country = COUNTRIES[int(txns.country[row])]
    return Transaction(
        txn_id=txn_id(tag, row), card_id=card_id(int(txns.card[row])), ts_ms=int(txns.ts[row]),
        amount_minor=int(txns.amount[row]), currency=country.currency,
        merchant_id=merchant_id(int(txns.merchant[row])), mcc=int(txns.mcc[row]),
        country=country.code, channel=CHANNEL_NAMES[int(txns.channel[row])],
    )


def txn_lines(tag: str, txns: TxnColumns, rows: np.ndarray) -> list[bytes]:
    """JSON bytes (no newline) of the transactions at `rows`, in that order."""
    t = tag.encode()
    country = txns.country[rows].tolist()
    return [
        _TXN_FORMAT % (t, r, c, ts, a, _CURRENCY[k], m, mcc, _COUNTRY[k], _CHANNEL[ch])
        for r, c, ts, a, m, mcc, k, ch in zip(
            rows.tolist(), txns.card[rows].tolist(), txns.ts[rows].tolist(),
            txns.amount[rows].tolist(), txns.merchant[rows].tolist(), txns.mcc[rows].tolist(),
            country, txns.channel[rows].tolist(), strict=True,
        )
    ]


def label_lines(tag: str, txns: TxnColumns, label_ts: np.ndarray, rows: np.ndarray) -> list[bytes]:
    """Label JSON bytes (no newline) of the transactions at `rows`, in that order."""
    t = tag.encode()
    fraud = (txns.pattern[rows] != LEGIT).astype(np.int64).tolist()
    return [
        _LABEL_FORMAT % (t, r, f, lt, m, ts)
        for r, f, lt, m, ts in zip(rows.tolist(), fraud, label_ts[rows].tolist(),
                                   txns.merchant[rows].tolist(), txns.ts[rows].tolist(),
                                   strict=True)
    ]


def string_columns(tag: str, txns: TxnColumns, rows: np.ndarray) -> dict[str, list[str]]:
    """The string-valued contract fields of `rows` (for columnar output)."""
    return {
        "txn_id": [txn_id(tag, r) for r in rows.tolist()],
        "card_id": [card_id(c) for c in txns.card[rows].tolist()],
        "currency": [COUNTRIES[k].currency for k in txns.country[rows].tolist()],
        "merchant_id": [merchant_id(m) for m in txns.merchant[rows].tolist()],
        "country": [COUNTRIES[k].code for k in txns.country[rows].tolist()],
        "channel": [CHANNEL_NAMES[ch] for ch in txns.channel[rows].tolist()],
    }
