"""PyTorch's flight recorder as the hang report reads it: turned on, dumped inside a rank, formatted."""

from __future__ import annotations

from harness.hangs import flight_recorder
from harness.comm.spawn import run_ranks
from tests.hangs.fr_rank_workers import unmatched_all_reduce_rank


def test_environment_turns_the_recorder_on_unless_the_user_chose_a_size():
    env = flight_recorder.environment(env={})
    assert env["TORCH_FR_BUFFER_SIZE"] == env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == str(flight_recorder.DEFAULT_ENTRIES)
    assert env["TORCH_NCCL_ENABLE_TIMING"] == "1"
    assert flight_recorder.environment(env={"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}) == {}
    assert flight_recorder.environment(env={"TORCH_FR_BUFFER_SIZE": "10"}) == {}


def test_a_gloo_rank_dumps_its_collectives_with_the_pending_one_and_its_frames(tmp_path):
    outcomes = run_ranks(unmatched_all_reduce_rank, 2, {"store_path": str(tmp_path / "store")}, timeout_s=120)
    assert all(o.ok for o in outcomes), [o.describe() for o in outcomes]
    rank0, rank1 = (o.value for o in outcomes)
    entries = rank0["dump"]["gloo"]["entries"]
    assert [e["profiling_name"] for e in entries] == ["gloo:all_reduce", "gloo:all_gather", "gloo:all_reduce"]
    # The third has no peer yet (rank 1 issues its match only after rank 0 dumped). Whether the
    # first two are marked finished depends on when gloo retires them, so that is not asserted.
    assert not flight_recorder.finished(entries[2])
    text = rank0["text"]
    assert "gloo flight recorder: last 3 of 3 collectives" in text, text
    assert "#3 gloo:all_reduce Float[5] in default_pg: scheduled at tests/hangs/fr_rank_workers.py" in text, text
    assert "not completed:" in text and "(the oldest: #" in text, text
    assert [e["profiling_name"] for e in rank1["dump"]["gloo"]["entries"]] == ["gloo:all_reduce", "gloo:all_gather"]


def _entry(seq, state="scheduled", retired=False, name="nccl:all_reduce"):
    return {"collective_seq_id": seq, "profiling_name": name, "input_sizes": [[4]], "input_dtypes": ["Float"],
            "state": state, "retired": retired, "process_group": ["1", "undefined"], "is_p2p": False,
            "frames": [{"name": "all_reduce", "filename": "/x/site-packages/torch/distributed/c10d.py", "line": 1},
                       {"name": "reduce_and_update_fp8_tensors", "filename": "/x/transformer_engine/pytorch/quantization.py",
                        "line": 684}]}


def test_format_names_state_group_and_frames_outside_torch():
    line = flight_recorder.format_entry(_entry(12, "started"), {"1": {"ranks": [0, 1]}})
    assert line == ("#12 nccl:all_reduce Float[4] in group 1 ranks [0, 1]: started at "
                    "transformer_engine/pytorch/quantization.py:684 reduce_and_update_fp8_tensors")
    assert flight_recorder.format_entry(_entry(3, retired=True)).startswith("#3 nccl:all_reduce Float[4] in group 1: completed")


def test_format_dump_says_what_is_missing_or_failed():
    assert flight_recorder.format_dump({}) == "flight recorder: not available in this torch"
    assert "could not dump: RuntimeError: x" in flight_recorder.format_dump({"nccl": {"error": "RuntimeError: x"}})
    assert "no collective recorded" in flight_recorder.format_dump({"gloo": {"entries": [], "total": 0}})


def test_an_empty_recorder_says_whether_it_was_off_or_saw_nothing():
    assert flight_recorder._why_empty({}).startswith("(off unless TORCH_FR_BUFFER_SIZE > 0")
    assert flight_recorder._why_empty({"TORCH_FR_BUFFER_SIZE": "0"}).startswith("(off unless")
    assert flight_recorder._why_empty({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}) == \
        "(it is on, TORCH_NCCL_TRACE_BUFFER_SIZE=2000: this process made none)"
    text = flight_recorder.format_dump({"nccl": {"entries": [_entry(1, "completed"), _entry(2)], "total": 9}}, last=1)
    assert "last 1 of 9 collectives" in text and "#1 " not in text.splitlines()[1], text
    assert "not completed: 1 (the oldest: #2 nccl:all_reduce" in text, text
