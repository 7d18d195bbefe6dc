#!/usr/bin/env bash
# plan --emit through the binary: each launch config parsed back by an independent parser
# (python3: tomllib for torchtitan's TOML, json for DeepSpeed's config and the plan file, shlex
# for Megatron-LM's flags) and every value checked against the saved plan file's fields; the
# Megatron-LM flag names against tests/data/emit/megatron_arguments_flags.txt (extracted from
# NVIDIA/Megatron-LM megatron/training/arguments.py at fd0df7d3), Megatron-DeepSpeed's against
# tests/data/emit/megatron_deepspeed_arguments_flags.txt (microsoft/Megatron-DeepSpeed
# megatron/arguments.py at f4157bea), Megatron-Bridge's override keys against
# tests/data/emit/megatron_bridge_keys.txt; the Megatron-DeepSpeed and Megatron-Bridge scripts
# pass bash -n.
#
# usage: emit_cli_test.sh MESHPLAN_BINARY SOURCE_DIR   (exit 77, skipped, without python3 >= 3.11)
set -u
meshplan=$1
source_dir=$2
if ! python3 -c 'import tomllib' 2>/dev/null; then
  echo "python3 with tomllib (3.11+) not found: skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail() { echo "FAILED   $*"; exit 1; }

# torchtitan to stdout (the table goes to stderr), the plan file beside it.
"$meshplan" plan --model llama3-8b --cluster dgx-h100 --gpus 64 --tp 2 --pp 2 \
  --sequence-parallel on --zero 3 --framework fsdp --global-batch 128 --emit torchtitan \
  --save-plan tt.json >tt.toml 2>tt_table.txt || fail "torchtitan: $(tail -1 tt_table.txt)"
grep -q '^# plan written to tt.json$' tt_table.txt || fail "torchtitan: table not on stderr"
"$meshplan" plan --model llama3-70b --cluster dgx-h100 --gpus 512 --tp 8 --pp 4 --vpp 2 \
  --schedule interleaved --sequence-parallel on --zero 1 --recompute full --global-batch 512 \
  --emit megatron --emit-out megatron.sh --save-plan mg.json >/dev/null || fail "megatron"
"$meshplan" plan --model llama3-8b --cluster dgx-h100 --gpus 64 --pp 4 --tp 1 --zero 1 \
  --recompute full --global-batch 256 --framework deepspeed --schedule 1f1b --emit deepspeed \
  --emit-out ds_config.json \
  --save-plan ds.json >ds_table.txt || fail "deepspeed"
# The partition_method that builds the plan's stages is model code, named beside the config.
grep -q '^# --emit deepspeed: stages of .* layers: build the PipelineModule with partition_method="\(parameters\|type:transformer\)"' \
  ds_table.txt || fail "deepspeed: partition_method note"
"$meshplan" plan --model mixtral-8x7b --cluster dgx-h100 --gpus 64 --tp 2 --etp 1 --ep 8 \
  --global-batch 128 --moe-aux-loss-coeff 0.01 --emit megatron --emit-out moe.sh --save-plan moe.json >/dev/null ||
  fail "megatron moe"
# Megatron-DeepSpeed: one script, and the same DeepSpeed config --emit deepspeed writes for the
# same plan; nothing printed beside it (the script holds what deepspeed's note says).
mds_plan=(plan --model llama2-7b --cluster dgx-h100 --gpus 16 --tp 2 --pp 4 --zero 1
  --recompute full --sequence-parallel off --overlap-param-gather off --global-batch 32 --schedule 1f1b
  --framework deepspeed)
"$meshplan" "${mds_plan[@]}" --emit megatron-deepspeed --emit-out mds.sh --save-plan mds.json \
  >mds_table.txt 2>&1 || fail "megatron-deepspeed: $(tail -1 mds_table.txt)"
grep -q '^# --emit' mds_table.txt && fail "megatron-deepspeed: a note beside the script"
"$meshplan" "${mds_plan[@]}" --emit deepspeed --emit-out mds_ds_config.json >/dev/null 2>&1 ||
  fail "megatron-deepspeed: the same plan's --emit deepspeed"
bash -n mds.sh || fail "megatron-deepspeed: bash -n mds.sh"
# Megatron-DeepSpeed has no synthetic data: without DATA_PATH the script stops at once, naming it,
# before it writes ds_config.json or launches anything (run in a scratch directory).
mkdir -p mds_run && (cd mds_run && env -u DATA_PATH bash ../mds.sh >out.txt 2>&1) &&
  fail "megatron-deepspeed: ran without DATA_PATH"
grep -q 'DATA_PATH: set DATA_PATH to the prefix of a Megatron .bin/.idx dataset' mds_run/out.txt ||
  fail "megatron-deepspeed: without DATA_PATH: $(cat mds_run/out.txt)"
[ ! -e mds_run/ds_config.json ] || fail "megatron-deepspeed: wrote ds_config.json without DATA_PATH"
echo "ok       megatron-deepspeed: without DATA_PATH the script stops, naming it"
"$meshplan" plan --model tiny --cluster local-cpu --gpus 16 --tp 2 --pp 2 --emit slurm \
  --emit-out job.sh --save-plan cpu.json >/dev/null || fail "slurm"
# A searched deepspeed plan whose best pick is ZB-H1 (Megatron-DeepSpeed's flag, no DeepSpeed
# config key): --emit deepspeed emits and saves the best plan a DeepSpeed config can say, and
# says so beside the table; --save-plan-rank names a plan exactly, so rank 1 is refused.
steer=(plan --model tiny --cluster local-cpu --gpus 8 --pp 4 --framework deepspeed)
"$meshplan" "${steer[@]}" --emit deepspeed --emit-out steer_config.json --save-plan steer.json \
  --json steer_report.json >steer_table.txt 2>&1 || fail "steer: $(tail -1 steer_table.txt)"
grep -q '^# --emit deepspeed: the best plan cannot be emitted (layout.schedule: .*); rank [0-9]* is emitted and saved instead: ' \
  steer_table.txt || fail "steer: no note naming the emitted rank"
"$meshplan" "${steer[@]}" --emit deepspeed --emit-out refused.json --save-plan refused_plan.json \
  --save-plan-rank 1 >/dev/null 2>refused.txt && fail "steer: --save-plan-rank 1 emitted a ZB-H1 plan"
grep -q '^meshplan: error: --emit deepspeed: layout.schedule: ' refused.txt ||
  fail "steer: --save-plan-rank 1: $(cat refused.txt)"
[ -e refused.json ] || [ -e refused_plan.json ] && fail "steer: a refused plan left an output"
# DeepSeek-V3 with its MTP depth on Megatron-Bridge's layout string (--pipeline-layout): the
# plan keeps the virtual stages, --emit megatron writes them back as the layout flag.
python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); m["mtp_num_layers"] = 1; json.dump(m, open("dsv3_mtp.json", "w"))' \
  "$source_dir/models/presets/models/deepseek-v3.json" || fail "dsv3_mtp.json"
"$meshplan" plan --model dsv3_mtp.json --cluster dgx-h100 --gpus 1024 --tp 2 --pp 8 --ep 64 \
  --global-batch 8192 --pipeline-layout 'Et|(tt|)*30mL' --emit megatron --emit-out dsv3.sh \
  --save-plan dsv3.json >dsv3_table.txt || fail "pipeline layout: $(tail -1 dsv3_table.txt)"
# Megatron-Bridge: the same Llama 3 70B plan as run_recipe.py ConfigContainer overrides.
"$meshplan" plan --model llama3-70b --cluster dgx-h100 --gpus 512 --tp 8 --pp 4 --vpp 2 \
  --schedule interleaved --sequence-parallel on --zero 1 --recompute full --global-batch 512 \
  --emit megatron-bridge --emit-out bridge.sh --save-plan bridge.json >/dev/null || fail "megatron-bridge"
bash -n bridge.sh || fail "megatron-bridge: bash -n bridge.sh"

python3 - "$source_dir" <<'EOF' || fail "parse-back (above)"
import json, shlex, sys, tomllib
source_dir = sys.argv[1]
def check(name, got, want):
    if got != want:
        sys.exit(f"{name}: {got!r} != {want!r}")
    print(f"ok       {name} = {got!r}")

plan = json.load(open("tt.json")); L = plan["layout"]
tt = tomllib.load(open("tt.toml", "rb"))
p = tt["parallelism"]
check("torchtitan tensor_parallel_degree", p["tensor_parallel_degree"], L["tp"])
check("torchtitan pipeline_parallel_degree", p["pipeline_parallel_degree"], L["pp"])
check("torchtitan data_parallel_shard_degree", p["data_parallel_shard_degree"], L["dp"])
check("torchtitan data_parallel_replicate_degree", p["data_parallel_replicate_degree"], 1)
check("torchtitan pipeline_parallel_microbatch_size", p["pipeline_parallel_microbatch_size"], L["micro_batch"])
# The even split, virtual stage v = layers [v n, (v + 1) n), n = layers / (pp vpp) (Narayanan et
# al. 2021, Sec. 2.2.2), stated module by module.
n = plan["model"]["num_layers"] // (L["pp"] * L["vpp"])
parts = [[f"layers.{i}" for i in range(v * n, (v + 1) * n)] for v in range(L["pp"] * L["vpp"])]
parts[0].insert(0, "tok_embeddings"); parts[-1] += ["norm", "output"]
check("torchtitan module_fqns_per_model_part", p["module_fqns_per_model_part"], parts)
check("torchtitan pipeline_parallel_schedule", p["pipeline_parallel_schedule"],
      {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}[L["schedule"]])
check("torchtitan context_parallel_degree", p["context_parallel_degree"], 1)
check("torchtitan training.global_batch_size", tt["training"]["global_batch_size"], L["global_batch"])
check("torchtitan training.local_batch_size", tt["training"]["local_batch_size"], L["global_batch"] // L["dp"])
check("torchtitan training.seq_len", tt["training"]["seq_len"], plan["model"]["seq_length"])
check("torchtitan activation_checkpoint.mode", tt["activation_checkpoint"]["mode"],
      {"none": "none", "full": "full"}[L["recompute"]])

plan = json.load(open("mg.json")); L = plan["layout"]; M = plan["model"]
words = shlex.split(open("megatron.sh").read().split("pretrain_gpt.py", 1)[1], comments=True)
flags = {}
for i, w in enumerate(words):
    if w.startswith("--"):
        flags[w] = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") and words[i + 1] != "$@" else ""
known = {l.strip() for l in open(f"{source_dir}/tests/data/emit/megatron_arguments_flags.txt") if l.startswith("--")}
for f in flags:
    if f not in known:
        sys.exit(f"megatron: {f} is not in Megatron-LM's arguments.py")
print(f"ok       megatron: all {len(flags)} flags are Megatron-LM arguments")
check("megatron --tensor-model-parallel-size", int(flags["--tensor-model-parallel-size"]), L["tp"])
check("megatron --pipeline-model-parallel-size", int(flags["--pipeline-model-parallel-size"]), L["pp"])
check("megatron --num-layers-per-virtual-pipeline-stage", int(flags["--num-layers-per-virtual-pipeline-stage"]),
      M["num_layers"] // (L["pp"] * L["vpp"]))
check("megatron --micro-batch-size", int(flags["--micro-batch-size"]), L["micro_batch"])
check("megatron --global-batch-size", int(flags["--global-batch-size"]), L["global_batch"])
check("megatron --num-layers", int(flags["--num-layers"]), M["num_layers"])
check("megatron --rotary-base", float(flags["--rotary-base"]), M.get("rope_theta", 10000))
check("megatron --hidden-size", int(flags["--hidden-size"]), M["hidden_size"])
check("megatron --num-attention-heads", int(flags["--num-attention-heads"]), M["num_attention_heads"])
check("megatron --num-query-groups", int(flags["--num-query-groups"]), M["num_kv_heads"])
check("megatron --ffn-hidden-size", int(flags["--ffn-hidden-size"]), M["ffn_hidden_size"])
check("megatron --seq-length", int(flags["--seq-length"]), M["seq_length"])
check("megatron --sequence-parallel", "--sequence-parallel" in flags, L["sequence_parallel"])
check("megatron --use-distributed-optimizer", "--use-distributed-optimizer" in flags, L["zero"] == 1)
check("megatron --recompute-granularity", flags.get("--recompute-granularity"), L["recompute"])
check("megatron --overlap-grad-reduce", "--overlap-grad-reduce" in flags, plan["options"]["overlap_grad_reduce"])
check("megatron --swiglu", "--swiglu" in flags, M["activation"] == "swiglu")
check("megatron --normalization", flags["--normalization"], {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[M["norm"]])

plan = json.load(open("ds.json")); L = plan["layout"]
ds = json.load(open("ds_config.json"))
check("deepspeed train_batch_size", ds["train_batch_size"], L["global_batch"])
check("deepspeed train_micro_batch_size_per_gpu", ds["train_micro_batch_size_per_gpu"], L["micro_batch"])
check("deepspeed gradient_accumulation_steps", ds["gradient_accumulation_steps"],
      L["global_batch"] // (L["dp"] * L["micro_batch"]))
check("deepspeed zero_optimization.stage", ds["zero_optimization"]["stage"], L["zero"])
# pp is the training script's (the note beside the config), not a DeepSpeed key.
check("deepspeed pipeline keys", sorted(ds["pipeline"]), ["activation_checkpoint_interval", "grad_partitioned", "pipe_partitioned"])
note = next(l for l in open("ds_table.txt") if "model-parallel sizes" in l)
check("deepspeed note pp", note.split("--pipeline-model-parallel-size ")[1].split(";")[0], str(L["pp"]))
check("deepspeed bf16.enabled", ds["bf16"]["enabled"], plan["cluster"]["precision"] == "bf16")

report = json.load(open("steer_report.json")); plan = json.load(open("steer.json"))
check("steer best schedule", report["plans"][0]["layout"]["schedule"], "zb-h1")
check("steer emit target", report["emit"]["target"], "deepspeed")
if report["emit"]["rank"] < 2 or not report["emit"]["best_refusal"].startswith("--emit deepspeed: layout.schedule: "):
    sys.exit(f"steer: emit record {report['emit']}")
check("steer saved schedule", plan["layout"]["schedule"], "1f1b")
rank = report["emit"]["rank"]
note = next(l for l in open("steer_table.txt") if "is emitted and saved instead" in l)
check("steer note rank", note.split("); rank ")[1].split(" ")[0], str(rank))
check("steer saved rank", next(l for l in open("steer_table.txt") if l.startswith("# plan written")).strip(),
      f"# plan written to steer.json (rank {rank})")
ds = json.load(open("steer_config.json"))
check("steer train_micro_batch_size_per_gpu", ds["train_micro_batch_size_per_gpu"], plan["layout"]["micro_batch"])
check("steer zero_optimization.stage", ds["zero_optimization"]["stage"], plan["layout"]["zero"])

plan = json.load(open("moe.json")); L = plan["layout"]
words = shlex.split(open("moe.sh").read().split("pretrain_gpt.py", 1)[1], comments=True)
moe_flags = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}
check("megatron moe layout.etp", L["etp"], 1)
check("megatron --expert-tensor-parallel-size", int(moe_flags["--expert-tensor-parallel-size"]), L["etp"])
check("megatron --expert-model-parallel-size", int(moe_flags["--expert-model-parallel-size"]), L["ep"])
check("megatron moe --tensor-model-parallel-size", int(moe_flags["--tensor-model-parallel-size"]), L["tp"])
check("megatron moe --moe-aux-loss-coeff", float(moe_flags["--moe-aux-loss-coeff"]), plan["options"]["moe_aux_loss_coeff"])

# Megatron-Core's parse_str_to_list (pipeline_parallel_layer_layout.py), written again here.
import re
def megatron_layout(text):
    text = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), text)
    return text.split("|")
plan = json.load(open("dsv3.json")); L = plan["layout"]
words = shlex.split(open("dsv3.sh").read().split("pretrain_gpt.py", 1)[1], comments=True)
dsv3 = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}
for f in dsv3:
    if f not in known:
        sys.exit(f"megatron dsv3: {f} is not in Megatron-LM's arguments.py")
given = megatron_layout("Et|(tt|)*30mL")
check("pipeline layout: emitted stages", megatron_layout(dsv3["--pipeline-model-parallel-layout"]), given)
check("pipeline layout: layout.virtual_stage_layers", L["virtual_stage_layers"], [s.count("t") for s in given])
check("pipeline layout: layout.stage_layers", L["stage_layers"], [7, 8, 8, 8, 8, 8, 8, 6])
check("pipeline layout: layout.vpp", L["vpp"], len(given) // L["pp"])
check("pipeline layout: --mtp-num-layers", int(dsv3["--mtp-num-layers"]), 1)
check("pipeline layout: no other split flag", [f for f in dsv3 if "virtual" in f or "decoder-first" in f], [])

plan = json.load(open("mds.json")); L = plan["layout"]; M = plan["model"]
script = open("mds.sh").read()
config = script.split("cat > ds_config.json <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0] + "\n"
check("megatron-deepspeed ds_config.json", config, open("mds_ds_config.json").read())
words = shlex.split(script.split("pretrain_gpt.py", 1)[1], comments=True)
mds = {}
for i, w in enumerate(words):
    if w.startswith("--"):
        mds[w] = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") and words[i + 1] != "$@" else ""
known = {l.strip() for l in open(f"{source_dir}/tests/data/emit/megatron_deepspeed_arguments_flags.txt") if l.startswith("--")}
for f in mds:
    if f not in known:
        sys.exit(f"megatron-deepspeed: {f} is not in Megatron-DeepSpeed's arguments.py")
print(f"ok       megatron-deepspeed: all {len(mds)} flags are Megatron-DeepSpeed arguments")
check("megatron-deepspeed --tensor-model-parallel-size", int(mds["--tensor-model-parallel-size"]), L["tp"])
check("megatron-deepspeed --pipeline-model-parallel-size", int(mds["--pipeline-model-parallel-size"]), L["pp"])
check("megatron-deepspeed --no-pipeline-parallel", "--no-pipeline-parallel" in mds, L["pp"] == 1)
check("megatron-deepspeed --micro-batch-size", int(mds["--micro-batch-size"]), L["micro_batch"])
check("megatron-deepspeed --global-batch-size", int(mds["--global-batch-size"]), L["global_batch"])
check("megatron-deepspeed --zero-stage", int(mds["--zero-stage"]), L["zero"])
check("megatron-deepspeed --deepspeed_config", mds["--deepspeed_config"], "ds_config.json")
check("megatron-deepspeed --checkpoint-activations", "--checkpoint-activations" in mds, L["recompute"] == "full")
check("megatron-deepspeed --num-layers", int(mds["--num-layers"]), M["num_layers"])
check("megatron-deepspeed --rotary-position-embeddings-theta",
      float(mds["--rotary-position-embeddings-theta"]), M.get("rope_theta", 10000))
check("megatron-deepspeed --hidden-size", int(mds["--hidden-size"]), M["hidden_size"])
check("megatron-deepspeed --num-attention-heads", int(mds["--num-attention-heads"]), M["num_attention_heads"])
check("megatron-deepspeed --ffn-hidden-size", int(mds["--ffn-hidden-size"]), M["ffn_hidden_size"])
check("megatron-deepspeed --seq-length", int(mds["--seq-length"]), M["seq_length"])
# NullTokenizer adds its end-of-document id after --vocab-size ids.
check("megatron-deepspeed --vocab-size + 1", int(mds["--vocab-size"]) + 1, M["vocab_size"])
check("megatron-deepspeed --sequence-parallel", "--sequence-parallel" in mds, L["sequence_parallel"])
nodes = plan["num_gpus"] // plan["cluster"]["gpus_per_node"]
launcher = shlex.split(next(l for l in script.splitlines() if l.startswith("deepspeed ")).rstrip(" \\"))
check("megatron-deepspeed --num_nodes", launcher[launcher.index("--num_nodes") + 1], str(nodes))
check("megatron-deepspeed --num_gpus", launcher[launcher.index("--num_gpus") + 1], str(plan["cluster"]["gpus_per_node"]))

plan = json.load(open("bridge.json")); L = plan["layout"]; M = plan["model"]
script = open("bridge.sh").read()
words = shlex.split(script.split("--mode pretrain", 1)[1], comments=True)
bridge = dict(w.split("=", 1) for w in words if "=" in w)
keys = {l.strip() for l in open(f"{source_dir}/tests/data/emit/megatron_bridge_keys.txt") if not l.startswith("#")}
check("megatron-bridge unknown keys", sorted(k for k in bridge if k not in keys), [])
check("megatron-bridge tp", int(bridge["model.tensor_model_parallel_size"]), L["tp"])
check("megatron-bridge pp", int(bridge["model.pipeline_model_parallel_size"]), L["pp"])
check("megatron-bridge vpp", int(bridge["model.virtual_pipeline_model_parallel_size"]), L["vpp"])
check("megatron-bridge sequence_parallel", bridge["model.sequence_parallel"], "true" if L["sequence_parallel"] else "false")
check("megatron-bridge micro batch", int(bridge["train.micro_batch_size"]), L["micro_batch"])
check("megatron-bridge global batch", int(bridge["train.global_batch_size"]), L["global_batch"])
check("megatron-bridge distributed optimizer", (bridge["ddp.use_distributed_optimizer"], bridge["optimizer.use_distributed_optimizer"]), ("true", "true") if L["zero"] == 1 else ("false", "false"))
check("megatron-bridge recompute", bridge["model.recompute_granularity"], L["recompute"])
check("megatron-bridge layers", int(bridge["model.num_layers"]), M["num_layers"])
check("megatron-bridge rotary base", float(bridge["model.rotary_base"]), M.get("rope_theta", 10000))
check("megatron-bridge hidden", int(bridge["model.hidden_size"]), M["hidden_size"])
check("megatron-bridge seq", int(bridge["dataset.seq_length"]), M["seq_length"])
check("megatron-bridge vocab", int(bridge["tokenizer.vocab_size"]), M["vocab_size"])
launcher = shlex.split(next(l for l in script.splitlines() if l.startswith("torchrun ")).rstrip(" \\"))
check("megatron-bridge --nnodes", launcher[launcher.index("--nnodes") + 1], str(plan["num_gpus"] // plan["cluster"]["gpus_per_node"]))

plan = json.load(open("cpu.json"))
lines = open("job.sh").read().splitlines()
sbatch = dict(l[len("#SBATCH "):].split("=", 1) for l in lines if l.startswith("#SBATCH "))
per_node = min(plan["num_gpus"], plan["cluster"]["gpus_per_node"])
check("slurm --nodes", int(sbatch["--nodes"]), plan["num_gpus"] // per_node)
check("slurm --ntasks-per-node", int(sbatch["--ntasks-per-node"]), per_node)
srun = shlex.split(next(l for l in lines if l.startswith("srun ")))
check("slurm srun --ntasks", srun[1], f"--ntasks={plan['num_gpus']}")
check("slurm runs", srun[srun.index("meshplan"):srun.index("meshplan") + 3], ["meshplan", "execute", "cpu.json"])
EOF
echo "# emit cli: OK"
