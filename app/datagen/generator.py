"""The generator: one deterministic function from a GeneratorConfig to a GeneratedLog."""

from __future__ import annotations

import hashlib
from typing import Final

import numpy as np

from app.datagen.columns import LEGIT, TxnColumns
from app.datagen.config import DAY_MS, GeneratorConfig
from app.datagen.delivery import arrange
from app.datagen.drift import apply_drift
from app.datagen.fraud import fraud_incidents
from app.datagen.lines import transaction
from app.datagen.log import GeneratedLog
from app.datagen.malformed import KINDS, BadMessage, CorpusContext, build_bad_message
from app.datagen.population import default_merchant_count, draw_cards, draw_merchants
from app.datagen.spending import legit_spending
from app.transactions.contract import FIELDS

#: A legitimate transaction's label is final once no chargeback came within this delay.
LEGIT_LABEL_DELAY_MS: Final = 7 * DAY_MS
#: A fraudulent transaction's label arrives as a chargeback this many ms after it.
CHARGEBACK_DELAY_MS: Final = (DAY_MS, 10 * DAY_MS)

# Independent random streams (SeedSequence children): changing how a log is delivered
# (displacement, redelivery, bad messages) leaves its transactions byte-identical.
# A drifted log draws its changes from a seventh stream (spawn(7)'s first six children are
# spawn(6)'s): the undrifted parts stay those of the same log without --drift.
_POPULATION, _LEGIT, _FRAUD, _LABELS, _DELIVERY, _BAD, _DRIFT = range(7)


def generate_log(config: GeneratorConfig) -> GeneratedLog:
    """Generate the log `config` describes: same config, same log, byte for byte."""
    streams = [
        np.random.Generator(np.random.PCG64(child))
        for child in np.random.SeedSequence(config.seed).spawn(7)
    ]
    pop = streams[_POPULATION]
    cards = draw_cards(pop, config.cards, start_ms=config.start_ms, days=config.days)
    merchants = draw_merchants(pop, config.merchants or default_merchant_count(config.cards))

    fraud = fraud_incidents(
        streams[_FRAUD], cards, merchants, round(config.fraud_rate * config.txns),
        start_ms=config.start_ms, days=config.days,
    )
    legit_count = config.txns - len(fraud)
    if legit_count < 0:
        raise ValueError(
            f"{config.txns} transactions cannot hold the {len(fraud)} fraudulent ones that "
            "whole fraud incidents need: raise txns or lower fraud_rate"
        )
    legit = legit_spending(
        streams[_LEGIT], cards, merchants, legit_count, start_ms=config.start_ms,
        days=config.days,
    )
    both = TxnColumns.concat([legit, fraud])
    txns = both.take(np.argsort(both.ts, kind="stable"))
    if config.drift is not None:
        txns = _drifted(streams[_DRIFT], config, txns, cards, merchants)
    label_ts = _label_times(streams[_LABELS], txns)

    tag = transactions_tag(config)
    bad = _bad_messages(streams[_BAD], config, tag, txns)
    delivery = arrange(
        streams[_DELIVERY], txns.card, txns.ts, out_of_order=config.out_of_order,
        redelivery=config.redelivery, bad_messages=len(bad),
        allowed_lateness_ms=config.allowed_lateness_ms,
    )
    return GeneratedLog(config, tag, txns, label_ts, delivery, bad)


def transactions_tag(config: GeneratorConfig) -> str:
    """8 hex digits naming the settings that shape the transactions (not their delivery)."""
    shape: tuple[object, ...] = (config.seed, config.cards, config.txns, config.start_ms,
                                 config.days, repr(config.fraud_rate), config.merchants)
    if config.drift is not None:
        shape = (*shape, config.drift.describe())
    return hashlib.blake2b(repr(shape).encode(), digest_size=4).hexdigest()


def _drifted(rng: np.random.Generator, config: GeneratorConfig, txns: TxnColumns,
             cards: object, merchants: object) -> TxnColumns:
    spec = config.drift
    assert spec is not None
    since = config.start_ms if spec.from_ms is None else spec.from_ms
    extra = None
    if spec.fraud_rate is not None:
        later = int((txns.ts >= since).sum())
        days = max(1, -(-(config.end_ms - since) // DAY_MS))
        extra = fraud_incidents(rng, cards, merchants, round(spec.fraud_rate * later),  # type: ignore[arg-type]
                                start_ms=since, days=days)
        extra = extra.take(np.flatnonzero(extra.ts < config.end_ms))
    return apply_drift(rng, txns, spec, start_ms=config.start_ms, extra_fraud=extra)


def _label_times(rng: np.random.Generator, txns: TxnColumns) -> np.ndarray:
    chargeback = rng.integers(CHARGEBACK_DELAY_MS[0], CHARGEBACK_DELAY_MS[1] + 1, len(txns))
    return txns.ts + np.where(txns.pattern == LEGIT, LEGIT_LABEL_DELAY_MS, chargeback)


def _bad_messages(
    rng: np.random.Generator, config: GeneratorConfig, tag: str, txns: TxnColumns
) -> tuple[BadMessage, ...]:
    """Bad messages built from real transactions (so they name real cards), with their own ids."""
    count = round(config.malformed * config.txns)
    ctx = CorpusContext(now_ms=config.validation_now_ms, max_bytes=config.max_message_bytes)
    kinds = rng.integers(0, len(KINDS), count).tolist()
    rows = rng.integers(0, len(txns), count).tolist()
    out = []
    for j, (k, row) in enumerate(zip(kinds, rows, strict=True)):
        txn = transaction(tag, txns, row)
        base = {name: getattr(txn, name) for name in FIELDS}
        base["txn_id"] = f"t{tag}-x{j:08d}"
        out.append(build_bad_message(KINDS[k], base, rng, ctx))
    return tuple(out)
