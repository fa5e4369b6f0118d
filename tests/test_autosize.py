import pytest

from pipeline.endpoints.autosize import target_capacity


def loads(running: int, waiting: int, max_running: int, ranks: int = 1) -> dict:
    one = {"num_running_reqs": running, "num_waiting_reqs": waiting, "max_running_requests": max_running}
    return {"loads": [dict(one) for _ in range(ranks)]}


@pytest.mark.parametrize(
    ("capacity", "report", "expected"),
    [
        (64, loads(48, 16, 48), 58),  # too much queued: halfway down to 48 + 4
        (56, loads(48, 8, 48), 54),
        (52, loads(48, 4, 48), 52),  # at the target: stays
        (10, loads(10, 0, 48), 31),  # the server has room: halfway up
        (51, loads(48, 3, 48), 52),  # within one: lands on the target
        (100, loads(0, 0, 0), 100),  # the server reports no limit: keep what we have
        (20, loads(32, 0, 32, ranks=2), 45),  # DP ranks add up: halfway to 64 slots + a queue of 6
        (40, loads(16, 30, 16), 26),  # another client queues there too: halfway to 12, below 16 + 2
    ],
    ids=["shrink", "shrink-more", "steady", "grow", "settle", "no-limit", "dp", "shared-server"],
)
def test_target_capacity(capacity: int, report: dict, expected: int) -> None:
    assert target_capacity(capacity, report) == expected


def test_never_below_one() -> None:
    assert target_capacity(2, loads(4, 500, 4)) == 1
