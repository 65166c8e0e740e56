"""watch shows `fraudstream quality`'s figures (precision, recall over every day, all labels
and those within 7 days), and says when that page does not answer."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from app.quality.book import QualityBook
from app.quality.exporter import QualityCollector
from app.transactions.labels import LabelRecord
from app.watch.frame import Reading, build_frame
from app.watch.render import render
from app.watch.samples import Samples, parse

T0 = 1_767_225_600_000


def _quality_page() -> str:
    book = QualityBook(keep_days=0)
    for i in range(4):
        book.served(f"t{i}", "c1", T0 + i)
    for txn in ("t0", "t1"):
        book.action("freeze_card", txn, "c1", T0)
    book.label(LabelRecord("a", "t0", None, 1, T0 + 1000, "test"))
    book.label(LabelRecord("b", "t2", None, 1, T0 + 10 * 86_400_000, "test"))
    collector = QualityCollector()
    collector.update(book)
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def _reading(quality: str | None) -> Reading:
    return Reading(at_s=1.0, workers=Samples(), workers_up=0, workers_total=0,
                   service=Samples(), service_up=False, offsets={},
                   quality=parse([quality] if quality else []), quality_up=quality is not None)


def _screen(reading: Reading) -> str:
    console = Console(width=160, record=True)
    console.print(render(build_frame(reading, None, group="g"), title="t"))
    return console.export_text()


def test_the_quality_line_shows_precision_and_recall():
    frame = build_frame(_reading(_quality_page()), None, group="g")
    assert frame.quality is not None
    assert (frame.quality.precision, frame.quality.recall) == (0.5, 0.5)
    assert (frame.quality.precision_7d, frame.quality.recall_7d) == (0.5, 1.0)
    assert (frame.quality.freezes, frame.quality.fraud) == (2, 2)
    assert ("precision of freezes 0.500 · recall of fraud 0.500 · labels within 7 d: "
            "0.500 / 1.000 · 2 freezes, 2 fraud") in _screen(_reading(_quality_page()))


def test_no_quality_page_is_said():
    assert build_frame(_reading(None), None, group="g").quality is None
    assert "`fraudstream quality` not answering" in _screen(_reading(None))
