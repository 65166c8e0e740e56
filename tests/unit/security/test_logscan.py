"""The log scanner used by the secure and fault suites finds what it must, and only that."""

from __future__ import annotations

from pathlib import Path

from tests.support.logscan import leaks


def test_finds_secrets_and_card_ids_but_not_hex_keys(tmp_path: Path):
    log = tmp_path / "w.log"
    log.write_text("ok line\n"
                   "token=s3cr3t-tok here\n"
                   "action applied key=0c12345678ab card_ref=00c0000012ff\n"
                   '{"card_id":"c0000042"}\n'
                   "card_id=c0000043 done\n")
    found = leaks([log], ["s3cr3t-tok", ""])
    assert found == ["w.log:2: secret #0", "w.log:4: card id c0000042",
                     "w.log:5: card id c0000043"]
    assert leaks([log], [], cards={"c0000043"}) == ["w.log:5: card id c0000043"]


def test_a_uuid_whose_first_group_reads_like_a_card_id_is_no_card_id(tmp_path: Path):
    log = tmp_path / "w.log"
    log.write_text("Joined group 'g' (generation 2) with member_id "
                   "faust-0.15.3-c4417164-6e5b-4c84-a3cb-e2df1ccc3a7f\n"
                   "froze c4417164-card in batch\n")
    assert leaks([log], []) == ["w.log:2: card id c4417164"]
