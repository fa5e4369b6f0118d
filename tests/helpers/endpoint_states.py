"""`endpoint`: a pool member over a real (unused) client, for the Pool tests that never send a request."""

from __future__ import annotations

from pipeline.config import ClientConfig, GenerationConfig
from pipeline.endpoints.client import EndpointClient
from pipeline.endpoints.state import EndpointState


def endpoint(url: str, capacity: int) -> EndpointState:
    client = EndpointClient(url, gen=GenerationConfig(), client=ClientConfig(), concurrency=capacity)
    return EndpointState(client=client, capacity=capacity)
