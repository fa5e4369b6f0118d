import pytest

from pipeline.endpoints.autosize import target_capacity


def loads(running: int, waiting: int, max_running: int, ranks: int = 1) -> dict:
    one = {"num_running_reqs": running, "num_waiting_reqs": waiting, "max_running_requests": max_running}
    return {"loads": [dict(one) for _ in range(ranks)]}


@pytest.mark.parametrize(
    ("capacity", "report", "inflight", "expected"),
    [
        (64, loads(48, 16, 48), None, 52),  # too much queued: down to 48 + a queue of 4 at once
        (56, loads(48, 8, 48), None, 52),
        (52, loads(48, 4, 48), None, 52),  # at the target: stays
        (10, loads(10, 0, 48), None, 31),  # the server has room: halfway up (its figures lag what we send)
        (51, loads(48, 3, 48), None, 52),  # within one: lands on the target
        (100, loads(0, 0, 0), None, 100),  # the server reports no limit: keep what we have
        (20, loads(10, 0, 32, ranks=2), None, 45),  # DP ranks add up: halfway to 64 slots + a queue of 6
        (40, loads(16, 30, 16), 40, 12),  # another client has 6 there: our share is 18 - 6
        (20, loads(16, 10, 16), 10, 2),  # another worker holds 16: we keep what is left of 16 + 2
    ],
    ids=["shrink", "shrink-more", "steady", "grow", "settle", "no-limit", "dp", "shared-server", "other-worker"],
)
def test_target_capacity(capacity: int, report: dict, inflight: int | None, expected: int) -> None:
    assert target_capacity(capacity, report, inflight=inflight) == expected


def _share(workers: list[int], max_running: int, rounds: int, busy: list[bool]) -> list[list[int]]:
    """Workers with these capacities, each keeping its capacity in flight while busy, resized in turn."""
    history = []
    for _ in range(rounds):
        for i in range(len(workers)):
            inflight = [c if b else 0 for c, b in zip(workers, busy, strict=True)]
            total = sum(inflight)
            report = loads(min(total, max_running), max(0, total - max_running), max_running)
            if busy[i]:
                workers[i] = target_capacity(workers[i], report, inflight=inflight[i], workers=len(workers))
        history.append(list(workers))
    return history


def test_workers_sharing_a_server_never_exceed_it_and_one_that_finishes_leaves_its_share() -> None:
    # 4 workers on a 16-slot server (target 16 + a queue of 3 = workers - 1), each starting at its quarter.
    history = _share([5, 5, 5, 5], 16, rounds=20, busy=[True] * 4)
    assert all(sum(caps) <= 19 for caps in history)
    assert sum(history[-1]) >= 16  # the batch stays full
    busy = [True, True, True, False]  # worker 3 has finished: the others grow into its share
    after = _share(history[-1][:3] + [0], 16, rounds=20, busy=busy)
    assert all(sum(caps[:3]) <= 19 for caps in after) and sum(after[-1][:3]) >= 16


def test_never_below_one() -> None:
    assert target_capacity(2, loads(4, 500, 4)) == 1
