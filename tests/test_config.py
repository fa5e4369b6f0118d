from pathlib import Path

import pytest

from pipeline.config import Config, config_from_dict, load_config
from pipeline.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_shipped_configs_load() -> None:
    for name in ("configs/demo.toml", "configs/qwen36-27b-mtp.toml"):
        cfg = load_config(name)
        assert cfg.generation.model == "Qwen3.6-27B"
        assert cfg.expect["speculative_algorithm"] == "EAGLE"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[generation]\nmax_token = 5\n", "unknown key 'generation.max_token'; did you mean 'generation.max_tokens'?"),
        ("[genration]\nmodel = 'x'\n", "unknown key 'genration'; did you mean 'generation'?"),
        (
            "[[endpoints]]\nurl = 'x'\nconcurrenc = 3\n",
            "'endpoints[0].concurrenc'; did you mean 'endpoints[0].concurrency'",
        ),
        ("[generation]\nmax_tokens = 'lots'\n", "generation.max_tokens must be int, got str 'lots'"),
        ("[generation]\nthinking = 1\n", "generation.thinking must be bool, got int 1"),
        ("[client]\nmax_attempts = true\n", "client.max_attempts must be int, got bool"),
        ("[input]\nkeep_fields = 'a'\n", "input.keep_fields must be an array"),
        ("[launch]\nenv = { A = 1 }\n", "launch.env.A must be a string"),
        ("generation = 3\n", "generation must be a table"),
        ("[input\n", "invalid TOML"),
    ],
    ids=["typo", "section-typo", "array-of-tables", "type", "bool", "bool-as-int", "array", "env", "table", "toml"],
)
def test_strict_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    assert message in str(err.value)
    assert str(tmp_path / "c.toml") in str(err.value)


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.toml: config file not found"):
        load_config(tmp_path / "nope.toml")


def test_set_overrides_use_toml_values(tmp_path: Path) -> None:
    cfg = load_config(
        write(tmp_path, "[generation]\nmodel = 'm'\n"),
        ["generation.max_tokens=4096", "generation.temperature=0", "output.dir=runs/x", "input.keep_fields=['a','b']"],
    )
    assert cfg.generation.max_tokens == 4096
    assert cfg.generation.temperature == 0.0 and isinstance(cfg.generation.temperature, float)
    assert cfg.output.dir == "runs/x"
    assert cfg.input.keep_fields == ("a", "b")
    assert cfg.generation.model == "m"


def test_set_typo_is_an_error() -> None:
    with pytest.raises(ConfigError, match="did you mean 'generation.max_tokens'"):
        load_config(None, ["generation.max_tokns=3"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        load_config(None, ["generation.max_tokens"])


def test_generation_hash_tracks_generation_not_output() -> None:
    base = load_config(None)
    assert base.generation_hash() == load_config(None, ["output.dir=elsewhere"]).generation_hash()
    assert base.generation_hash() != load_config(None, ["generation.temperature=0.7"]).generation_hash()
    assert base.generation_hash() != load_config(None, ["validate.require_reasoning=false"]).generation_hash()


def test_to_dict_is_plain_and_has_no_secret_values() -> None:
    cfg = load_config("configs/qwen36-27b-mtp.toml")
    data = cfg.to_dict()
    assert data["endpoints"][0]["api_key_env"] == "SGLANG_API_KEY"
    assert isinstance(Config().to_dict()["input"]["keep_fields"], list)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("output.shard_rows=0", "output.shard_rows must be at least 1, got 0"),
        ("client.max_attempts=0", "client.max_attempts must be at least 1"),
        ("output.sync_interval_s=0", "output.sync_interval_s must be positive"),
        ('input.keep_fields=["answer"]', "input.keep_fields 'answer' is an output column name"),
        ("generation.top_p=0", r"generation.top_p must be in \(0, 1\], got 0.0"),
        ("generation.top_k=-7", r"generation.top_k must be -1 \(off\) or at least 1, got -7"),
        ("generation.top_k=0", "generation.top_k must be -1"),
        ("generation.min_p=1.5", r"generation.min_p must be in \[0, 1\], got 1.5"),
        ("generation.max_tokens=0", "generation.max_tokens must be at least 1, got 0"),
        ("generation.temperature=nan", "generation.temperature must be a finite number, got nan"),
        ("client.request_timeout_s=inf", "client.request_timeout_s must be a finite number"),
        ("client.health_failures=0", "client.health_failures must be at least 1"),
        ("client.queue_size=-1", "client.queue_size must be 0"),
        ("validate.min_answer_chars=-1", "validate.min_answer_chars must be 0 or more"),
        ("launch.port=70000", "launch.port must be 0 \\(a free port\\) or a port number"),
    ],
    ids=[
        "shard-rows",
        "attempts",
        "sync",
        "keep-field-clash",
        "top_p",
        "top_k",
        "top_k-0",
        "min_p",
        "max_tokens",
        "nan",
        "inf",
        "health-failures",
        "queue-size",
        "min-answer-chars",
        "port",
    ],
)
def test_values_are_checked(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


@pytest.mark.parametrize(
    ("override", "value"),
    [
        ("generation.top_k=-1", -1),
        ("generation.temperature=0", 0),
        ("generation.top_p=1", 1),
        ("validate.max_repetition=1", 1),
    ],
    ids=["top_k-off", "temperature-0", "top_p-1", "max_repetition-1"],
)
def test_edges_of_the_ranges_load(override: str, value: float) -> None:
    """The edge value is accepted and is the value the config holds (none of them is the default)."""
    section, key = override.partition("=")[0].split(".")
    cfg = load_config(None, [override])
    assert getattr(getattr(cfg, section), key) == value


def test_endpoint_values_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"endpoints\[1\].requests_per_second must be 0 \(unlimited\) or more"):
        load_config(
            write(tmp_path, "[[endpoints]]\nurl = 'sim'\n[[endpoints]]\nurl = 'sim'\nrequests_per_second = -1\n")
        )
    with pytest.raises(ConfigError, match=r"c.toml: endpoints\[0\].url: 'gpu-node:30000' is not 'sim' or an http"):
        load_config(write(tmp_path, "[[endpoints]]\nurl = 'gpu-node:30000'\n"))


def test_no_endpoints_loads_but_is_refused_where_requests_go_out(tmp_path: Path) -> None:
    """The simulator is never a default: a config without endpoints loads (launch, audit and validate read it) and
    `check_endpoints` (run, preflight) names the key and the way to ask for the simulator."""
    from pipeline.config import check_endpoints, with_endpoints

    cfg = load_config(write(tmp_path, "[generation]\nmodel = 'm'\n"))
    assert cfg.endpoints == () and Config().endpoints == ()
    with pytest.raises(ConfigError, match=r'c.toml: no \[\[endpoints\]\]: .*url = "sim" for the embedded simulator'):
        check_endpoints(cfg, "c.toml")
    with pytest.raises(ConfigError, match="no \\[\\[endpoints\\]\\]"):
        check_endpoints(load_config(write(tmp_path, "endpoints = []\n")))
    check_endpoints(with_endpoints(cfg, ["http://127.0.0.1:30000"]))
    check_endpoints(load_config(write(tmp_path, "endpoints_file = 'servers.txt'\n")))


def test_api_keys_must_be_set_where_a_run_uses_them() -> None:
    from pipeline.config import check_api_keys

    cfg = load_config("configs/qwen36-27b-mtp.toml")
    check_api_keys(cfg, "q.toml", environ={"SGLANG_API_KEY": "k"})
    with pytest.raises(
        ConfigError, match=r"q.toml: endpoints\[0\].api_key_env names \$SGLANG_API_KEY, which is not set"
    ):
        check_api_keys(cfg, "q.toml", environ={})


def test_endpoints_file_formats(tmp_path: Path) -> None:
    from pipeline.config import read_endpoints_file

    plain = tmp_path / "eps.txt"
    plain.write_text("http://a:1 8  # node a\n\nhttp://b:2\n")
    assert [(e.url, e.concurrency) for e in read_endpoints_file(plain)] == [("http://a:1", 8), ("http://b:2", 64)]
    toml = tmp_path / "eps.toml"
    toml.write_text('[[endpoints]]\nurl = "http://c"\nconcurrency = 3\n')
    assert read_endpoints_file(toml)[0].concurrency == 3
    toml.write_text('[[endpoints]]\nurl = "http://c"\nconcurency = 3\n')
    with pytest.raises(ConfigError, match="did you mean 'endpoints\\[0\\].concurrency'"):
        read_endpoints_file(toml)
    plain.write_text("http://a:1 lots\n")
    with pytest.raises(ConfigError, match="eps.txt:1: expected 'URL \\[concurrency\\]'"):
        read_endpoints_file(plain)


def test_an_endpoint_url_ending_in_v1_is_refused_with_the_root() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"endpoints": [{"url": "http://gpu-node-01:8000/v1/"}]})
    assert "give the server root, without /v1 ('http://gpu-node-01:8000')" in str(caught.value)
    from pipeline.config import with_endpoints

    with pytest.raises(ConfigError, match="--endpoint: 'http://h:8000/v1' ends in /v1"):
        with_endpoints(config_from_dict({}), ["http://h:8000/v1"])


def test_endpoint_on_the_command_line_keeps_the_configs_settings_where_it_replaces_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from pipeline.config import with_endpoints

    one = config_from_dict({"endpoints": [{"url": "http://a:30000", "concurrency": 8, "api_key_env": "KEY_A"}]})
    [ep] = with_endpoints(one, ["http://b:30000"]).endpoints  # one replaces one: its settings stay
    assert (ep.url, ep.concurrency, ep.api_key_env) == ("http://b:30000", 8, "KEY_A")
    two = config_from_dict({"endpoints": [{"url": "http://a:30000", "concurrency": 8, "api_key_env": "KEY_A"},
                                          {"url": "http://c:30000", "concurrency": 16}]})  # fmt: skip
    same, new = with_endpoints(two, ["http://a:30000/", "http://d:30000"]).endpoints
    assert (same.concurrency, same.api_key_env) == (8, "KEY_A")  # the same URL keeps its own
    assert (new.concurrency, new.api_key_env) == (64, "")  # a new one gets the defaults, and the log says what went
    assert "the settings of http://c:30000 (concurrency 16" in caplog.text
