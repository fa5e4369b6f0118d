import random

from pipeline.endpoints.retry import RetryPolicy


def test_full_jitter_is_capped_and_grows() -> None:
    policy = RetryPolicy(base_s=1.0, max_s=8.0, rng=random.Random(1))
    for attempt in range(1, 10):
        ceiling = min(8.0, 2 ** (attempt - 1))
        delays = [policy.delay_for(attempt) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.8  # really spread over the whole range


def test_retry_after_is_a_floor_but_capped() -> None:
    policy = RetryPolicy(base_s=0.1, max_s=5.0, rng=random.Random(2))
    assert policy.delay_for(1, retry_after=3.0) >= 3.0
    assert policy.delay_for(1, retry_after=100.0) == 5.0
