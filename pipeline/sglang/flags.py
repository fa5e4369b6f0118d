"""Every launch flag of each SGLang release regen knows: `regen sim` accepts exactly what its release accepts, and
`regen launch` warns about a flag the target release's argparse would refuse.

The table lists, per release, each flag's name, how many values it takes and its argparse destination and literal
default where they are not the obvious ones. It was read with `ast` (nothing imported) from the release wheels'
`python/sglang/srt/server_args.py` (0.5.9-0.5.12: `ServerArgs.add_cli_args`) and, from 0.5.14,
the annotated fields that `arg_groups/arg_utils.py` turns into flags (`server_args.py`, `arg_groups/fields/*.py`).
The first release is listed whole; each later one lists only the flags that were added or changed (a leading `-`:
removed).

A token is `name[/nargs][>dest][=default]`: no `/nargs` takes one value; `/0` none (store_true and the deprecated
no-op actions); `/+`, `/*`, `/?` argparse nargs; `/b` a BooleanOptionalAction (`--name` / `--no-name`). The default
is JSON; absent means None (False for `/0`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

RELEASES = ("0.5.9", "0.5.10.post1", "0.5.12", "0.5.14", "0.5.19", "0.5.23")
_RELEASE_OF = {"0.5.10": "0.5.10.post1", "0.5.15": "0.5.14"}


@dataclass(frozen=True, slots=True)
class Flag:
    name: str  # without the leading dashes
    nargs: str  # "0", "1", "+", "*", "?" or "b"
    dest: str
    default: Any

    @property
    def option(self) -> str:
        return "--" + self.name


def _parse(token: str) -> Flag:
    body, _, default = token.partition("=")
    body, _, dest = body.partition(">")
    name, _, nargs = body.partition("/")
    value = json.loads(default) if default else (False if nargs == "0" else None)
    return Flag(name, nargs or "1", dest or name.replace("-", "_"), value)


@functools.cache
def flags_of(version: str) -> dict[str, Flag]:
    """{flag name: Flag} of SGLang `version` (a release above, or 0.5.10 / 0.5.15, read as their neighbours)."""
    release = _RELEASE_OF.get(version, version)
    if release not in RELEASES:
        raise KeyError(f"no flag table for SGLang {version}")
    out: dict[str, Flag] = {}
    current = None
    for line in _TABLE.splitlines():
        if line.endswith(":") and line[:-1] in RELEASES:
            if current == release:
                break
            current = line[:-1]
            continue
        for token in line.split():
            if token.startswith("-"):
                out.pop(token[1:], None)
            else:
                flag = _parse(token)
                out[flag.name] = flag
    return out


@functools.cache
def all_flags() -> dict[str, Flag]:
    """Every flag any emulated release has (the newest spelling wins): what `regen sim` registers up front."""
    out: dict[str, Flag] = {}
    for release in RELEASES:
        out.update(flags_of(release))
    return out


_TABLE = """\
0.5.9:
abort-on-priority-when-disabled/0 admin-api-key allow-auto-truncate/0 api-key attention-backend
attention-context-parallel-size=1 attn-cp-size>attention_context_parallel_size=1 base-gpu-id=0
bucket-e2e-request-latency/+ bucket-inter-token-latency/+ bucket-time-to-first-token/+ chat-template
checkpoint-engine-wait-weights-before-ready/0 chunked-prefill-size collect-tokens-histogram/0 completion-template
config constrained-json-disable-any-whitespace/0 constrained-json-whitespace-pattern context-length cpu-offload-gb=0
crash-dump-folder cuda-graph-bs/+ cuda-graph-max-bs custom-sigquit-handler custom-weight-loader/*
data-parallel-size=1 debug-tensor-dump-inject=false debug-tensor-dump-input-file debug-tensor-dump-layers/+
debug-tensor-dump-output-folder decode-attention-backend decode-log-interval=40 decrypted-config-file
decrypted-draft-config-file deepep-config deepep-mode="auto" delete-ckpt-after-loading/0 device
disable-chunked-prefix-cache/0 disable-cuda-graph-padding/0 disable-cuda-graph/0 disable-custom-all-reduce/0
disable-fast-image-processor/0 disable-flashinfer-autotune/0 disable-flashinfer-cutlass-moe-fp4-allgather/0
disable-hicache-numa-detect/0 disable-hybrid-swa-memory/0 disable-outlines-disk-cache/0 disable-overlap-schedule/0
disable-radix-cache/0 disable-shared-experts-fusion/0 disable-tokenizer-batch-decode/0
disaggregation-bootstrap-port=8998 disaggregation-decode-dp disaggregation-decode-enable-offload-kvcache/0
disaggregation-decode-polling-interval=1 disaggregation-decode-tp disaggregation-ib-device
disaggregation-mode="null" disaggregation-prefill-pp=1 disaggregation-transfer-backend="mooncake" dist-init-addr
dist-timeout dllm-algorithm dllm-algorithm-config download-dir dp-size>data_parallel_size=1 ds-channel-config-path
ds-heavy-channel-num=32 ds-heavy-channel-type="qk" ds-heavy-token-num=256 ds-sparse-decode-threshold=4096
dtype="auto" dynamic-batch-tokenizer-batch-size=32 dynamic-batch-tokenizer-batch-timeout=0.002 elastic-ep-backend
enable-attn-tp-input-scattered/0 enable-broadcast-mm-inputs-process/0 enable-cache-report/0 enable-cudagraph-gc/0
enable-custom-logit-processor/0 enable-deterministic-inference/0 enable-double-sparsity/0 enable-dp-attention/0
enable-dp-lm-head/0 enable-draft-weights-cpu-backup/0 enable-dynamic-batch-tokenizer/0 enable-dynamic-chunking/0
enable-eplb/0 enable-expert-distribution-metrics/0 enable-flashinfer-allreduce-fusion/0 enable-fp32-lm-head/0
enable-fused-qk-norm-rope/0 enable-hierarchical-cache/0 enable-layerwise-nvtx-marker/0 enable-lmcache/0
enable-lora-overlap-loading/0 enable-lora/0 enable-memory-saver/0 enable-metrics-for-all-schedulers/0
enable-metrics/0 enable-mixed-chunk/0 enable-mscclpp/0 enable-multi-layer-eagle/0 enable-multimodal/0
enable-nan-detection/0 enable-nccl-nvls/0 enable-nsa-prefill-context-parallel/0 enable-p2p-check/0 enable-pdmux/0
enable-piecewise-cuda-graph/0 enable-precise-embedding-interpolation/0 enable-prefill-delayer/0
enable-prefix-mm-cache/0 enable-priority-scheduling/0 enable-profile-cuda-graph/0
enable-request-time-stats-logging/0 enable-return-hidden-states/0 enable-return-routed-experts/0
enable-single-batch-overlap/0 enable-symm-mem/0 enable-tokenizer-batch-encode/0 enable-torch-compile-debug-mode/0
enable-torch-compile/0 enable-torch-symm-mem/0 enable-trace/0 enable-two-batch-overlap/0 enable-weights-cpu-backup/0
encoder-only/0 encoder-transfer-backend encoder-urls/+=[] ep-dispatch-algorithm ep-num-redundant-experts=0
ep-size>expert_parallel_size=1 ep>expert_parallel_size=1 eplb-algorithm="auto"
eplb-min-rebalancing-utilization-threshold=1.0 eplb-rebalance-layers-per-chunk eplb-rebalance-num-iterations=1000
expert-distribution-recorder-buffer-size expert-distribution-recorder-mode expert-parallel-size=1
export-metrics-to-file-dir export-metrics-to-file/0 extra-metric-labels fastapi-root-path=""
file-storage-path="sglang_storage" flashinfer-mla-disable-ragged/0 flashinfer-mxfp4-moe-precision="default"
forward-hooks fp4-gemm-backend>fp4_gemm_runner_backend="flashinfer_cutlass"
fp8-gemm-backend>fp8_gemm_runner_backend="auto" gc-warning-threshold-secs=0.0 generation-tokens-buckets/+
gpu-id-step=1 grammar-backend grpc-mode/0 hf-chat-template-name hicache-io-backend="kernel"
hicache-mem-layout="layer_first" hicache-ratio=2.0 hicache-size=0 hicache-storage-backend
hicache-storage-backend-extra-config hicache-storage-prefetch-policy="best_effort"
hicache-write-policy="write_through" hierarchical-sparse-attention-extra-config host="127.0.0.1"
hybrid-kvcache-ratio/0 init-expert-location="trivial" is-embedding/0 json-model-override-args="{}"
keep-mm-feature-on-device/0 kt-cpuinfer kt-max-deferred-experts-per-token kt-method="AMXINT4" kt-num-gpu-experts
kt-threadpool-count=2 kt-weight-path kv-cache-dtype="auto" kv-events-config language-only/0
limit-mm-data-per-request load-balance-method="auto" load-format="auto" log-level-http log-level="info"
log-requests-format="text" log-requests-level=2 log-requests-target/+ log-requests/0 lora-backend="csgmv"
lora-eviction-policy="lru" lora-paths/* lora-target-modules/* mamba-backend="triton" mamba-full-memory-ratio=0.9
mamba-scheduler-strategy="auto" mamba-ssm-dtype mamba-track-interval=256 max-loaded-loras max-lora-chunk-size=16
max-lora-rank max-loras-per-batch=8 max-mamba-cache-size max-prefill-tokens=16384 max-queued-requests
max-running-requests max-total-tokens mem-fraction-static mm-attention-backend mm-enable-dp-encoder/0
mm-max-concurrent-calls=32 mm-per-request-timeout=10.0 mm-process-config model-checksum/? model-impl="auto"
model-loader-extra-config="{}" model-path model>model_path modelopt-checkpoint-restore-path
modelopt-checkpoint-save-path modelopt-export-path modelopt-quant moe-a2a-backend="none" moe-data-parallel-size=1
moe-dense-tp-size moe-dp-size>moe_data_parallel_size=1 moe-runner-backend="auto" mooncake-ib-device
multi-item-scoring-delimiter nccl-init-addr>dist_init_addr nccl-port nnodes=1 node-rank=0 nsa-decode-backend
nsa-prefill-backend nsa-prefill-cp-mode="round-robin-split" num-continuous-decode-steps=1
num-reserved-decode-tokens=512 numa-node/+ offload-group-size=-1 offload-mode="cpu" offload-num-in-group=1
offload-prefetch-step=1 otlp-traces-endpoint="localhost:4317" page-size pdmux-config-path
piecewise-cuda-graph-compiler="eager" piecewise-cuda-graph-max-tokens piecewise-cuda-graph-tokens/+
pipeline-parallel-size=1 port=30000 pp-async-batch-depth=0 pp-max-micro-batch-size pp-size>pipeline_parallel_size=1
preferred-sampling-params prefill-attention-backend prefill-delayer-forward-passes-buckets/+
prefill-delayer-max-delay-passes=30 prefill-delayer-token-usage-low-watermark prefill-delayer-wait-seconds-buckets/+
prefill-max-requests prefill-round-robin-balance/0 priority-scheduling-preemption-threshold=10
prompt-tokens-buckets/+ quantization quantization-param-path quantize-and-serve/0 radix-eviction-policy="lru"
random-seed reasoning-parser remote-instance-weight-loader-backend="nccl"
remote-instance-weight-loader-seed-instance-ip remote-instance-weight-loader-seed-instance-service-port
remote-instance-weight-loader-send-weights-group-ports
remote-instance-weight-loader-start-seed-via-transfer-engine/0 revision rl-on-policy-target rl-quant-profile
sampling-backend sampling-defaults="model" schedule-conservativeness=1.0 schedule-low-priority-values-first/0
schedule-policy="fcfs" scheduler-recv-interval=1 served-model-name show-time-cost/0 skip-server-warmup/0
skip-tokenizer-init/0 sleep-on-idle/0 sm-group-num=8 soft-watchdog-timeout speculative-accept-threshold-acc=1.0
speculative-accept-threshold-single=1.0 speculative-algorithm speculative-attention-mode="prefill"
speculative-draft-attention-backend speculative-draft-load-format speculative-draft-model-path
speculative-draft-model-quantization speculative-draft-model-revision
speculative-draft-model>speculative_draft_model_path speculative-eagle-topk speculative-moe-a2a-backend
speculative-moe-runner-backend speculative-ngram-branch-length=18 speculative-ngram-capacity
speculative-ngram-match-type="BFS" speculative-ngram-max-bfs-breadth=10 speculative-ngram-max-match-window-size=12
speculative-ngram-min-bfs-breadth=1 speculative-ngram-min-match-window-size=1 speculative-num-draft-tokens
speculative-num-steps speculative-token-map stream-interval=1 stream-output/0 swa-full-tokens-ratio=0.8
tbo-token-distribution-threshold=0.48 tensor-parallel-size=1 tokenizer-metrics-allowed-custom-labels/+
tokenizer-metrics-custom-labels-header="x-custom-labels" tokenizer-mode="auto" tokenizer-path tokenizer-worker-num=1
tool-call-parser tool-server torch-compile-max-bs=32 torchao-config="" tp-size>tensor_parallel_size=1
triton-attention-num-kv-splits=8 triton-attention-reduce-in-fp32/0 triton-attention-split-tile-size
trust-remote-code/0 uvicorn-access-log-exclude-prefixes/* warmups watchdog-timeout=300 weight-loader-disable-mmap/0
weight-version="default"
0.5.10.post1:
default-priority-value disable-piecewise-cuda-graph/0 disable-priority-preemption/0
enable-adaptive-dispatch-to-encoder/0 enable-aiter-allreduce-fusion/0 enable-elastic-expert-backup/0
enable-fused-moe-sum-all-reduce/0 enable-hisparse/0 enable-mfu-metrics/0 enable-mm-global-cache/0
enable-prefill-context-parallel/0 enable-ssl-refresh/0 enable-streaming-session/0
enforce-disable-flashinfer-allreduce-fusion/0 enforce-piecewise-cuda-graph/0 engine-info-bootstrap-port=6789
experts-shared-outer-loras/b fp4-gemm-backend>fp4_gemm_runner_backend="auto" gc-threshold/+ hisparse-config
incremental-streaming-output/0 linear-attn-backend="triton" linear-attn-decode-backend linear-attn-prefill-backend
modelexpress-config pre-warm-nccl/0 prefill-cp-mode="in-seq-split" speculative-ngram-max-trie-depth=18 ssl-ca-certs
ssl-certfile ssl-keyfile ssl-keyfile-password stream-output/0>incremental_streaming_output
stream-response-default-include-usage/0 use-ray/0 -disable-hicache-numa-detect -disaggregation-decode-dp
-disaggregation-decode-tp -disaggregation-prefill-pp -hierarchical-sparse-attention-extra-config
-mm-max-concurrent-calls -mm-per-request-timeout -speculative-ngram-branch-length
-speculative-ngram-max-match-window-size -speculative-ngram-min-match-window-size
0.5.12:
batch-notify-size=16 debug-cuda-graph/0 detokenizer-worker-num=1 disaggregation-decode-enable-radix-cache/0
elastic-ep-rejoin/0 enable-breakable-cuda-graph/0 enable-deepep-waterfill/0
enable-dp-attention-local-control-broadcast/0 enable-forward-pass-metrics/0 enable-http2/0 enable-mis/0
enable-quant-communications/0 enable-return-indexer-topk/0 enable-strict-thinking/0 enforce-shared-experts-fusion/0
forward-pass-metrics-ipc-name forward-pass-metrics-worker-id="" grpc-http-sidecar-port
hicache-storage-prefetch-policy="timeout" hierarchical-sparse-attention-extra-config>hisparse_config
lora-drain-wait-threshold=0.0 lora-strict-loading/b=false lora-use-virtual-experts/0 model-config-parser="auto"
msprobe-dump-config prefill-delayer-max-delay-ms prefill-delayer-queue-min-ratio prefill-only-disable-kv-cache/0
record-nolora-graph/b=true speculative-adaptive/0 speculative-adaptive-config speculative-dflash-block-size
speculative-dflash-draft-window-size>speculative_draft_window_size speculative-draft-window-size
speculative-ngram-external-corpus-max-tokens=10000000 speculative-ngram-external-corpus-path
speculative-ngram-external-sam-budget=0 speculative-skip-dp-mlp-sync/0 strip-thinking-cache/0
tokenizer-backend="huggingface" weight-loader-drop-cache-after-load/0 weight-loader-prefetch-checkpoints/0
weight-loader-prefetch-num-threads=4 -ds-channel-config-path -ds-heavy-channel-num -ds-heavy-channel-type
-ds-heavy-token-num -ds-sparse-decode-threshold -enable-double-sparsity -multi-item-scoring-delimiter
0.5.14:
asr-max-buffer-seconds=60 asr-max-concurrent-sessions=32 attention-context-parallel-size>attn_cp_size=1
attn-cp-size=1 cp-strategy cuda-graph-backend-decode cuda-graph-backend-prefill cuda-graph-bs>cuda_graph_bs_decode
cuda-graph-bs-decode/+ cuda-graph-bs-prefill/+ cuda-graph-config cuda-graph-max-bs>cuda_graph_max_bs_decode
cuda-graph-max-bs-decode cuda-graph-max-bs-prefill cuda-graph-tc-compiler data-parallel-size>dp_size=1
deepep-dispatcher-output-dtype="auto" disable-attn-tp-gather/0 disable-decode-cuda-graph/0
disable-piecewise-cuda-graph/0>cuda_graph_backend_prefill disable-prefill-cuda-graph/0
disaggregation-decode-extra-slots dp-size=1 dsa-decode-backend dsa-prefill-backend
dsa-prefill-cp-mode="round-robin-split" dsa-topk-backend="sgl-kernel"
enable-breakable-cuda-graph/0>cuda_graph_backend_prefill enable-deepseek-v4-fp4-indexer/0
enable-dsa-prefill-context-parallel/0 enable-int8-mamba-checkpoint/0
enable-nsa-prefill-context-parallel/0>enable_dsa_prefill_context_parallel enable-prefill-cp/0
encoder-bootstrap-port=8997 encoder-register-urls/+ encoder-urls/+
enforce-piecewise-cuda-graph/0>cuda_graph_backend_prefill ep>ep_size=1 ep-size=1 expert-parallel-size>ep_size=1
flashinfer-allreduce-fusion-backend forward-hooks/+ hicache-mem-layout="page_first" int8-mamba-ckpt-size
kv-canary="none" kv-canary-real-data="none" kv-canary-sweep-interval=0 lmcache-config-file
load-snapshot-publish-interval=15 mamba-radix-cache-strategy="auto"
mamba-scheduler-strategy>mamba_radix_cache_strategy="auto" moe-data-parallel-size>moe_dp_size=1 moe-dp-size=1
nsa-decode-backend>dsa_decode_backend nsa-prefill-backend>dsa_prefill_backend
nsa-prefill-cp-mode>dsa_prefill_cp_mode="round-robin-split" optimistic-prefill-retries=0
piecewise-cuda-graph-compiler>cuda_graph_tc_compiler piecewise-cuda-graph-max-tokens>cuda_graph_max_bs_prefill
piecewise-cuda-graph-tokens>cuda_graph_bs_prefill pipeline-parallel-size>pp_size=1 pp-size=1 radix-cache-backend
remote-instance-weight-loader-send-weights-group-ports/+ speculative-use-rejection-sampling/0
tensor-parallel-size>tp_size=1 tp-size=1 trace-modules="request" -custom-sigquit-handler -debug-tensor-dump-inject
-enable-nan-detection -enable-piecewise-cuda-graph -hybrid-kvcache-ratio -record-nolora-graph
0.5.19:
allowed-media-domains/+ bf16-gemm-backend="auto" c128-page-size=16 custom-sigquit-handler dcp-comm-backend="ag_rs"
dcp-replicate-q-proj/b dcp-size=1 decode-context-parallel-size>dcp_size=1 decoupled-spec-bind-endpoint
decoupled-spec-connect-endpoints/+ decoupled-spec-rank decoupled-spec-role="null" deepep-v2-mode="direct"
default-chat-template-kwargs disaggregation-decode-retraction-backup dllm-fdfo/b=true
dsa-paged-mqa-logits-backend="auto" dsv4-prefill-backend="auto" dwdp-size=1 elastic-ep-initial-size
elastic-ep-join-mode>ep_join_mode elastic-ep-join-rank-offset>ep_join_rank_offset=0 elastic-ep-scale-timeout=600
enable-cp-decode-attn-tp/0 enable-dense-mlp-attn-tp/0 enable-dsa-cache-layer-split/0 enable-flexkv/0
enable-gdn-replayssm-spec/0>enable_linear_replayssm_spec enable-layernorm-sp/0 enable-lean-attention/0
enable-linear-replayssm/0 enable-linear-replayssm-spec/0 enable-mamba-cache-stochastic-rounding/0
enable-page-major-kv-layout/0 enable-scattered-sconv/0 enable-session-radix-cache/0 enable-shared-experts-attn-tp/0
enable-tf32-matmul/0 enable-tp-lm-head-all-to-all/b enable-unified-memory/0 enable-w4a4-mxfp4-megamoe/0
enable-waterfill/0 encoder-transfer-backend="auto" expert-balancedness-report-mode="off"
flashinfer-autotune-skip-ops/+ flexkv-config-file fuseep-mode=2 gated-launch-port
grpc-http-sidecar-port>smg_http_sidecar_port grpc-port hicache-host-memory-mode="cache" hicache-ratio
hicache-storage-prefetch-retry-max-attempts=4 hicache-storage-prefetch-retry-poll-interval=0
http2-initial-connection-window-size http2-max-concurrent-streams=200 image-processor-backend="auto"
language-model-only/0 linear-attn-verify-backend linear-replayssm-cache-len=16 load-publish-endpoint
mamba-cache-philox-rounds=0 mamba-max-states-per-path=-1 max-ep-size media-url-max-file-size-mb=64
min-free-slots-delay mlx-enable-sampling/0 mm-feature-transport mm-global-cache-backend="mooncake"
mm-io-worker-num=0 mm-preprocess-cache-size-mb mm-processor-worker-num=0 optimistic-prefill-attempts=0
prefill-decode-interval=0 retraction-policy="length" return-hidden-states-mode sidecar sidecar-args/+
smg-grpc-mode/0 smg-http-sidecar-port spec-trace-dir speculative-draft-kv-cache-dtype
speculative-dsa-topk-backend="sgl-kernel" speculative-dspark-align-verify-tokens-to-graph-tier/0
speculative-dspark-block-size speculative-dspark-confidence-sts-path speculative-dspark-sps-table-path
startup-weight-load-mode="serial" stat-loggers trust-mm-content-hashes/0 weight-cache-mode="off" weight-cache-socket
weight-cache-timeout=1800 -enable-deepep-waterfill -optimistic-prefill-retries -torchao-config
0.5.23:
attention-data-parallel-size>attn_dp_size=1 attn-dp-size=1 boundary-reduction="auto"
constrained-json-max-whitespace-cnt context-bucket>cuda_graph_prefill_max_context cuda-graph-max-seq-len-prefill
cuda-graph-prefill-max-context dcp-comm-backend disable-aiter-allreduce-fusion-in-decode/0
disable-aiter-allreduce-fusion-in-prefill/0 disaggregation-decode-allocation-policy="early"
disaggregation-decode-host-receive-threshold=1.0 disaggregation-enable-kv-checksum/0 dsa-triton-union=0
dsv4-attn-backend="auto" enable-amd-monokernel/0 enable-decoder-swa-bounded-replay/b enable-dsa-fused-indexer/b
enable-encoder-swa-bounded-replay/0 enable-fused-qk-norm-rope/b enable-hicache/0>enable_hierarchical_cache
enable-http-worker-reuseport/0 enable-kv-cache-sharding/0 enable-linker-mla-dedup/0
enable-megamoe-for-layernorm-sp/0 enable-nvidia-megakernel/0 enable-paged-experts/0 enable-pd-role-switch/0
enable-response-store/0 enable-return-aux-hidden-states/0 enable-tf32-matmul/b=false
enable-unified-cache-external-linker/0 enable-watermark/0 file-storage-path flashinfer-a2a-dispatch-type
grpc-response-timeout-secs=300 hicache-host-memory-fraction=0.8 hicache-storage-prefetch-retry-max-attempts=8
hicache-storage-prefetch-retry-poll-interval=8 kv-canary-real-data mm-enable-dp-encoder/b=false
monokernel-backend/0>enable_amd_monokernel otlp-service-name paged-experts-num-resident ple-offload-backend="pinned"
ple-offload-dir ple-offload-embedding/b prefill-decode-interval prefill-decode-interval-min-bs=0
prefill-kv-cache-dequant-dtype="auto" qsa-indexer-dtype="auto" radix-eviction-policy-config
return-aux-hidden-state-layer-ids/+ return-input-ids/0 return-output-ids/0 sampling-mask-max-tokens=4096
shared-experts-tp-size speculative-domino-candidate-pool-size=2048 speculative-draft-sink-size
speculative-enable-w4a4-mxfp4-megamoe/b speculative-use-block-verification/0 swa-prefix-tails
trust-request-chat-template/0 unified-cache-external-linker-backend="mooncake" unified-cache-external-linker-config
uno-lora-path watermark-config -collect-tokens-histogram -cuda-graph-bs -cuda-graph-max-bs -cuda-graph-tc-compiler
-custom-sigquit-handler -disable-piecewise-cuda-graph -dsa-prefill-cp-mode -elastic-ep-rejoin
-enable-breakable-cuda-graph -enable-dsa-prefill-context-parallel -enable-expert-distribution-metrics
-enable-gdn-replayssm-spec -enable-nsa-prefill-context-parallel -enable-prefill-context-parallel
-enforce-piecewise-cuda-graph -keep-mm-feature-on-device -mamba-scheduler-strategy -nsa-decode-backend
-nsa-prefill-backend -nsa-prefill-cp-mode -piecewise-cuda-graph-compiler -piecewise-cuda-graph-max-tokens
-piecewise-cuda-graph-tokens -prefill-cp-mode -prefill-round-robin-balance -speculative-dflash-draft-window-size
-speculative-skip-dp-mlp-sync -stat-loggers -stream-output
"""
