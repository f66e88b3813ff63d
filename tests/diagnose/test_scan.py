"""The cover literals the block scan looks for (``diagnose.scan``)."""

from __future__ import annotations

from nccl_tune.diagnose.reader import LogClassifier
from nccl_tune.diagnose.rules import RULES
from nccl_tune.diagnose.scan import MAX_COVERS, CoverFinder


def test_every_rule_key_holds_a_cover_so_the_scan_never_skips_its_lines() -> None:
    covers = LogClassifier()._finder.covers
    for rule in RULES:
        for key in rule.keys:
            assert any(c in key for c in covers), (rule.name, key)


def test_the_covers_stay_few_enough_for_the_compiled_search_s_fast_path() -> None:
    """Each rule key no hand-picked cover is part of becomes a cover; past ``MAX_COVERS`` the scan of
    healthy output slows by a third (the benchmark ``ingest.py`` shows it): a new rule's keys should
    share a cover instead."""
    covers = LogClassifier()._finder.covers
    assert len(covers) <= MAX_COVERS, [c for c in covers][-10:]


def test_a_line_holding_a_cover_anywhere_is_found_whole() -> None:
    finder = CoverFinder(("rror", "destroy"))
    buf = b"step 1\nsome Error here\nstep 2\nWARNING: destroy_process_group() was not called\nstep 3\n"
    spans = finder.line_spans(buf)
    assert [buf[a:b] for a, b in spans] == [b"some Error here", b"WARNING: destroy_process_group() was not called"]
