"""The one error tree of regen. Every class knows the exit code the CLI returns for it.

    RegenError                      exit 1   base class
    ├── ConfigError                 exit 2   bad config file, unknown key, wrong type, bad --set
    ├── InputError                  exit 2   unreadable input, duplicate ids
    ├── OutputError                 exit 2   RUN_DIR unwritable, disk full, config drift on resume
    │   ├── ConfigDriftError        exit 2   resume with a different generation config
    │   ├── StoreUnavailableError   exit 3   the object store did not answer within the retry window (store/objects.py)
    │   └── CommitLogLostError      exit 3   the bucket lost commit-log records this run relies on (store/commitlog.py)
    ├── LockedError                 exit 4   another live process holds this worker's share of RUN_DIR
    │   └── LeaseLostError          exit 4   this worker's lease in the bucket was taken or went unrenewed
    ├── EndpointError               exit 3   no usable endpoint
    │   ├── PreflightError          exit 3   an endpoint is configured differently from [expect]
    │   ├── FatalEndpointError      exit 3   401/403/404-model: no retry will help
    │   └── InfrastructureError     exit 3   most recent requests failed, not by the prompts' fault (engine/circuit.py)
    ├── RequestError                exit 1   one request failed (never escapes a run; decides retry)
    │   ├── PermanentRequestError            400: the prompt itself is at fault (params)
    │   │   └── ContextLengthError           400: the prompt (with max_tokens) does not fit the server's context
    │   ├── RetryableRequestError            5xx, 503 queue full, timeouts, resets, invalid JSON
    │   ├── EndpointDownError                refused connection: the endpoint, not the prompt, is at fault
    │   │   └── UnresolvedHostError          the host name does not resolve (a typo, a node that is gone)
    │   └── HungRequestError                 past its deadline on a live endpoint (engine/deadline.py): aborted
    └── Interrupted                 exit 130 SIGINT/SIGTERM after a clean drain

A bad completion is not an exception: it is data, a `Verdict` with a reason code.
"""

from __future__ import annotations


class RegenError(Exception):
    exit_code = 1


class ConfigError(RegenError):
    exit_code = 2


class InputError(RegenError):
    exit_code = 2


class OutputError(RegenError):
    exit_code = 2


class ConfigDriftError(OutputError):
    exit_code = 2


class StoreUnavailableError(OutputError):
    """The object store kept failing (connections dropped, 5xx) for the whole retry window: retry later."""

    exit_code = 3


class CommitLogLostError(OutputError):
    """The bucket no longer holds commit-log records this run read (emptied, restored, `_regen/log/` deleted)."""

    exit_code = 3


class LockedError(RegenError):
    exit_code = 4


class LeaseLostError(LockedError):
    """Another process took this worker's lease, or it went unrenewed for a whole ttl: the run stops."""

    exit_code = 4


class EndpointError(RegenError):
    exit_code = 3


class PreflightError(EndpointError):
    exit_code = 3


class FatalEndpointError(EndpointError):
    exit_code = 3


class InfrastructureError(EndpointError):
    """Failures that are not the prompts' dominate the recent requests; the run stops, the prompts stay pending."""

    exit_code = 3


class RequestError(RegenError):
    """One request failed. `status` is the HTTP status when there was one."""

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class PermanentRequestError(RequestError):
    pass


class ContextLengthError(PermanentRequestError):
    """The server says the prompt, or the prompt with `max_tokens`, does not fit its context: a fact about the
    prompt, not a failure; rejected `context_length` on the first such answer, never retried."""


class RetryableRequestError(RequestError):
    pass


class EndpointDownError(RequestError):
    pass


class Interrupted(RegenError):
    """SIGINT, SIGTERM or SIGHUP, after a drain. `summary` is the run's (regen.run.RunSummary) when it got that far:
    the counts to print before exiting."""

    exit_code = 130

    def __init__(self, message: str, summary: object = None):
        super().__init__(message)
        self.summary = summary


class UnresolvedHostError(EndpointDownError):
    """The host name does not resolve: a typo or a node that is gone, not a server still loading its weights."""


class HungRequestError(RequestError):
    """A request past its deadline on an endpoint that answers others: aborted on the server, retried elsewhere
    without using the prompt's attempts."""
