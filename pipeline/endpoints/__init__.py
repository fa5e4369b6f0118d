"""Talking to one SGLang endpoint, and choosing among many.

The HTTP client every request goes through (`client`, `transport`, `sse`) and the one map of its failures and
statuses to regen's errors (`failures`); request payloads and response parsing; the stream guard that stops a
looping generation as it arrives (`loop_guard`); the parser-off reasoning split (`reasoning`); the endpoint life
cycle (`lifecycle`, `state`); least-loaded and sticky choice (`pool`); the circuit breaker (`breaker`); push-back
from a full server (`pushback`); health probes (`health`); automatic concurrency and fair shares (`autosize`); the
retry policy (`retry`); endpoint membership, the run's endpoints and the endpoints file read mid-run (`fleet`).
"""
