import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import ConfigError
from pipeline.store.partition import check_partition, id_hash, id_hashes, owns, owns_many


def test_id_hash_is_stable_across_processes_and_versions():
    # Pinned: a changed hash would reshuffle every worker's share of an existing run.
    assert id_hash("prompt-0") == int.from_bytes(
        bytes.fromhex(__import__("hashlib").blake2b(b"prompt-0", digest_size=8).hexdigest()), "little"
    )
    assert 0 <= id_hash("") < 2**64


def test_id_hashes_matches_id_hash():
    ids = ["a", "b", "ünïcode", ""]
    assert id_hashes(ids).tolist() == [id_hash(i) for i in ids]
    assert id_hashes([]).dtype == np.uint64


@settings(deadline=None)  # a loaded CI machine must not turn slowness into failure
@given(ids=st.lists(st.text(), unique=True, max_size=200), num_workers=st.integers(1, 64))
def test_partition_is_disjoint_and_complete(ids, num_workers):
    shares = [[i for i in ids if owns(id_hash(i), w, num_workers)] for w in range(num_workers)]
    flat = [i for share in shares for i in share]
    assert sorted(flat) == sorted(ids)  # complete, and no id twice: disjoint


@settings(deadline=None)  # a loaded CI machine must not turn slowness into failure
@given(ids=st.lists(st.text(), max_size=100), num_workers=st.integers(1, 16), worker=st.integers(0, 15))
def test_owns_many_agrees_with_owns(ids, num_workers, worker):
    worker %= num_workers
    hashes = id_hashes(ids)
    assert owns_many(hashes, worker, num_workers).tolist() == [owns(id_hash(i), worker, num_workers) for i in ids]


@pytest.mark.parametrize(("worker", "num"), [(0, 0), (2, 2), (-1, 3)], ids=["no-workers", "index-too-big", "negative"])
def test_check_partition_rejects_bad_values(worker, num):
    with pytest.raises(ConfigError):
        check_partition(worker, num)
