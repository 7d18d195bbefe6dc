#!/usr/bin/env python3
"""Side-by-side reference estimates for validation/memory_cases.json.

Runs Megatron-LM's own megatron/training/theoretical_memory_usage.py (path given on the
command line; the file is not part of this project and must not be committed) on an args
namespace built from each Megatron case, and evaluates DeepSpeed's
estimate_zero2_model_states_mem_needs / estimate_zero3_model_states_mem_needs formulas
(re-implemented below from deepspeed/runtime/zero/stage_1_and_2.py and stage3.py, DeepSpeed
0.19.6 commit edaa722) for every case.

Usage:
  python3 bench/megatron_memory_estimate.py PATH/TO/theoretical_memory_usage.py \
      [--cases validation/memory_cases.json] [--write]
Get the Megatron file with e.g.
  git -C <Megatron-LM clone> show HEAD:megatron/training/theoretical_memory_usage.py > /tmp/tmu.py
Without --write it prints a table; with --write it stores "megatron_estimate_bytes" and
"deepspeed_estimate_bytes" into each case of the cases file.
"""
import argparse
import importlib.util
import io
import json
import math
import sys
import types
from contextlib import redirect_stdout
from types import SimpleNamespace

MIB = 1024 * 1024


def load_megatron_module(path):
    """Import theoretical_memory_usage.py from `path`, stubbing its one relative import."""
    pkg = types.ModuleType("mtmu_pkg")
    pkg.__path__ = []
    utils = types.ModuleType("mtmu_pkg.utils")
    utils.is_hybrid_model = lambda args: False
    utils.print_rank_0 = lambda msg: print(msg)
    sys.modules["mtmu_pkg"] = pkg
    sys.modules["mtmu_pkg.utils"] = utils
    spec = importlib.util.spec_from_file_location("mtmu_pkg.theoretical_memory_usage", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def megatron_args(case):
    """Megatron argparse namespace equivalent to the case's model_config.yaml."""
    m, lay, opt = case["model"], case["layout"], case["options"]
    h, a = m["hidden_size"], m["num_attention_heads"]
    gqa = m["num_kv_heads"] != a
    recompute = lay.get("recompute", "none")
    return SimpleNamespace(
        num_layers=m["num_layers"], hidden_size=h, num_attention_heads=a, kv_channels=h // a,
        group_query_attention=gqa, num_query_groups=m["num_kv_heads"], ffn_hidden_size=m["ffn_hidden_size"],
        swiglu=m["activation"] == "swiglu", normalization="RMSNorm" if m["norm"] == "rmsnorm" else "LayerNorm",
        padded_vocab_size=m["padded_vocab_size"], untie_embeddings_and_output_weights=not m["tied_embeddings"],
        seq_length=m["seq_length"], micro_batch_size=lay["micro_batch"],
        tensor_model_parallel_size=lay["tp"], pipeline_model_parallel_size=lay["pp"],
        virtual_pipeline_model_parallel_size=lay["vpp"], data_parallel_size=lay["dp"],
        world_size=case["hardware"]["num_gpus"], use_distributed_optimizer=bool(opt.get("distributed_optimizer")),
        sequence_parallel=lay["sequence_parallel"],
        recompute_granularity=None if recompute == "none" else recompute.split()[0],
        num_experts=None, moe_layer_freq=1, moe_ffn_hidden_size=None, moe_shared_expert_intermediate_size=None,
        moe_router_topk=1, moe_latent_size=None, mtp_num_layers=None, multi_latent_attention=False,
        expert_tensor_parallel_size=lay["tp"], expert_model_parallel_size=1, add_bias_linear=m.get("bias", True))


def megatron_estimate(mod, case):
    """Run report_theoretical_memory; returns (weights+optimizer, activation, total) in bytes."""
    if case["framework"] != "megatron" or case["options"].get("megatron_fsdp"):
        return None, "theoretical_memory_usage.py models Megatron DDP/distributed optimizer only"
    args = megatron_args(case)
    with redirect_stdout(io.StringIO()):
        w, act, tot = mod.report_theoretical_memory(args, num_microbatches=case["layout"]["num_microbatches"])
    return {"weight_and_optimizer": int(w * MIB), "activation": int(act * MIB), "total": int(tot * MIB),
            "what": "first pipeline stage (most loaded shard), as the script computes it"}, None


def stage_params(case):
    """Parameters held by the measured rank (last pipeline stage, one tp rank); own count."""
    m, lay = case["model"], case["layout"]
    h, f, hd = m["hidden_size"], m["ffn_hidden_size"], m["hidden_size"] // m["num_attention_heads"]
    kv = m["num_kv_heads"] * hd
    tp, pp = lay["tp"], lay["pp"]
    attn = h * (h + 2 * kv) + h * h
    mlp = (3 if m["activation"] == "swiglu" else 2) * h * f
    bias = (h + 2 * kv + h + f * (2 if m["activation"] == "swiglu" else 1) + h) if m.get("bias") else 0
    norm = (2 if m["norm"] == "layernorm" else 1) * h
    layer = (attn + mlp + bias) / tp + 2 * norm
    vocab = m.get("padded_vocab_size", m["vocab_size"]) * h / tp
    stage = layer * m["num_layers"] / pp + norm  # last stage: its layers + final norm
    if pp == 1:
        stage += vocab * (1 if m["tied_embeddings"] else 2)
        if m["positions"] == "learned_absolute":
            stage += m["seq_length"] * h
    else:
        stage += vocab  # output layer (own weight, or tied copy kept by the last stage)
    largest_module = max(vocab, h * f / tp * (2 if m["activation"] == "swiglu" else 1), (h + 2 * kv) * h / tp)
    return stage, largest_module


def deepspeed_zero2(total_params, total_gpus):
    # deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs, cpu_offload=False:
    # gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
    return 2 * total_params + int(18 * total_params / total_gpus)


def deepspeed_zero3(total_params, largest_layer_params, total_gpus):
    # deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs, cpu_offload=False:
    # gpu_mem = 4 * largest_layer_params + int(18 * total_params / total_gpus)
    return 4 * largest_layer_params + int(18 * total_params / total_gpus)


def deepspeed_estimate(case):
    """DeepSpeed's model-states estimates applied to the measured rank's shard, dp ranks."""
    params, largest = stage_params(case)
    dp = case["layout"]["dp"]
    return {"params_on_rank": int(params), "largest_layer_params": int(largest),
            "zero2_gpu_bytes": deepspeed_zero2(int(params), dp),
            "zero3_gpu_bytes": deepspeed_zero3(int(params), int(largest), dp),
            "what": "model states only (no activations); total_params = params of the measured rank's "
                    "model-parallel shard (own count), total_gpus = dp"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("megatron_file", help="path to Megatron-LM megatron/training/theoretical_memory_usage.py")
    ap.add_argument("--cases", default="validation/memory_cases.json")
    ap.add_argument("--write", action="store_true", help="store the estimates into the cases file")
    a = ap.parse_args()
    mod = load_megatron_module(a.megatron_file)
    doc = json.load(open(a.cases))
    print(f"{'case':48} {'measured GiB':>12} {'megatron GiB':>12} {'ratio':>6} {'DS z2 GiB':>9} {'DS z3 GiB':>9}")
    for c in doc["cases"]:
        meas = c["measured"].get("peak_allocated_bytes") or c["measured"].get("peak_reserved_bytes")
        est, why = megatron_estimate(mod, c)
        ds = deepspeed_estimate(c)
        c["megatron_estimate_bytes"] = est if est else {"total": None, "error": why}
        c["deepspeed_estimate_bytes"] = ds
        mt = est["total"] / 2**30 if est else float("nan")
        print(f"{c['id']:48} {meas / 2**30:12.2f} {mt:12.2f} {mt * 2**30 / meas:6.3f} "
              f"{ds['zero2_gpu_bytes'] / 2**30:9.2f} {ds['zero3_gpu_bytes'] / 2**30:9.2f}")
    if a.write:
        with open(a.cases, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")


if __name__ == "__main__":
    main()
