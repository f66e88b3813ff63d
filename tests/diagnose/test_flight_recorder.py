"""Flight Recorder analysis on dumps produced for real by a 3-rank gloo job whose rank 1 stalls (or
calls the wrong collective): the library's verdict with every dump, ours with one missing."""

from __future__ import annotations

import hashlib
import pickle
import shutil
from pathlib import Path

import pytest

from nccl_tune.diagnose.api import diagnose_paths
from nccl_tune.diagnose.flight_recorder import analyse_dumps, load_dump, looks_like_dump, normalise, rank_from_name
from nccl_tune.diagnose.verdict import classify_file
from nccl_tune.failure import FailureClass as F

from .conftest import GlooRun


def _digest(paths: tuple[Path, ...]) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def test_real_dumps_are_recognised(gloo_runs: dict[str, GlooRun]) -> None:
    for path in gloo_runs["stall"].dumps:
        assert looks_like_dump(path)
        assert rank_from_name(path) in (0, 1, 2)
        dump = load_dump(path)
        assert dump["entries"] and "pg_config" in dump
    assert not looks_like_dump(gloo_runs["stall"].log)


def test_stalled_rank_full_set_gets_the_library_verdict(gloo_runs: dict[str, GlooRun]) -> None:
    run = gloo_runs["stall"]
    before = _digest(run.dumps)
    s = analyse_dumps(run.dumps)
    assert s.analysis == "library"
    assert s.ranks_dumped == (0, 1, 2) and s.ranks_missing == ()
    assert s.culprit_rank == 1 and s.culprit_reason == "never entered"
    assert (s.op, s.seq, s.backend) == ("all_reduce", 4, "gloo")
    assert s.input_sizes == [[16]]
    assert s.process_group == "0:default_pg"
    assert s.mismatch is False
    assert "Not all ranks joining collective" in s.library_verdict and "{1}" in s.library_verdict
    by_rank = {st.rank: st for st in s.per_rank}
    assert by_rank[1].last_entered_seq == 3 and by_rank[0].last_entered_seq == 4
    assert _digest(run.dumps) == before, "the user's dumps must not be modified"


def test_mismatch_full_set_gets_the_library_verdict(gloo_runs: dict[str, GlooRun]) -> None:
    s = analyse_dumps(gloo_runs["mismatch"].dumps)
    assert s.analysis == "library"
    assert s.mismatch is True and s.mismatch_kind == "COLLECTIVE_TYPE_MISMATCH"
    assert s.culprit_rank == 1
    assert s.process_group == "1", "the job's second group (new_group), which gloo dumps leave out of pg_config"
    assert "Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH" in s.library_verdict
    assert {st.rank: st.last_op for st in s.per_rank} == {0: "all_reduce", 1: "broadcast", 2: "all_reduce"}


@pytest.mark.parametrize("mode", ["stall", "mismatch"])
def test_one_dump_missing_gives_our_partial_verdict_naming_the_missing_rank(
    gloo_runs: dict[str, GlooRun], mode: str
) -> None:
    dumps = tuple(p for p in gloo_runs[mode].dumps if rank_from_name(p) != 1)
    s = analyse_dumps(dumps)
    assert s.analysis == "partial"
    assert s.ranks_dumped == (0, 2) and s.ranks_missing == (1,)
    assert s.culprit_rank == 1 and s.culprit_reason == "missing dump"
    assert (s.op, s.seq) == ("all_reduce", 4)
    assert "no dump from rank(s) 1" in s.note
    assert s.library_verdict == ""


def test_a_missing_rank_other_than_the_culprit_is_reported_beside_ours(gloo_runs: dict[str, GlooRun]) -> None:
    dumps = tuple(p for p in gloo_runs["stall"].dumps if rank_from_name(p) != 2)
    s = analyse_dumps(dumps)
    assert s.analysis == "partial"
    assert s.ranks_missing == (2,)
    assert s.culprit_rank == 1 and s.culprit_reason == "never entered"
    assert "no dump from rank(s) 2" in s.note


def test_normalise_works_on_a_copy(gloo_runs: dict[str, GlooRun]) -> None:
    dump = load_dump(gloo_runs["stall"].dumps[0])
    fixed = normalise(dump)
    assert "" in dump["pg_config"] and "0" not in dump["pg_config"]
    assert "0" in fixed["pg_config"] and "" not in fixed["pg_config"]
    assert fixed["pg_config"]["0"]["desc"] == "default_pg"


def test_unreadable_and_hostile_dumps_are_reported_not_loaded(tmp_path: Path, gloo_runs: dict[str, GlooRun]) -> None:
    garbage = tmp_path / "trace_5"
    garbage.write_bytes(b"\x80\x04not a pickle")

    class Evil:
        def __reduce__(self):
            return (shutil.rmtree, (str(tmp_path / "victim"),))

    (tmp_path / "victim").mkdir()
    hostile = tmp_path / "trace_6"
    hostile.write_bytes(pickle.dumps({"entries": [Evil()], "version": "2.10", "pg_config": {}}))
    s = analyse_dumps([*gloo_runs["stall"].dumps, garbage, hostile])
    assert (tmp_path / "victim").is_dir(), "a dump must never run code"
    assert len(s.errors) >= 2 and any("trace_6" in e for e in s.errors)
    assert s.ranks_dumped == (0, 1, 2)
    assert s.culprit_rank == 1


def test_classify_the_real_run_log_with_its_dumps(gloo_runs: dict[str, GlooRun]) -> None:
    run = gloo_runs["stall"]
    assert "Timed out waiting" in run.log.read_text()
    v = classify_file(run.log, exit_code=1, fr_dumps=run.dumps)
    assert v.failure_class is F.COLLECTIVE_TIMEOUT
    assert v.rank == 1
    assert v.flight_recorder is not None and v.flight_recorder["culprit_rank"] == 1
    assert "rank 1 is behind, it never entered all_reduce #4" in v.advice
    mism = gloo_runs["mismatch"]
    v2 = classify_file(mism.log, exit_code=1, fr_dumps=mism.dumps)
    assert (v2.failure_class, v2.rank) == (F.COLLECTIVE_MISMATCH, 1)


def test_diagnose_a_trial_folder_and_a_folder_of_dumps(gloo_runs: dict[str, GlooRun], tmp_path: Path) -> None:
    run = gloo_runs["stall"]
    trial = tmp_path / "trial"
    shutil.copytree(run.folder, trial)
    (trial / "result.json").write_text('{"exit_code": null, "signal_name": "SIGABRT"}')
    only_dumps = tmp_path / "dumps"
    shutil.copytree(run.folder / "fr", only_dumps)
    d_trial, d_dumps = diagnose_paths([trial, only_dumps])
    assert (d_trial.verdict.failure_class, d_trial.verdict.rank) == (F.COLLECTIVE_TIMEOUT, 1)
    assert d_trial.signal_name == "SIGABRT"
    assert [p.name for p in d_trial.inputs] == [
        "output.log",
        "nccl_trace_rank_0",
        "nccl_trace_rank_1",
        "nccl_trace_rank_2",
    ]
    assert (d_dumps.verdict.failure_class, d_dumps.verdict.rank) == (F.COLLECTIVE_TIMEOUT, 1)
    assert d_dumps.verdict.evidence[0].source == "flight-recorder"
    j = d_dumps.to_json()
    assert j["flight_recorder"]["culprit_rank"] == 1 and j["class"] == "collective_timeout"


def _nccl_shaped_dumps(folder: Path, template: dict, world: int, behind: int, seq: int) -> list[Path]:
    """Per-rank dumps in the NCCL layout (``nccl:`` names, started/completed states, full
    ``pg_config``), built on the entry schema of a real dump: every rank enters ``seq`` in
    ``_all_gather_base`` except ``behind``, which is one collective short."""
    base = template["entries"][0]
    paths = []
    for rank in range(world):
        last = seq - 1 if rank == behind else seq
        entries = []
        for i, s in enumerate(range(seq - 5, last + 1)):
            e = dict(base)
            e.update(
                record_id=i,
                collective_seq_id=s,
                op_id=s,
                profiling_name="nccl:_all_gather_base",
                process_group=("0", "default_pg"),
                input_sizes=[[1024]],
                output_sizes=[[1024 * world]],
                state="completed" if s < seq else "started",
                retired=s < seq,
                timeout_ms=600000,
                input_dtypes=["BFloat16"],
                output_dtypes=["BFloat16"],
            )
            entries.append(e)
        dump = {
            "version": template["version"],
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
            "pg_status": {
                "0": {
                    "last_enqueued_collective": last,
                    "last_started_collective": last,
                    "last_completed_collective": seq - 1,
                }
            },
            "entries": entries,
        }
        path = folder / f"nccl_trace_rank_{rank}"
        path.write_bytes(pickle.dumps(dump))
        paths.append(path)
    return paths


def test_nccl_layout_dumps_of_eight_ranks(tmp_path: Path, gloo_runs: dict[str, GlooRun]) -> None:
    template = load_dump(gloo_runs["stall"].dumps[0])
    dumps = _nccl_shaped_dumps(tmp_path, template, world=8, behind=5, seq=19962)
    full = analyse_dumps(dumps)
    assert full.analysis == "library" and full.culprit_rank == 5
    assert (full.op, full.seq, full.backend) == ("_all_gather_base", 19962, "nccl")
    assert "missing ranks: {5}" in full.library_verdict
    partial = analyse_dumps([p for p in dumps if rank_from_name(p) != 2])
    assert partial.analysis == "partial" and partial.ranks_missing == (2,)
    assert partial.culprit_rank == 5 and "no dump from rank(s) 2" in partial.note
