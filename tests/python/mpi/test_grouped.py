"""Grouped collectives are negotiated and executed as one group (Horovod 0.28's
group_id): results, and a disagreement inside a group failing every member."""

import json

import horovodlite.torch as hvd
import pytest
import torch


def _ramp(n, salt=0):
    return torch.arange(n, dtype=torch.float32) + hvd.rank() + salt


def _expected_sum(n, salt=0):
    s = hvd.size()
    return torch.arange(n, dtype=torch.float32) * s + s * (s - 1) / 2 + s * salt


def test_grouped_allreduce_sync_and_async(size):
    tensors = [_ramp(3 + i, i) for i in range(4)]
    out = hvd.grouped_allreduce(tensors, name="py.group.sync", op=hvd.Sum)
    for i, t in enumerate(out):
        assert torch.equal(t, _expected_sum(3 + i, i))
    for _step in range(3):  # later steps hit the response cache as a group
        handle = hvd.grouped_allreduce_async([_ramp(5), _ramp(6)], name="py.group.async", op=hvd.Average)
        got = hvd.synchronize(handle)
        assert hvd.poll(handle)
        assert torch.allclose(got[0], _expected_sum(5) / size)
        assert torch.allclose(got[1], _expected_sum(6) / size)
    inplace = [_ramp(4), _ramp(2)]
    hvd.grouped_allreduce_(inplace, name="py.group.inplace", op=hvd.Sum)
    assert torch.equal(inplace[0], _expected_sum(4)) and torch.equal(inplace[1], _expected_sum(2))


def test_grouped_allgather(rank, size):
    tensors = [torch.full((rank + 1 + i, 2), float(10 * rank + i)) for i in range(3)]
    out = hvd.grouped_allgather(tensors, name="py.group.gather")
    for i, t in enumerate(out):
        rows = [torch.full((r + 1 + i, 2), float(10 * r + i)) for r in range(size)]
        assert torch.equal(t, torch.cat(rows))
    handle = hvd.grouped_allgather_async(tensors)
    assert [t.shape[0] for t in hvd.synchronize(handle)] == [sum(r + 1 + i for r in range(size)) for i in range(3)]


def test_grouped_reducescatter(rank, size):
    tensors = [torch.arange(2 * size + i, dtype=torch.float32) + rank for i in range(3)]
    out = hvd.grouped_reducescatter(tensors, name="py.group.scatter", op=hvd.Sum)
    for i, t in enumerate(out):
        total = torch.arange(2 * size + i, dtype=torch.float32) * size + size * (size - 1) / 2
        assert torch.equal(t, torch.tensor_split(total, size)[rank])
    out = hvd.synchronize(hvd.grouped_reducescatter_async(tensors, op=hvd.Average))
    assert torch.allclose(out[0], (torch.arange(2 * size, dtype=torch.float32) * size
                                   + size * (size - 1) / 2).tensor_split(size)[rank] / size)


@pytest.mark.skipif(hvd.size() < 2, reason="needs two ranks to disagree")
def test_mismatch_inside_a_group_fails_every_member(rank, size):
    n = 6 if rank == size - 1 else 4
    handle = hvd.grouped_allreduce_async([_ramp(4), _ramp(n), _ramp(4)], name="py.group.bad", op=hvd.Sum)
    with pytest.raises(hvd.HorovodInternalError) as info:
        hvd.synchronize(handle)
    msg = str(info.value)
    assert "grouped allreduce of 3 tensors" in msg
    assert "Mismatched shapes for tensor 'py.group.bad.1'" in msg
    for r in range(size):
        assert "rank %d:" % r in msg
    # Every member fails with the group's error (none is left in flight).
    for part in handle._parts:
        with pytest.raises(RuntimeError) as member:
            part.synchronize()
        assert "Mismatched shapes for tensor 'py.group.bad.1'" in str(member.value)


@pytest.mark.skipif(hvd.size() < 2, reason="needs two ranks to disagree")
def test_group_split_differently_on_one_rank_is_an_error(rank):
    # Rank 0 groups both tensors; the others group the first alone and reduce the
    # second on its own: the ranks disagree about the group, and all hear it.
    if rank == 0:
        handles = [hvd.grouped_allreduce_async([_ramp(2), _ramp(2)], name="py.group.split")]
    else:
        handles = [hvd.grouped_allreduce_async([_ramp(2)], name="py.group.split"),
                   hvd.allreduce_async(_ramp(2), name="py.group.split.1")]
    errors = []
    for h in handles:
        try:
            hvd.synchronize(h)
        except hvd.HorovodInternalError as e:
            errors.append(str(e))
    assert any("Mismatched groups for tensor 'py.group.split.0'" in e for e in errors), errors
    if rank != 0:  # rank 0's one grouped handle raises its first member's error
        assert any("Mismatched groups for tensor 'py.group.split.1'" in e for e in errors), errors
    hvd.barrier()


def _timeline_rows(path):
    """{tensor name: [event names]} from a timeline file (rank 0 writes it)."""
    with open(path) as f:
        trace = json.load(f)
    names = {e["pid"]: e["args"]["name"] for e in trace if e.get("ph") == "M" and e.get("name") == "process_name"}
    rows = {}
    for e in trace:
        if e.get("ph") != "M" and e.get("pid") in names:
            rows.setdefault(names[e["pid"]], []).append(e["name"])
    return rows


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32,
                                   torch.float64])
def test_grouped_allgather_and_reducescatter_are_fused(dtype, rank, size, tmp_path):
    """A group's allgathers (uneven first dimensions, one rank with no rows) and
    its reducescatters run as one fused collective each (the timeline shows the
    fusion-buffer copies on every member's row; a tensor run on its own has
    none), with the results of the per-tensor ops."""
    tag = str(dtype).split(".")[-1]
    path = hvd.broadcast_object(str(tmp_path / "fused.json"), root_rank=0, name="py.fused.path." + tag)

    def values(shape, salt, r=rank):
        return ((torch.arange(int(torch.Size(shape).numel())).reshape(shape) * 3 + 7 * r + salt) % 50).to(dtype)

    def gather_shapes(r):
        return [(r + 1, 3), ((r % 2) * 2, 2, 2), (size - r,)]

    gather = [values(s, i) for i, s in enumerate(gather_shapes(rank))]
    scatter = [values(s, 3 + i) for i, s in enumerate([(2 * size + 1, 3), (1, 2), (3 * size + 2,)])]
    single_gather = [hvd.allgather(t, name="py.fused.ref.ag.%s.%d" % (tag, i)) for i, t in enumerate(gather)]
    single_scatter = [hvd.reducescatter(t, op=hvd.Sum, name="py.fused.ref.rs.%s.%d" % (tag, i))
                      for i, t in enumerate(scatter)]
    hvd.start_timeline(path)
    got_gather = hvd.grouped_allgather(gather, name="py.fused.ag." + tag)
    got_scatter = hvd.grouped_reducescatter(scatter, op=hvd.Sum, name="py.fused.rs." + tag)
    hvd.barrier()
    hvd.stop_timeline()
    for got, ref in zip(got_gather + got_scatter, single_gather + single_scatter):
        assert got.dtype == ref.dtype and torch.equal(got, ref)
    for i, ref in enumerate(single_gather):  # and the gather itself
        assert torch.equal(ref, torch.cat([values(gather_shapes(r)[i], i, r) for r in range(size)]))
    if rank == 0:
        rows = _timeline_rows(path)
        for name in ["py.fused.ag.%s.%d" % (tag, i) for i in range(3)] + \
                    ["py.fused.rs.%s.%d" % (tag, i) for i in range(3)]:
            assert name in rows, sorted(rows)
            assert "MEMCPY_IN_FUSION_BUFFER" in rows[name], (name, rows[name])
            assert "MEMCPY_OUT_FUSION_BUFFER" in rows[name], (name, rows[name])
        assert rows["py.fused.ag.%s.0" % tag].count("MPI_ALLGATHERV") == 1
        assert rows["py.fused.rs.%s.0" % tag].count("MPI_REDUCE_SCATTER") == 1
