"""How SGLang's and vLLM's error answers map to regen's errors (endpoints/failures.py): a prompt that does not fit
the context is its own fact (ContextLengthError, rejected `context_length` once), an unknown model names the model."""

from __future__ import annotations

import orjson
import pytest

from pipeline.endpoints.failures import raise_for_status
from pipeline.errors import ContextLengthError, FatalEndpointError, PermanentRequestError

URL = "http://127.0.0.1:8000"


def _raise(status: int, body: object) -> None:
    raise_for_status(status, orjson.dumps(body), URL, retry_after=None, location=None)


@pytest.mark.parametrize(
    "message",
    [
        "The input (5000 tokens) is longer than the model's context length (4096 tokens).",  # SGLang
        "Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total of "
        "5000 tokens: 1000 tokens from the input messages and 4000 tokens for the completion.",  # SGLang
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (1000 in the "
        "messages, 4000 in the completion). Please reduce the length of the messages or completion.",  # vLLM
        "'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum context length is 4096 "
        "tokens and your request has 12 input tokens (4096 > 4096 - 12).",  # vLLM 0.32
    ],
)
def test_a_prompt_that_does_not_fit_is_a_context_length_error(message: str) -> None:
    vllm = {"error": {"message": message, "type": "BadRequestError", "param": "max_tokens", "code": 400}}
    for body in ({"object": "error", "message": message, "code": 400}, vllm):
        with pytest.raises(ContextLengthError) as caught:
            _raise(400, body)
        assert message in str(caught.value)


def test_other_400s_stay_permanent_request_errors() -> None:
    with pytest.raises(PermanentRequestError) as caught:
        _raise(400, {"error": {"message": "temperature must be non-negative", "code": 400}})
    assert not isinstance(caught.value, ContextLengthError)


def test_an_unknown_model_names_the_model_and_where_to_look() -> None:
    body = {"error": {"message": "The model `Qwen3.6-27B` does not exist.", "type": "NotFoundError", "code": 404}}
    with pytest.raises(FatalEndpointError) as caught:
        _raise(404, body)
    text = str(caught.value)
    assert "`Qwen3.6-27B` does not exist" in text and "generation.model" in text and "/v1/models" in text
