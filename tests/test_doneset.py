import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.store.doneset import DoneSet
from pipeline.store.partition import id_hash, id_hashes

u64 = st.integers(0, 2**64 - 1)


@settings(deadline=None)  # a loaded CI machine must not turn slowness into failure
@given(initial=st.lists(u64), added=st.lists(u64), probes=st.lists(u64))
def test_behaves_like_a_set(initial, added, probes):
    done = DoneSet(np.array(initial, dtype=np.uint64))
    reference = set(initial)
    for h in added:
        done.add(h)
        reference.add(h)
    assert len(done) == len(reference)
    queries = probes + initial + added
    assert done.contains_many(np.array(queries, dtype=np.uint64)).tolist() == [q in reference for q in queries]
    assert all((q in done) == (q in reference) for q in queries)
    assert done.to_array().tolist() == sorted(reference)


def test_many_adds_merge_and_stay_correct():
    done = DoneSet()
    hashes = id_hashes(f"id-{i}" for i in range(50_000))
    for h in hashes.tolist():
        done.add(h)
    assert len(done) == 50_000
    assert done.contains_many(hashes).all()
    assert not done.contains_many(id_hashes(["other"])).any()


def test_one_million_ids_cost_about_8_mb():
    done = DoneSet(np.random.default_rng(0).integers(0, 2**63, size=1_000_000, dtype=np.uint64))
    for i in range(10_000):
        done.add(id_hash(f"new-{i}"))
    assert done.nbytes < 16_000_000


def test_difference_and_from_ids():
    a = DoneSet.from_ids(["x", "y", "z"])
    b = DoneSet.from_ids(["y"])
    assert sorted(a.difference(b).to_array().tolist()) == sorted([id_hash("x"), id_hash("z")])
    assert "x" not in a  # only hashes are members
