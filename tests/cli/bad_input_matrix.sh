#!/usr/bin/env bash
# The bad-input matrix (issue 11, Sec. 5): every command that reads a file or writes one, run
# against a table of bad inputs. Each row must
#   - exit 2 for bad input, 1 for a failure at run time (the row says which);
#   - print exactly one line on stderr, "meshplan: error: ...", naming the file, field or rank
#     (a fixed string per row); under mpirun exactly one such line among the launcher's banners;
#   - create no output file (new_out.json) and leave no temporary file behind;
#   - leave an existing output file (sentinel.json, given as another output) byte for byte as it
#     was.
#
# usage: bad_input_matrix.sh MESHPLAN_BINARY SOURCE_DIR PART MPIRUN [MPIRUN_FLAGS...]
# PART is K/N: run every N-th row starting at the K-th (1/1 runs them all). ctest runs 1/2 and 2/2
# as two entries, so that ctest -j overlaps the halves; the inputs are made in every part.
# Uses bash, grep, sed, head, cmp and timeout only (a fresh Debian machine has no jq or python).
set -u

usage="usage: $0 MESHPLAN_BINARY SOURCE_DIR PART(K/N) MPIRUN [MPIRUN_FLAGS...]"
if [ $# -lt 4 ]; then
  echo "$usage" >&2
  exit 1
fi
meshplan=$1
source_dir=$2
part=$3
shift 3
mpirun=("$@")
data="$source_dir/tests/data"
if [ ! -x "$meshplan" ] || [ ! -d "$data" ]; then
  echo "$usage (binary '$meshplan')" >&2
  exit 1
fi
if [[ ! "$part" =~ ^([1-9][0-9]*)/([1-9][0-9]*)$ ]] ||
  [ "${BASH_REMATCH[1]}" -gt "${BASH_REMATCH[2]}" ]; then
  echo "$usage (PART '$part')" >&2
  exit 1
fi
part_index=$((BASH_REMATCH[1] - 1))
part_count=${BASH_REMATCH[2]}
meshplan="$(cd "$(dirname "$meshplan")" && pwd)/$(basename "$meshplan")"
source_dir="$(cd "$source_dir" && pwd)"
data="$source_dir/tests/data"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

num_passed=0
num_failed=0
num_rows=0
sentinel_text='sentinel: an existing output that must stay byte for byte as it was'

say() { echo "         $*"; }

# row NAME RC PATTERN [mpi NP] ARGS...: runs `meshplan ARGS...` (under mpirun -np NP with
# `mpi NP`) with a 60 s limit and checks the row's contract above. ARGS may name new_out.json
# (must not appear) and sentinel.json (must not change).
row() {
  num_rows=$((num_rows + 1))
  if [ $(((num_rows - 1) % part_count)) -ne "$part_index" ]; then
    return 0
  fi
  local name=$1 expected_rc=$2 pattern=$3
  shift 3
  local launcher=()
  if [ "$1" = mpi ]; then
    launcher=("${mpirun[@]}" -np "$2")
    shift 2
  fi
  printf '%s\n' "$sentinel_text" >sentinel.json
  cp sentinel.json sentinel.copy
  rm -f new_out.json
  timeout 60 "${launcher[@]}" "$meshplan" "$@" >stdout.txt 2>stderr.txt </dev/null
  local rc=$? ok=0
  if [ "$rc" -ne "$expected_rc" ]; then
    say "exit status $rc, expected $expected_rc"
    ok=1
  fi
  local errors
  errors=$(grep -c '^meshplan: error: ' stderr.txt)
  if [ ${#launcher[@]} -eq 0 ]; then
    local lines
    lines=$(wc -l <stderr.txt)
    if [ "$lines" -ne 1 ] || [ "$errors" -ne 1 ]; then
      say "stderr has $lines lines ($errors 'meshplan: error: '), expected 1:"
      head -n 5 stderr.txt | sed 's/^/           | /'
      ok=1
    fi
  elif [ "$errors" -ne 1 ]; then
    say "$errors lines start with 'meshplan: error: ' (all ranks' output), expected 1:"
    grep '^meshplan: error: ' stderr.txt | head -n 5 | sed 's/^/           | /'
    ok=1
  fi
  if ! grep -qF -- "$pattern" stderr.txt; then
    say "stderr does not name '$pattern': $(grep -m 1 'meshplan: error' stderr.txt | head -c 300)"
    ok=1
  fi
  if [ -e new_out.json ]; then
    say "new_out.json was created"
    ok=1
  fi
  if ! cmp -s sentinel.json sentinel.copy; then
    say "sentinel.json was changed"
    ok=1
  fi
  if ls ./*.tmp.* >/dev/null 2>&1; then
    say "a temporary file was left behind: $(ls ./*.tmp.*)"
    ok=1
  fi
  if [ "$ok" -eq 0 ]; then
    echo "ok       $name"
    num_passed=$((num_passed + 1))
  else
    echo "FAILED   $name"
    num_failed=$((num_failed + 1))
  fi
}

# --- inputs -----------------------------------------------------------------------------------

# A good plan for 2 CPU ranks (tp 2), pretty-printed one key per line, and edits of it.
if ! "$meshplan" plan --model tiny --cluster local-cpu --gpus 2 --tp 2 --zero 0 \
  --save-plan p.json >/dev/null 2>plan_err.txt; then
  echo "FAILED   cannot make the good plan: $(cat plan_err.txt)"
  exit 1
fi
edit() {  # edit OUT SED_SCRIPT: p.json edited; fails the run if the edit changed nothing
  sed "$2" p.json >"$1"
  if cmp -s p.json "$1"; then
    echo "FAILED   the edit '$2' changed nothing in p.json"
    exit 1
  fi
}
printf '{"format": "meshplan plan", "version": 1,' >malformed.json
head -c 300 p.json >truncated.json
: >empty.json
printf '\x7fELF\x02\x01\x01\x00\x00\xff\xfe\x00\x01' >binary.json
echo '[1, 2, 3]' >array.json
edit version2.json 's/^  "version": 1$/  "version": 2/'
edit wrong_type.json '0,/^    "tp": 2,$/s//    "tp": "2",/'
edit missing.json '/^  "num_gpus": 2,$/d'
edit tp_zero.json '0,/^    "tp": 2,$/s//    "tp": 0,/'
edit batch_absurd.json '0,/^    "global_batch": \([0-9]*\),$/s//    "global_batch": 1000000000000,/'
edit layers_zero.json 's/^    "num_layers": 4,$/    "num_layers": 0,/'
edit hidden_negative.json 's/^    "hidden_size": 64,$/    "hidden_size": -64,/'
edit bandwidth_negative.json \
  's/^    "intra_node_bytes_per_second": .*,$/    "intra_node_bytes_per_second": -5e9,/'
edit heads.json 's/^    "num_attention_heads": 4,$/    "num_attention_heads": 3,/; s/^    "num_kv_heads": 2,$/    "num_kv_heads": 1,/'
edit gpus.json 's/^  "num_gpus": 2,$/  "num_gpus": 4,/'
edit unknown_layout.json '0,/^    "schedule": \(.*\),$/s//    "schedule": \1, "shedule": "gpipe",/'
edit unknown_top.json 's/^  "num_gpus": 2,$/  "num_gpus": 2, "num_gpu": 2,/'
edit unknown_options.json 's/^    "flash_attention": \(.*\),$/    "flash_attention": \1, "flash_attn": true,/'
edit huge_int.json '0,/^    "dp": 1,$/s//    "dp": 18446744073709551615,/'

# Model and cluster files.
cat >model_zero_layers.json <<'EOF'
{"name": "m", "num_layers": 0, "hidden_size": 64, "num_attention_heads": 4, "num_kv_heads": 4,
 "ffn_hidden_size": 256, "vocab_size": 256, "seq_length": 32, "activation": "gelu",
 "norm": "layernorm", "positions": "learned", "tied_embeddings": true, "qkv_bias": false,
 "attention_output_bias": false, "mlp_bias": false}
EOF
sed 's/"num_layers": 0/"num_layers": 4/; s/"vocab_size": 256/"vocab_size": 100000000000/' \
  model_zero_layers.json >model_vocab_absurd.json
sed 's/"num_layers": 0/"num_layers": 4/; s/"hidden_size": 64/"hidden_size": "64"/' \
  model_zero_layers.json >model_wrong_type.json
sed 's/"num_layers": 0, //' model_zero_layers.json >model_missing.json
sed 's/"num_layers": 0/"num_layer": 4/' model_zero_layers.json >model_unknown.json
# Hugging Face configs without `architectures` (read by model_type).
hf='"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
 "intermediate_size": 176, "vocab_size": 256, "max_position_embeddings": 32'
echo "{\"model_type\": \"llama\", \"hidden_act\": \"relu\", $hf}" >hf_relu.json
echo "{\"model_type\": \"falcon\", $hf}" >hf_falcon.json
echo "{\"model_type\": \"mistral\", \"sliding_window\": 16, $hf}" >hf_window.json
echo "{\"model_type\": \"qwen2\", \"use_sliding_window\": true, \"sliding_window\": 8,
 \"layer_types\": [\"sliding_attention\", \"chunked_attention\"], $hf}" >hf_qwen_window.json
sed 's/"num_layers": 0/"num_layers": 4, "sliding_window": -1/' model_zero_layers.json \
  >model_window_negative.json
echo "{\"model_type\": \"gemma\", \"hidden_activation\": \"silu\", $hf}" >hf_gemma_silu.json
echo "{\"model_type\": \"gemma2\", \"attn_logit_softcapping\": -50.0, $hf}" \
  >hf_gemma2_softcap.json
sed 's/"num_layers": 0/"num_layers": 4, "norm_unit_offset": true/' model_zero_layers.json \
  >model_unit_offset_layernorm.json
sed 's/"num_layers": 0/"num_layers": 4, "scale_embeddings": 1/' model_zero_layers.json \
  >model_scale_embeddings_int.json
sed 's/"num_layers": 0/"num_layers": 4, "sliding_window": "8"/' model_zero_layers.json \
  >model_window_string.json
sed 's/"num_layers": 0/"num_layers": 4, "attn_logit_softcapping": -50.0/' \
  model_zero_layers.json >model_softcap_negative.json
sed 's/"num_layers": 0/"num_layers": 4, "final_logit_softcapping": 3e7/' \
  model_zero_layers.json >model_final_softcap_absurd.json
sed 's/"num_layers": 0/"num_layers": 4, "query_pre_attn_scalar": "144"/' \
  model_zero_layers.json >model_query_scalar_string.json
echo "{\"model_type\": \"gpt_oss\", \"swiglu_alpha\": 2.0, $hf}" >hf_gpt_oss_alpha.json
echo "{\"model_type\": \"gpt_oss\", \"swiglu_limit\": 0, $hf}" >hf_gpt_oss_limit_zero.json
echo "{\"model_type\": \"gpt_oss\", \"swiglu_limit\": 1e300, $hf}" >hf_gpt_oss_limit_huge.json
echo "{\"model_type\": \"gpt_oss\", \"experts_per_token\": 8, $hf}" >hf_gpt_oss_experts.json
echo "{\"model_type\": \"gpt_oss\", \"sliding_window\": null, \"layer_types\": 5, $hf}" \
  >hf_gpt_oss_layer_types.json
echo "{\"model_type\": \"qwen2\", \"layer_types\": [\"full_attention\"], $hf}" \
  >hf_qwen_layer_types.json
echo "{\"model_type\": \"llama\", \"partial_rotary_factor\": 0.5, $hf}" >hf_llama_partial.json
echo "{\"model_type\": \"phi3\", \"rope_parameters\": [0.75], $hf}" >hf_phi3_rope_list.json
echo "{\"model_type\": \"llama\", \"rope_theta\": 0, $hf}" >hf_llama_theta_zero.json
echo "{\"model_type\": \"gemma3_text\", \"rope_local_base_freq\": 0, $hf}" \
  >hf_gemma3_local_theta_zero.json
sed 's/"num_layers": 0/"num_layers": 4, "rope_local_theta": 10000/; s/"learned"/"rope"/' \
  model_zero_layers.json >model_local_theta_no_window.json
sed 's/"num_layers": 0/"num_layers": 4, "rope_scaling": "dynamic", "rope_scaling_factor": 4/; s/"learned"/"rope"/' \
  model_zero_layers.json >model_rope_scaling_dynamic.json
sed 's/"num_layers": 0/"num_layers": 4, "rope_scaling": "yarn", "rope_scaling_factor": 40/; s/"learned"/"rope"/' \
  model_zero_layers.json >model_rope_scaling_yarn.json
echo "{\"model_type\": \"llama\", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, \"attention_factor\": 2}, $hf}" \
  >hf_llama_yarn_attention_factor.json
sed 's/"num_layers": 0/"num_layers": 4, "rope_scaling": "llama3", "rope_scaling_factor": 1/; s/"learned"/"rope"/' \
  model_zero_layers.json >model_rope_scaling_one.json
sed 's/"num_layers": 0/"num_layers": 4, "no_rope_freq": 3/' model_zero_layers.json \
  >model_no_rope_three.json
sed 's/"num_layers": 0/"num_layers": 4, "activation_clamp_value": -7/' \
  model_zero_layers.json >model_clamp_negative.json
sed 's/"num_layers": 0/"num_layers": 4, "attention_sinks": true/' \
  model_zero_layers.json >model_sinks.json
sed 's/"num_layers": 0/"num_layers": 4, "attn_logit_softcapping": 50/' \
  model_zero_layers.json >model_softcap.json
window_pattern() {  # window_pattern OUT SLIDING_WINDOW SKIP_FREQ: tiny's 4 layers with both
  sed "s/\"num_layers\": 0/\"num_layers\": 4, \"sliding_window\": $2, \"window_attn_skip_freq\": $3/" \
    model_zero_layers.json >"$1"
}
window_pattern model_skip_no_window.json 0 2
window_pattern model_skip_one.json 8 1
window_pattern model_skip_string.json 8 '"[1,0]*2"'
window_pattern model_skip_short.json 8 '[1, 0, 1]'
window_pattern model_skip_entry.json 8 '[1, 2, 1, 0]'
cp "$source_dir/models/presets/clusters/local-cpu.json" cluster.json
sed 's/"intra_node_bytes_per_second": [^,]*,/"intra_node_bytes_per_second": 1e-300,/' \
  cluster.json >cluster_absurd.json
sed 's/"price_per_gpu_hour": [^,]*,/"price_per_gpu_hour": 1e400,/' cluster.json >cluster_inf.json
sed 's/"gpus_per_node": [^,]*,/"gpus_per_node": 8, "nics_per_node": 8,/' cluster.json \
  >cluster_unknown.json
mkdir -p a_directory

# --- rows -------------------------------------------------------------------------------------

# Plan files, through every command that reads one: explain, simulate, execute.
plan_file_rows() {  # plan_file_rows FILE PATTERN NAME
  local file=$1 pattern=$2 name=$3
  row "explain: $name" 2 "$pattern" explain "$file"
  row "simulate: $name" 2 "$pattern" simulate "$file" --json new_out.json --svg sentinel.json
  row "execute: $name" 2 "$pattern" mpi 2 execute "$file" --steps 1 --json new_out.json
}
plan_file_rows malformed.json "malformed.json: malformed JSON: " "malformed JSON"
plan_file_rows truncated.json "truncated.json: malformed JSON: " "truncated JSON"
plan_file_rows empty.json "empty.json: malformed JSON: " "empty file"
plan_file_rows binary.json "binary.json: malformed JSON: " "binary file"
plan_file_rows array.json "array.json: expected a JSON object" "a JSON array"
plan_file_rows no_such_plan.json "no_such_plan.json: cannot read file" "nonexistent file"
plan_file_rows version2.json "version2.json: version: plan format version 2 is newer" \
  "newer plan version"
plan_file_rows wrong_type.json 'wrong_type.json: layout: tp: expected an integer ("2")' \
  "wrong type"
plan_file_rows missing.json "missing.json: num_gpus: missing" "missing field"
plan_file_rows tp_zero.json "tp_zero.json: layout: tp: must be between 1 and 10000000 (0)" \
  "tp 0"
plan_file_rows batch_absurd.json "batch_absurd.json: layout: global_batch: must be between 1" \
  "global_batch 1e12"
plan_file_rows huge_int.json "huge_int.json: layout: dp: out of range" "dp beyond 2^63"
plan_file_rows layers_zero.json "layers_zero.json: model: num_layers: must be positive (0)" \
  "model num_layers 0"
plan_file_rows hidden_negative.json "hidden_negative.json: model: hidden_size: must be positive" \
  "model hidden_size -64"
plan_file_rows bandwidth_negative.json \
  "bandwidth_negative.json: cluster: intra_node_bytes_per_second: must be positive" \
  "negative bandwidth"
plan_file_rows heads.json "heads.json: layout: num_attention_heads not divisible by tp (3 % 2)" \
  "heads not divisible by tp"
plan_file_rows gpus.json "gpus.json: layout: tp*pp*dp = 2 differs from num_gpus (4)" \
  "tp*pp*dp != num_gpus"
plan_file_rows unknown_layout.json 'unknown_layout.json: layout: shedule: unknown field ("gpipe")' \
  "unknown layout key"
plan_file_rows unknown_top.json "unknown_top.json: num_gpu: unknown field (2)" "unknown top key"
plan_file_rows unknown_options.json \
  "unknown_options.json: options: flash_attn: unknown field (true)" "unknown options key"

# Hybrid sharding (dp_shard < dp): planned for PyTorch FSDP2 only; a plan file is checked as
# written; the executor refuses it by name.
"$meshplan" plan --model tiny --cluster local-cpu --gpus 4 --tp 1 --framework fsdp --dp-shard 2 \
  --save-plan hsdp.json >/dev/null 2>&1
sed 's/"dp_shard": 2/"dp_shard": 3/' hsdp.json >hsdp_bad.json
row "explain: dp_shard not dividing dp" 2 "hsdp_bad.json: layout: dp_shard must divide dp (4 % 3)" \
  explain hsdp_bad.json
row "simulate: dp_shard not dividing dp" 2 \
  "hsdp_bad.json: layout: dp_shard must divide dp (4 % 3)" simulate hsdp_bad.json --json new_out.json
row "execute: a hybrid-sharded plan" 2 \
  "hsdp.json: layout.dp_shard: the CPU executor shards ZeRO over all 4 data-parallel ranks; hybrid sharding (dp_shard 2) is planned for PyTorch FSDP2 and Megatron-Core only" \
  mpi 4 execute hsdp.json --steps 1 --json new_out.json

# Megatron-Core's --recompute-modules mlp on a parallel block (model.parallel_residual): its MLP
# shares the attention's output reduction, so there is no MLP module to checkpoint.
sed 's/"vocab_size"/"parallel_residual": true, "vocab_size"/' "$source_dir/models/presets/models/tiny.json" \
  >parallel_tiny.json
row "plan: --recompute-modules mlp on a parallel block" 2 \
  "--recompute-modules: mlp needs separate attention and MLP blocks, not a parallel block (tiny)" \
  plan --model parallel_tiny.json --cluster local-cpu --gpus 2 --tp 2 --recompute selective \
  --recompute-modules core_attn,mlp

# Distributed saved activations (Megatron-LM --distribute-saved-activations, DeepSpeed
# partition_activations): a plan file under a framework without them is refused as read.
"$meshplan" plan --model tiny --cluster local-cpu --gpus 2 --tp 2 --framework megatron \
  --recompute full --distribute-saved-activations on --save-plan dsa.json >/dev/null 2>&1
sed -e 's/"framework": "megatron"/"framework": "fsdp"/' \
  -e 's/"overlap_p2p_comm": true/"overlap_p2p_comm": false/' \
  -e 's/"make_vocab_size_divisible_by": 128/"make_vocab_size_divisible_by": 1/' dsa.json >dsa_fsdp.json
sed 's/"recompute": "full",/"recompute": "selective", "recompute_layers": 2,/' dsa.json \
  >block_selective.json
row "explain: recompute_layers without recompute full" 2 \
  "block_selective.json: layout: recompute_layers 2: needs recompute full" \
  explain block_selective.json
sed 's/"recompute": "full",/"recompute": "full", "recompute_layers": 1, "recompute_group_layers": 2,/' \
  dsa.json >groups_and_block.json
row "explain: recompute_group_layers beside recompute_layers" 2 \
  "groups_and_block.json: layout: recompute_group_layers 2: not with recompute_layers" \
  explain groups_and_block.json
row "explain: distribute_saved_activations under fsdp" 2 \
  "dsa_fsdp.json: options: distribute_saved_activations: framework fsdp: torchtitan's activation checkpointing" \
  explain dsa_fsdp.json

# Vocabulary padding (Megatron-LM --make-vocab-size-divisible-by): a divisor out of range, or one
# the framework does not pad by, is refused by the flag's or the plan-file key's name (the
# executor builds the padded rows; until session 48 it refused a plan whose padding added any).
row "plan: --make-vocab-size-divisible-by 0" 2 \
  "--make-vocab-size-divisible-by: must be between 1 and 1048576 (0)" \
  plan --model tiny --cluster local-cpu --gpus 2 --framework megatron \
  --make-vocab-size-divisible-by 0 --json new_out.json --save-plan sentinel.json
row "plan: --make-vocab-size-divisible-by 128 under fsdp" 2 \
  "--make-vocab-size-divisible-by: 128 under framework fsdp: torchtitan builds the tokenizer's vocabulary unpadded (use 1)" \
  plan --model tiny --cluster local-cpu --gpus 2 --framework fsdp \
  --make-vocab-size-divisible-by 128 --json new_out.json
sed -e 's/"framework": "megatron"/"framework": "fsdp"/' \
  -e 's/"overlap_p2p_comm": true/"overlap_p2p_comm": false/' dsa.json >vocab_fsdp.json
row "explain: a megatron plan's divisor 128 under fsdp" 2 \
  "vocab_fsdp.json: options: make_vocab_size_divisible_by: 128 under framework fsdp: torchtitan builds the tokenizer's vocabulary unpadded (use 1)" \
  explain vocab_fsdp.json
sed 's/"make_vocab_size_divisible_by": 128/"make_vocab_size_divisible_by": -5/' dsa.json \
  >vocab_negative.json
row "simulate: make_vocab_size_divisible_by -5" 2 \
  "vocab_negative.json: options: make_vocab_size_divisible_by: must be between 1 and 1048576 (-5)" \
  simulate vocab_negative.json --json new_out.json
"$meshplan" plan --model tiny --cluster local-cpu --gpus 2 --tp 2 --framework megatron \
  --make-vocab-size-divisible-by 256 --save-plan vocab_tp2.json >/dev/null 2>&1
sed 's/"make_vocab_size_divisible_by": 256/"make_vocab_size_divisible_by": 0/' vocab_tp2.json \
  >vocab_zero.json
row "execute: make_vocab_size_divisible_by 0" 2 \
  "vocab_zero.json: options: make_vocab_size_divisible_by: must be between 1 and 1048576 (0)" \
  mpi 2 execute vocab_zero.json --steps 1 --json new_out.json

# Megatron-Core's flex MoE dispatcher (moe_dispatcher flex): costed for Megatron-LM at ep > 1
# and etp 1 only; the CPU executor dispatches with an MPI all-to-all and refuses it by name.
"$meshplan" plan --model tiny-moe --cluster local-cpu --gpus 2 --tp 1 --dp 2 --ep 2 --zero 0 \
  --framework megatron --moe-dispatcher flex --save-plan flex.json >/dev/null 2>&1
sed 's/"moe_dispatcher": "flex"/"moe_dispatcher": "deepep"/' flex.json >flex_unknown.json
sed -e 's/"framework": "megatron"/"framework": "deepspeed"/' \
  -e 's/"overlap_p2p_comm": true/"overlap_p2p_comm": false/' flex.json >flex_deepspeed.json
sed 's/"ep": 2/"ep": 1/' flex.json >flex_ep1.json
row "explain: an unknown moe_dispatcher" 2 \
  "flex_unknown.json: options: moe_dispatcher: unsupported MoE token dispatcher (deepep); supported: alltoall, flex" \
  explain flex_unknown.json
row "explain: moe_dispatcher flex under deepspeed" 2 \
  "flex_deepspeed.json: options: moe_dispatcher: flex: framework deepspeed: Megatron-Core's flex token dispatcher (DeepEP) runs under Megatron-LM only" \
  explain flex_deepspeed.json
row "explain: moe_dispatcher flex at ep 1" 2 \
  "flex_ep1.json: layout: moe_dispatcher flex: needs ep > 1" explain flex_ep1.json
row "execute: a plan with the flex MoE dispatcher" 2 \
  "flex.json: options.moe_dispatcher: the CPU executor dispatches MoE tokens with an MPI all-to-all (alltoall), not DeepEP's flex kernels (flex)" \
  mpi 2 execute flex.json --steps 1 --json new_out.json

# Multi-token prediction (mtp_num_layers; Hugging Face num_nextn_predict_layers): 0 to 8 depths,
# costed for Megatron-LM only, built by no meshplan executor.
sed 's/"num_nextn_predict_layers": 1/"num_nextn_predict_layers": -1/' \
  "$data/hf/DeepSeek-V3.json" >hf_deepseek_mtp_negative.json
sed 's/"first_dense_layers": 1,/"first_dense_layers": 1, "mtp_num_layers": 9,/' \
  "$source_dir/models/presets/models/tiny-moe.json" >model_mtp_absurd.json
sed 's/"first_dense_layers": 1,/"first_dense_layers": 1, "mtp_num_layers": 1,/' \
  "$source_dir/models/presets/models/tiny-moe.json" >model_mtp.json
"$meshplan" plan --model model_mtp.json --cluster local-cpu --gpus 2 --tp 1 --dp 2 --zero 0 \
  --framework megatron --save-plan mtp.json >/dev/null 2>&1
sed -e 's/"framework": "megatron"/"framework": "meshplan"/' \
  -e 's/"overlap_p2p_comm": true/"overlap_p2p_comm": false/' \
  -e 's/"make_vocab_size_divisible_by": 128/"make_vocab_size_divisible_by": 1/' mtp.json >mtp_meshplan.json
row "plan: num_nextn_predict_layers -1 in a DeepSeek-V3 config" 2 \
  "hf_deepseek_mtp_negative.json: num_nextn_predict_layers: must be in [0, 8], 0 for no multi-token prediction (-1)" \
  plan --model hf_deepseek_mtp_negative.json --cluster local-cpu --gpus 2 --json new_out.json
row "plan: mtp_num_layers 9" 2 \
  "model_mtp_absurd.json: mtp_num_layers: must be in [0, 8], 0 for no multi-token prediction (9)" \
  plan --model model_mtp_absurd.json --cluster local-cpu --gpus 2 --json new_out.json
row "plan: a model with MTP under deepspeed" 2 \
  "model_mtp.json: mtp_num_layers: framework deepspeed: Megatron-DeepSpeed's GPTModel has no multi-token-prediction module; plan it with --framework megatron (1)" \
  plan --model model_mtp.json --cluster local-cpu --gpus 2 --framework deepspeed \
  --json new_out.json --save-plan sentinel.json
row "explain: a plan with MTP costed for meshplan" 2 \
  "mtp_meshplan.json: model: mtp_num_layers: framework meshplan: meshplan's executors do not build the multi-token-prediction module; plan it with --framework megatron (1)" \
  explain mtp_meshplan.json
sed 's/"first_dense_layers": 1,/"first_dense_layers": 1, "mtp_num_layers": 2,/' \
  "$source_dir/models/presets/models/tiny-moe.json" >model_mtp2.json
row "plan: two MTP depths with the EP all-to-all overlap" 2 \
  "model_mtp2.json: mtp_num_layers: overlap_moe_expert_parallel_comm: Megatron-Core runs at most one MTP layer in the merged forward-backward schedule (2)" \
  plan --model model_mtp2.json --cluster local-cpu --gpus 2 --dp 2 --ep 2 --framework megatron \
  --overlap-moe-expert-parallel-comm on --json new_out.json
row "execute: a plan with MTP" 2 \
  "mtp.json: model.mtp_num_layers: meshplan's executors do not build the multi-token-prediction module; run the plan with Megatron-LM (--emit megatron) (1)" \
  mpi 2 execute mtp.json --steps 1 --json new_out.json

# Group-limited routing (router_num_groups / router_group_topk; Hugging Face n_group /
# topk_group): G divides E, 1 <= M <= G, M <= k, k <= M E / G.
sed 's/"topk_group": 4/"topk_group": 9/' "$data/hf/DeepSeek-V3.json" >hf_deepseek_topk_group.json
sed 's/"first_dense_layers": 1,/"first_dense_layers": 1, "router_num_groups": 3, "router_group_topk": 1,/' \
  "$source_dir/models/presets/models/tiny-moe.json" >model_groups3.json
row "plan: topk_group 9 of n_group 8 in a DeepSeek-V3 config" 2 \
  "hf_deepseek_topk_group.json: topk_group: must be between 1 and the group count (9 of 8)" \
  plan --model hf_deepseek_topk_group.json --cluster local-cpu --gpus 2 --json new_out.json
row "plan: router_num_groups 3 for 4 experts" 2 \
  "model_groups3.json: router_num_groups: must be a positive divisor of the routed expert count (3 of 4)" \
  plan --model model_groups3.json --cluster local-cpu --gpus 2 --save-plan sentinel.json

# execute: a world size that differs from the plan (2 ranks).
row "execute: mpirun -np 3 for a 2-rank plan" 2 \
  "p.json: num_gpus: the plan has 2 ranks, mpirun started 3" \
  mpi 3 execute p.json --steps 1 --json new_out.json

# plan: model, cluster and flag inputs, with one output new and one existing.
plan_row() {  # plan_row NAME PATTERN ARGS...
  local name=$1 pattern=$2
  shift 2
  row "plan: $name" 2 "$pattern" plan "$@" --json new_out.json --save-plan sentinel.json
}
plan_row "--dp-shard with --zero 2" \
  "--dp-shard: hybrid sharding needs ZeRO 1 (megatron) or 3 (fsdp) (--zero 2)" \
  --model tiny --cluster local-cpu --gpus 4 --dp-shard 2 --zero 2
plan_row "--dp-shard 0" "--dp-shard: must be positive (0)" \
  --model tiny --cluster local-cpu --gpus 4 --dp-shard 0
plan_row "ZB-H1 with sequence parallelism under deepspeed" \
  "--framework: deepspeed cannot run this layout: Megatron-DeepSpeed's ZB-H1 (--enable-zbh1-pipeline) asserts sequence parallelism off (arguments.py)" \
  --model tiny --cluster dgx-h100 --gpus 4 --tp 2 --pp 2 --sequence-parallel on --schedule zb-h1 --framework deepspeed
plan_row "--dp-shard under deepspeed" \
  "--framework: deepspeed cannot run this layout: hybrid sharding (dp_shard < dp) is modelled as PyTorch FSDP2 runs it at ZeRO 3 and as Megatron-Core's distributed optimizer instances at ZeRO 1 only" \
  --model tiny --cluster local-cpu --gpus 4 --dp 4 --dp-shard 2 --framework deepspeed
plan_row "unknown model preset" "unknown model preset 'gpt5'" \
  --model gpt5 --cluster local-cpu --gpus 2
plan_row "unknown cluster preset" "unknown cluster preset 'dgx-z9'" \
  --model tiny --cluster dgx-z9 --gpus 2
plan_row "nonexistent model file" "unknown model preset 'no_such_model.json' (not a file" \
  --model no_such_model.json --cluster local-cpu --gpus 2
plan_row "malformed model file" "malformed.json: malformed JSON: " \
  --model malformed.json --cluster local-cpu --gpus 2
plan_row "empty model file" "empty.json: malformed JSON: " \
  --model empty.json --cluster local-cpu --gpus 2
plan_row "binary cluster file" "binary.json: malformed JSON: " \
  --model tiny --cluster binary.json --gpus 2
plan_row "model num_layers 0" "model_zero_layers.json: num_layers: must be positive (0)" \
  --model model_zero_layers.json --cluster local-cpu --gpus 2
plan_row "model vocab_size 1e11" "model_vocab_absurd.json: vocab_size: absurdly large" \
  --model model_vocab_absurd.json --cluster local-cpu --gpus 2
plan_row "model wrong type" 'model_wrong_type.json: hidden_size: expected an integer ("64")' \
  --model model_wrong_type.json --cluster local-cpu --gpus 2
plan_row "model missing field" "model_missing.json: num_layers: missing" \
  --model model_missing.json --cluster local-cpu --gpus 2
plan_row "model unknown field" "model_unknown.json: num_layer: unknown field (4)" \
  --model model_unknown.json --cluster local-cpu --gpus 2
plan_row "HF config, model_type only, hidden_act relu" \
  "hf_relu.json: hidden_act: unsupported activation (relu)" \
  --model hf_relu.json --cluster local-cpu --gpus 2
plan_row "HF config, unsupported model_type" \
  "hf_falcon.json: model_type: unsupported model type (falcon)" \
  --model hf_falcon.json --cluster local-cpu --gpus 2
plan_row "HF config, Gemma gated by SiLU" \
  "hf_gemma_silu.json: hidden_activation: unsupported activation (silu)" \
  --model hf_gemma_silu.json --cluster local-cpu --gpus 2
plan_row "HF config, Gemma 2 with a negative attention soft-cap" \
  "hf_gemma2_softcap.json: attn_logit_softcapping: must be 0 (none) or positive and finite (-50)" \
  --model hf_gemma2_softcap.json --cluster local-cpu --gpus 2
plan_row "model norm_unit_offset with LayerNorm" \
  "model_unit_offset_layernorm.json: norm_unit_offset: the (1 + gain) scale is modelled for RMSNorm only (layernorm)" \
  --model model_unit_offset_layernorm.json --cluster local-cpu --gpus 2
plan_row "model scale_embeddings not a boolean" \
  "model_scale_embeddings_int.json: scale_embeddings: expected true or false (1)" \
  --model model_scale_embeddings_int.json --cluster local-cpu --gpus 2
plan_row "model attn_logit_softcapping negative" \
  "model_softcap_negative.json: attn_logit_softcapping: must be 0 (none) or positive and finite (-50)" \
  --model model_softcap_negative.json --cluster local-cpu --gpus 2
plan_row "model final_logit_softcapping absurd" \
  "model_final_softcap_absurd.json: final_logit_softcapping: absurdly large, more than 1000000 (30000000)" \
  --model model_final_softcap_absurd.json --cluster local-cpu --gpus 2
plan_row "model query_pre_attn_scalar not a number" \
  'model_query_scalar_string.json: query_pre_attn_scalar: expected a number ("144")' \
  --model model_query_scalar_string.json --cluster local-cpu --gpus 2
plan_row "HF config, gpt-oss with another quick-GELU gain" \
  "hf_gpt_oss_alpha.json: swiglu_alpha: the experts' gate is quick GELU, x sigmoid(1.702 x); another gain is not modelled (2.0)" \
  --model hf_gpt_oss_alpha.json --cluster local-cpu --gpus 2
plan_row "HF config, gpt-oss with swiglu_limit 0 (meshplan's 0 is no clamp)" \
  "hf_gpt_oss_limit_zero.json: swiglu_limit: must be positive, the experts' clamp (gate <= limit, up in [-limit, limit]) (0)" \
  --model hf_gpt_oss_limit_zero.json --cluster local-cpu --gpus 2
plan_row "HF config, gpt-oss with swiglu_limit 1e300 (named by its own key)" \
  "hf_gpt_oss_limit_huge.json: swiglu_limit: absurdly large, more than 1000000 (1e+300)" \
  --model hf_gpt_oss_limit_huge.json --cluster local-cpu --gpus 2
plan_row "HF config, gpt-oss experts_per_token not num_experts_per_tok" \
  "hf_gpt_oss_experts.json: experts_per_token: differs from num_experts_per_tok, the key transformers reads (8 != 4)" \
  --model hf_gpt_oss_experts.json --cluster local-cpu --gpus 2
plan_row "HF config, gpt-oss layer_types not a list, sliding_window null" \
  "hf_gpt_oss_layer_types.json: layer_types: expected one entry per layer, 2 (5)" \
  --model hf_gpt_oss_layer_types.json --cluster local-cpu --gpus 2
plan_row "HF config, qwen2 layer_types too short without use_sliding_window" \
  "hf_qwen_layer_types.json: layer_types: expected one entry per layer, 2 ([\"full_attention\"])" \
  --model hf_qwen_layer_types.json --cluster local-cpu --gpus 2
plan_row "HF config, a partial rotary factor on Llama, which rotates whole heads" \
  "hf_llama_partial.json: partial_rotary_factor: LlamaForCausalLM rotates whole heads (its apply_rotary_pos_emb has no partial path, so transformers cannot build this model); a partial factor is read for Phi-3, GLM-4.5 and GPT-NeoX (0.5)" \
  --model hf_llama_partial.json --cluster local-cpu --gpus 2
plan_row "HF config, Llama 4 planned past its attention chunk" \
  "--seq-len: attention_chunk_size: chunked attention is not modelled; sequences of at most 8192 tokens attend as without it (seq_length 16384)" \
  --model "$data/hf/Llama-4-Scout-17B-16E-text.json" --cluster dgx-h100 --gpus 8 --seq-len 16384
plan_row "model no_rope_freq not dividing num_layers" \
  "model_no_rope_three.json: no_rope_freq: must divide num_layers, as Megatron-Core asserts (4 % 3)" \
  --model model_no_rope_three.json --cluster local-cpu --gpus 2
plan_row "HF config, rope_parameters not an object" \
  "hf_phi3_rope_list.json: rope_parameters: must be an object ([0.75])" \
  --model hf_phi3_rope_list.json --cluster local-cpu --gpus 2
plan_row "HF config, rope_theta 0" \
  "hf_llama_theta_zero.json: rope_theta: must be in (1, 1e+12], the rotary base (0)" \
  --model hf_llama_theta_zero.json --cluster local-cpu --gpus 2
plan_row "HF config, Gemma 3 rope_local_base_freq 0" \
  "hf_gemma3_local_theta_zero.json: rope_local_base_freq: must be in (1, 1e+12], the sliding layers' rotary base (0)" \
  --model hf_gemma3_local_theta_zero.json --cluster local-cpu --gpus 2
plan_row "model rope_local_theta without a sliding layer" \
  "model_local_theta_no_window.json: rope_local_theta: the sliding layers' rotary base, but no layer is sliding (sliding_window 0) (10000)" \
  --model model_local_theta_no_window.json --cluster local-cpu --gpus 2
plan_row "model rope_scaling of a type meshplan does not carry" \
  "model_rope_scaling_dynamic.json: rope_scaling: unsupported rope_scaling (dynamic); supported: none, linear, llama3, yarn (the dynamic types are not carried)" \
  --model model_rope_scaling_dynamic.json --cluster local-cpu --gpus 2
plan_row "model rope_scaling yarn without its original context" \
  "model_rope_scaling_yarn.json: rope_scaling_original_max_positions: required with rope_scaling yarn" \
  --model model_rope_scaling_yarn.json --cluster local-cpu --gpus 2
plan_row "HF config, YaRN attention_factor other than YaRN's own" \
  "hf_llama_yarn_attention_factor.json: rope_scaling: attention_factor: 2 differs from YaRN's 1.13863 for factor 4 (mscale 1, mscale_all_dim 0); meshplan derives it and cannot carry another" \
  --model hf_llama_yarn_attention_factor.json --cluster local-cpu --gpus 2
plan_row "model rope_scaling_factor of 1" \
  "model_rope_scaling_one.json: rope_scaling_factor: must be in (1, 1000], how many times the original context the scaled frequencies cover (1)" \
  --model model_rope_scaling_one.json --cluster local-cpu --gpus 2
plan_row "model activation_clamp_value negative" \
  "model_clamp_negative.json: activation_clamp_value: must be 0 (none) or positive and finite (-7)" \
  --model model_clamp_negative.json --cluster local-cpu --gpus 2
plan_row "model with attention sinks planned without flash attention" \
  "--flash-attention: off: model m has attention_sinks, costed only inside a fused attention kernel" \
  --model model_sinks.json --cluster local-cpu --gpus 2 --flash-attention off
plan_row "HF config, Qwen2 layer_types neither sliding nor full attention" \
  'hf_qwen_window.json: layer_types: expected sliding_attention or full_attention ("chunked_attention")' \
  --model hf_qwen_window.json --cluster local-cpu --gpus 2
plan_row "model sliding_window negative" \
  "model_window_negative.json: sliding_window: must be 0 (full attention) or a window" \
  --model model_window_negative.json --cluster local-cpu --gpus 2
plan_row "model sliding_window a string" "model_window_string.json: sliding_window: " \
  --model model_window_string.json --cluster local-cpu --gpus 2
plan_row "model window_attn_skip_freq without a window" \
  "model_skip_no_window.json: window_attn_skip_freq: chooses windowed layers, but sliding_window is 0 (full attention) (2)" \
  --model model_skip_no_window.json --cluster local-cpu --gpus 2
plan_row "model window_attn_skip_freq 1" \
  "model_skip_one.json: window_attn_skip_freq: must be 2 or more, one full-attention layer every N (1)" \
  --model model_skip_one.json --cluster local-cpu --gpus 2
plan_row "model window_attn_skip_freq a Python expression" \
  'model_skip_string.json: window_attn_skip_freq: expected an integer N >= 2 or a list of 0 and 1, one per layer ("[1,0]*2")' \
  --model model_skip_string.json --cluster local-cpu --gpus 2
plan_row "model window_attn_skip_freq list shorter than the layers" \
  "model_skip_short.json: window_attn_skip_freq: expected one entry per layer, 4 (3 entries: [1,0,1])" \
  --model model_skip_short.json --cluster local-cpu --gpus 2
plan_row "model window_attn_skip_freq entry 2" \
  "model_skip_entry.json: window_attn_skip_freq[1]: must be 1 (windowed) or 0 (full attention) (2)" \
  --model model_skip_entry.json --cluster local-cpu --gpus 2
plan_row "--cp with a window shorter than the sequence" \
  "--cp: cp > 1 with a sliding window shorter than seq_length is not modelled" \
  --model hf_window.json --cluster local-cpu --gpus 2 --cp 2
plan_row "cluster negative bandwidth" \
  "cluster_negative_bandwidth.json: intra_node_bytes_per_second: must be positive" \
  --model tiny --cluster "$data/planner/cluster_negative_bandwidth.json" --gpus 2
plan_row "cluster bandwidth 1e-300" \
  "cluster_absurd.json: intra_node_bytes_per_second: absurdly small" \
  --model tiny --cluster cluster_absurd.json --gpus 2
plan_row "cluster number beyond double (1e400)" \
  "cluster_inf.json: malformed JSON: number overflow" \
  --model tiny --cluster cluster_inf.json --gpus 2
plan_row "cluster unknown field" "cluster_unknown.json: nics_per_node: unknown field (8)" \
  --model tiny --cluster cluster_unknown.json --gpus 2
plan_row "--gpus 0" "--gpus: must be between 1 and 10000000 (0)" \
  --model tiny --cluster local-cpu --gpus 0
plan_row "--gpus absurd" "--gpus: must be between 1 and 10000000 (100000000)" \
  --model tiny --cluster local-cpu --gpus 100000000
plan_row "--gpus not a number" "--gpus" --model tiny --cluster local-cpu --gpus abc
plan_row "heads not divisible by --tp" "num_attention_heads not divisible by tp (96 % 5)" \
  --model gpt3-175b --cluster dgx-a100-80gb --gpus 40 --tp 5
plan_row "--tp*--pp*--dp != --gpus" "tp*pp*dp: fixed sizes multiply to 16" \
  --model tiny --cluster local-cpu --gpus 8 --tp 2 --pp 2 --dp 4
plan_row "--cp 0" "--cp: must be positive (0)" --model tiny --cluster local-cpu --gpus 2 --cp 0
plan_row "--cp not a number" "--cp: expected a positive integer or auto (two)" \
  --model tiny --cluster local-cpu --gpus 2 --cp two
plan_row "--cp does not divide --gpus" "cp: does not divide the GPU count (4 % 8)" \
  --model tiny --cluster local-cpu --gpus 4 --cp 8
plan_row "--seq-len not divisible by 2*--cp" "--cp: seq_length not divisible by 2*cp (32 % 12)" \
  --model tiny --cluster local-cpu --gpus 6 --cp 6
plan_row "--tp*--cp*--pp*--dp != --gpus" "tp*cp*pp*dp: fixed sizes multiply to 16" \
  --model tiny --cluster local-cpu --gpus 8 --tp 2 --cp 2 --pp 2 --dp 2
plan_row "--cp-comm unknown" "--cp-comm: unknown cp_comm, expected p2p or a2a (ring)" \
  --model tiny --cluster local-cpu --gpus 2 --cp 2 --cp-comm ring
plan_row "--cp-comm a2a without --cp" "--cp-comm: needs --cp greater than 1 or auto (a2a)" \
  --model tiny --cluster local-cpu --gpus 2 --cp-comm a2a
plan_row "--cp-comm a2a, kv heads not divisible by tp*cp" \
  "--cp: num_kv_heads not divisible by tp*cp for cp_comm a2a (2 % 4)" \
  --model tiny --cluster local-cpu --gpus 4 --tp 2 --cp 2 --cp-comm a2a
plan_row "--cp with --placement tp-pp-dp" "--cp: cp > 1 needs placement tp-dp-pp" \
  --model tiny --cluster local-cpu --gpus 2 --cp 2 --placement tp-pp-dp
plan_row "--cp with --flash-attention off" "--cp: cp > 1 needs flash attention (cp 2)" \
  --model tiny --cluster local-cpu --gpus 2 --cp 2 --flash-attention off

plan_row "--seq-len 1e9" "--seq-len: seq_length: absurdly large, more than 100000000" \
  --model tiny --cluster local-cpu --gpus 2 --seq-len 1000000000
plan_row "--vpp 0" "--vpp: must be positive (0)" --model tiny --cluster local-cpu --gpus 2 --vpp 0
plan_row "--mb-group 0" "--mb-group: must be positive (0)" --model tiny --cluster local-cpu \
  --gpus 2 --mb-group 0
plan_row "--mb-group with a non-interleaved --schedule" \
  "--mb-group: needs the interleaved schedule (gpipe)" --model tiny --cluster local-cpu --gpus 2 \
  --mb-group 2 --schedule gpipe
plan_row "--ep 0" "--ep: must be positive (0)" --model tiny-moe --cluster local-cpu --gpus 2 --ep 0
plan_row "--ep 2 on a dense model" \
  "(expert parallelism needs a mixture-of-experts model (ep 2, num_experts 0))" \
  --model tiny --cluster local-cpu --gpus 2 --tp 1 --pp 1 --ep 2
plan_row "--ep 3 with 4 experts" "ep_experts x1 (num_experts not divisible by ep (4 % 3))" \
  --model tiny-moe --cluster local-cpu --gpus 3 --tp 1 --pp 1 --global-batch 3 \
  --micro-batch 1 --recompute none --zero 0 --ep 3
plan_row "--ep 4 on dp 2" "ep must divide dp*cp: experts are split over data- and context-parallel ranks (2 % 4)" \
  --model tiny-moe --cluster local-cpu --gpus 2 --tp 1 --pp 1 --ep 4
plan_row "--zero 1 on an MoE model under framework meshplan (its executor runs ZeRO 0)" \
  "--framework: meshplan cannot run this layout: its executor's mixture-of-experts runs ZeRO 0 only (experts are not ZeRO-sharded)" \
  --model tiny-moe --cluster local-cpu --gpus 2 --zero 1
plan_row "--cp 2 with attention sinks under framework meshplan" \
  "--framework: meshplan cannot run this layout: its executor adds attention_sinks in the standard attention kernel, not the context-parallel ring's" \
  --model model_sinks.json --cluster local-cpu --gpus 2 --cp 2
plan_row "--cp 2 with Gemma 2's attention soft-cap under framework meshplan" \
  "--framework: meshplan cannot run this layout: its executor soft-caps attn_logit_softcapping in the standard attention kernel, not the context-parallel ring's" \
  --model model_softcap.json --cluster local-cpu --gpus 2 --cp 2
plan_row "--etp 0" "--etp: must be positive (0)" --model tiny-moe --cluster local-cpu --gpus 2 --etp 0
plan_row "--etp 4 with tp 2" \
  "(etp must divide tp: meshplan models the expert tensor-parallel group inside the tp group (2 % 4))" \
  --model tiny-moe --cluster local-cpu --gpus 2 --tp 2 --etp 4 --framework megatron
plan_row "--etp 1 on a dense model" \
  "--etp: needs a mixture-of-experts model (tiny has no experts)" \
  --model tiny --cluster local-cpu --gpus 2 --tp 2 --pp 1 --etp 1 --framework megatron
plan_row "--moe-load-imbalance 0.5" "--moe-load-imbalance: must be in [1, 64] (0.5)" \
  --model tiny-moe --cluster local-cpu --gpus 2 --moe-load-imbalance 0.5
plan_row "--moe-aux-loss-coeff 2" "--moe-aux-loss-coeff: must be in [0, 1] (2)" \
  --model tiny-moe --cluster local-cpu --gpus 2 --moe-aux-loss-coeff 2
row "an unknown command" 2 "unknown command 'bogus' (expected one of: models, clusters, plan," \
  bogus --json new_out.json
plan_row "--json with an empty path" "--json: empty value" \
  --model tiny --cluster local-cpu --gpus 2 --json ""
plan_row "--tp with an empty value" "--tp: empty value" --model tiny --cluster local-cpu --gpus 2 --tp ""
# An echoed value stays on the one line: control bytes and invalid UTF-8 as \xNN.
plan_row "--framework with a newline" \
  '--framework: unsupported framework (a\x0ab); supported: megatron, deepspeed, fsdp, meshplan' \
  --model tiny --cluster local-cpu --gpus 2 --framework "$(printf 'a\nb')"
printf '{"name": "t\351"}' >latin1.json
plan_row "a model file in Latin-1" "latin1.json: malformed JSON: " \
  --model latin1.json --cluster local-cpu --gpus 2
# Flags that change nothing once the sizes they act on are fixed (session 36's audit).
plan_row "--overlap-p2p-comm with 1f1b" \
  "--overlap-p2p-comm: no effect without the interleaved schedule (fixed by --pp 1 or --schedule)" \
  --model tiny --cluster local-cpu --gpus 2 --pp 2 --schedule 1f1b --framework megatron \
  --overlap-p2p-comm off
plan_row "--overlap-param-gather at ZeRO 0" \
  "--overlap-param-gather: no effect with --zero 0 (no parameter gather)" \
  --model tiny --cluster local-cpu --gpus 2 --zero 0 --overlap-param-gather off
plan_row "--bucket-mb at dp 1" \
  "--bucket-mb: no effect with --dp 1 and no context parallelism (no gradient reduce)" \
  --model tiny --cluster local-cpu --gpus 2 --dp 1 --bucket-mb 1
plan_row "--overlap-tp-comm at tp 1" \
  "--overlap-tp-comm: no effect with --tp 1 (no tensor-parallel collectives)" \
  --model tiny --cluster local-cpu --gpus 2 --tp 1 --overlap-tp-comm on
plan_row "--scatter-gather-pipeline at pp 1" \
  "--scatter-gather-pipeline: no effect with --pp 1 (no pipeline sends)" \
  --model tiny --cluster local-cpu --gpus 2 --pp 1 --scatter-gather-pipeline on
plan_row "--moe-dispatcher unknown" \
  "--moe-dispatcher: unsupported MoE token dispatcher (deepep); supported: alltoall, flex" \
  --model tiny-moe --cluster local-cpu --gpus 2 --moe-dispatcher deepep
plan_row "--moe-dispatcher flex under deepspeed" \
  "--moe-dispatcher: flex: framework deepspeed: Megatron-Core's flex token dispatcher (DeepEP) runs under Megatron-LM only" \
  --model tiny-moe --cluster local-cpu --gpus 2 --framework deepspeed --moe-dispatcher flex
plan_row "--moe-dispatcher flex on a dense model" \
  "--moe-dispatcher: needs a mixture-of-experts model (tiny has no experts)" \
  --model tiny --cluster local-cpu --gpus 2 --framework megatron --moe-dispatcher flex
plan_row "--moe-dispatcher flex with --ep 1" \
  "--moe-dispatcher: flex needs --ep greater than 1 (Megatron-Core's DeepEP dispatcher requires TPxEP > 1)" \
  --model tiny-moe --cluster local-cpu --gpus 2 --framework megatron --ep 1 --moe-dispatcher flex
plan_row "--moe-dispatcher flex with --etp 2" \
  "--moe-dispatcher: flex is modelled with etp 1 only (the flex dispatcher's etp x ep group is not) (--etp 2)" \
  --model tiny-moe --cluster local-cpu --gpus 2 --framework megatron --tp 2 --etp 2 --moe-dispatcher flex
plan_row "--moe-load-imbalance 1 (its default) on a dense model" \
  "--moe-load-imbalance: needs a mixture-of-experts model (tiny has no experts)" \
  --model tiny --cluster local-cpu --gpus 2 --moe-load-imbalance 1
plan_row "--moe-load-imbalance on a dense model" \
  "--moe-load-imbalance: needs a mixture-of-experts model (tiny has no experts)" \
  --model tiny --cluster local-cpu --gpus 2 --moe-load-imbalance 1.5
plan_row "--moe-aux-loss-coeff on a dense model" \
  "--moe-aux-loss-coeff: needs a mixture-of-experts model (tiny has no experts)" \
  --model tiny --cluster local-cpu --gpus 2 --moe-aux-loss-coeff 0.01
plan_row "--gpus beyond 64 bits" "--gpus: out of the 64-bit integer range (99999999999999999999999)" \
  --model tiny --cluster local-cpu --gpus 99999999999999999999999
plan_row "--gpus in hexadecimal" "--gpus: expected a decimal integer (0x8)" \
  --model tiny --cluster local-cpu --gpus 0x8
plan_row "--zero beyond its 32-bit field" "--zero: out of range for this option (2147483648)" \
  --model tiny --cluster local-cpu --gpus 2 --zero 2147483648
plan_row "--bucket-mb not a number" "--bucket-mb: expected a number (12MB)" \
  --model tiny --cluster local-cpu --gpus 2 --bucket-mb 12MB
plan_row "--bucket-mb below a byte" "--bucket-mb: must be in (0, 1e6] MiB and at least one byte (1e-30)" \
  --model tiny --cluster local-cpu --gpus 2 --bucket-mb 1e-30
plan_row "the default global batch over the cap" \
  "--global-batch: the default, 2 x --gpus = 2000000, is more than 131072 sequences: give one" \
  --model tiny --cluster local-cpu --gpus 1000000
plan_row "--bucket-mb 0" "--bucket-mb: must be in (0, 1e6] MiB and at least one byte (0)" \
  --model tiny --cluster local-cpu --gpus 2 --bucket-mb 0
plan_row "--bucket-mb with --zero 3 reduced layer by layer" \
  "--bucket-mb: no effect with --zero 3 (meshplan reduces ZeRO-3 gradients one bucket per layer)" \
  --model tiny --cluster local-cpu --gpus 2 --zero 3 --bucket-mb 1
row "simulate: --bucket-mb on a plan without a gradient reduce" 2 \
  "--bucket-mb: no effect on this plan (dp x cp is 1: no gradient reduce)" \
  simulate p.json --bucket-mb 1 --json new_out.json --trace sentinel.json
plan_row "--overlap-param-gather on with DeepSpeed's ZeRO 1" \
  "--overlap-param-gather: no effect with --zero 1 under framework deepspeed (it all-gathers the updated parameters inside the optimizer step)" \
  --model tiny --cluster local-cpu --gpus 2 --framework deepspeed --zero 1 --overlap-param-gather on
plan_row "--overlap-tp-comm on under DeepSpeed" \
  "--overlap-tp-comm: on under framework deepspeed: Megatron-DeepSpeed overlaps no tensor-parallel" \
  --model tiny --cluster local-cpu --gpus 2 --framework deepspeed --tp 2 --overlap-tp-comm on
row "simulate: --bucket-mb -5" 2 "--bucket-mb: must be positive (-5)" \
  simulate p.json --bucket-mb -5 --json new_out.json --trace sentinel.json
row "execute: --steps 0" 2 "--steps: must be between 1 and 1000000000 (0)" \
  mpi 2 execute p.json --steps 0 --json new_out.json
mkdir -p stray_ck/step_00000002 stray_ck/step_00000003 stray_ck/step_x
row "execute: a stray directory of a step it will checkpoint" 2 \
  "stray_ck: --checkpoint-dir: step_00000002 exists and is not this run's; --overwrite-checkpoints replaces it" \
  mpi 2 execute p.json --steps 4 --checkpoint-dir stray_ck --checkpoint-every 2 --json new_out.json
row "execute: --steps 2^62 (checked every planned step before the first)" 2 \
  "--steps: must be between 1 and 1000000000 (4611686018427387904)" \
  mpi 2 execute p.json --steps 4611686018427387904 --checkpoint-dir new_ck --checkpoint-every 100 \
  --json new_out.json
row "execute: --resume with no checkpoint directory" 2 \
  "missing_ck: --resume: no checkpoint to resume from (no manifest.json, no directory)" \
  mpi 2 execute p.json --steps 2 --resume --checkpoint-dir missing_ck --json new_out.json
if [ -e missing_ck ]; then  # the row's contract, and the directory it named not made either
  echo "FAILED   execute: --resume with no checkpoint directory (missing_ck was created)"
  num_failed=$((num_failed + 1))
fi
row "execute: --lr -1" 2 "--lr: must be in (0, 1] (-1)" \
  mpi 2 execute p.json --steps 1 --lr -1 --json new_out.json
row "execute: --lr inf" 2 "--lr: must be in (0, 1] (inf)" \
  mpi 2 execute p.json --steps 1 --lr inf --json new_out.json
row "execute: --keep-checkpoints without --checkpoint-dir" 2 \
  "--keep-checkpoints: needs --checkpoint-dir (3)" \
  mpi 2 execute p.json --steps 1 --keep-checkpoints 3 --json new_out.json
row "execute: nonexistent --data file" 2 "/nonexistent/text.txt: --data: cannot read file" \
  mpi 2 execute p.json --steps 1 --data /nonexistent/text.txt --json new_out.json

# Output paths that cannot be written: a failure at run time (exit 1), nothing left behind.
row "plan --json into /proc" 1 "/proc/meshplan_x.json: cannot write file" \
  plan --model tiny --cluster local-cpu --gpus 2 --json /proc/meshplan_x.json
row "plan --save-plan is a directory" 1 "a_directory: cannot write file" \
  plan --model tiny --cluster local-cpu --gpus 2 --save-plan a_directory
row "simulate --json into /proc" 1 "/proc/meshplan_x.json: cannot write file" \
  simulate p.json --json /proc/meshplan_x.json
row "simulate --trace is a directory" 1 "a_directory: cannot write file" \
  simulate p.json --trace a_directory

# validate: the published-runs file.
row "validate: nonexistent runs file" 2 "no_such_runs.json: cannot read file" \
  validate no_such_runs.json --json new_out.json
row "validate: malformed runs file" 2 "malformed.json: malformed JSON: " \
  validate malformed.json --json new_out.json
row "validate: wrong type in a run" 2 \
  'runs_malformed.json: runs[fixture-bad-gpus]: hardware: num_gpus: expected an integer' \
  validate "$data/planner/runs_malformed.json" --json new_out.json
sed 's/"micro_batch": 1,/"micro_bach": 1,/' "$data/planner/runs_small.json" >runs_typo.json
sed 's/"micro_batch": 1,/"micro_batch": 0,/' "$data/planner/runs_small.json" >runs_micro_zero.json
row "validate: a misspelt layout key in a run" 2 \
  'runs_typo.json: runs[fixture-fixed-layout]: layout: micro_bach: unknown field (1)' \
  validate runs_typo.json --json new_out.json
row "validate: a micro-batch of 0 in a run (once a SIGFPE in the search)" 2 \
  'runs_micro_zero.json: runs[fixture-fixed-layout]: layout: micro_batch: must be at least 1 (0)' \
  validate runs_micro_zero.json --json new_out.json
sed '0,/"inter_node_gbps_per_gpu": 100/s//"inter_node_gbps_per_gpu": 1e300/' \
  "$data/planner/runs_small.json" >runs_bandwidth.json
row "validate: an absurd inter-node bandwidth, named in the runs file's unit" 2 \
  'hardware: inter_node_gbps_per_gpu: must be in [0.008, 8e+07] Gbit/s (1e+300)' \
  validate runs_bandwidth.json --json new_out.json
sed -e 's/"version": 1,/"version": 11,/' \
  -e '0,/"vpp": 1,/s//"vpp": 1, "pipeline_layout": "Et*12|t*12L",/' \
  "$data/planner/runs_small.json" >runs_layout.json
row "validate: a run's layout string against its own vpp" 2 \
  'runs[fixture-fixed-layout]: layout: pipeline_layout: 2 virtual stages per rank, vpp says 1' \
  validate runs_layout.json --json new_out.json
row "validate --json into /proc" 1 "/proc/meshplan_x.json: cannot write file" \
  validate "$data/planner/runs_small.json" --json /proc/meshplan_x.json
row "validate --json is a directory" 1 "a_directory: cannot write file" \
  validate "$data/planner/runs_small.json" --json a_directory

# The directory given as an input file.
row "explain: a directory as the plan file" 2 "a_directory: cannot read file (a directory)" \
  explain a_directory
row "simulate: a directory as the plan file" 2 "a_directory: cannot read file (a directory)" \
  simulate a_directory --json new_out.json
row "validate: a directory as the runs file" 2 "a_directory: cannot read file (a directory)" \
  validate a_directory --json new_out.json
plan_row "a directory as the model file" "a_directory: cannot read file (a directory)" \
  --model a_directory --cluster local-cpu --gpus 2

# Issue 11's first findings, each fixed with its own test elsewhere, held here too.
row "plan: a second output that cannot be written leaves the first untouched" 1 \
  "/proc/meshplan_x.json: cannot write file" \
  plan --model tiny --cluster local-cpu --gpus 2 --json sentinel.json --save-plan /proc/meshplan_x.json
row "simulate: a second output that cannot be written leaves the first untouched" 1 \
  "/proc/meshplan_x.json: cannot write file" \
  simulate p.json --svg sentinel.json --json /proc/meshplan_x.json
row "plan: the same file for --json and --save-plan" 2 \
  "--json and --save-plan: the same output file (new_out.json)" \
  plan --model tiny --cluster local-cpu --gpus 2 --json new_out.json --save-plan new_out.json
row "plan: --refine 0" 2 "--refine: must be positive (0)" \
  plan --model tiny --cluster local-cpu --gpus 2 --refine 0 --json new_out.json
row "plan: --precision fp8 on A100 (no FP8 tensor cores)" 2 \
  "dgx-a100-80gb: precision: fp8: A100-SXM4-80GB has no FP8 tensor cores" \
  plan --model tiny --cluster dgx-a100-80gb --gpus 8 --precision fp8 --json new_out.json
row "plan: --precision fp16" 2 "--precision: unsupported precision (fp16); supported: bf16, fp8" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --precision fp16 --json new_out.json
row "plan: --fp8-param-gather with bf16 GEMMs" 2 "fp8_param_gather: needs precision fp8" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --fp8-param-gather on --json new_out.json
row "plan: --fp8-recipe tensorwise with bf16 GEMMs" 2 "fp8_recipe: tensorwise: needs precision fp8" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --fp8-recipe tensorwise --json new_out.json
row "plan: --fp8-recipe mxfp8" 2 \
  "--fp8-recipe: unsupported FP8 recipe (mxfp8); supported: delayed, tensorwise" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --precision fp8 --fp8-recipe mxfp8 --json new_out.json
row "plan: --overlap-moe-expert-parallel-comm under fsdp" 2 \
  "--overlap-moe-expert-parallel-comm: framework fsdp: only Megatron-Core merges" \
  plan --model tiny-moe --cluster dgx-h100 --gpus 8 --framework fsdp \
  --overlap-moe-expert-parallel-comm on --json new_out.json
row "plan: --overlap-moe-expert-parallel-comm yes" 2 \
  "--overlap-moe-expert-parallel-comm: expected on or off (yes)" \
  plan --model tiny-moe --cluster dgx-h100 --gpus 8 --framework megatron \
  --overlap-moe-expert-parallel-comm yes --json new_out.json
row "plan: --overlap-moe-expert-parallel-comm on a dense model" 2 \
  "overlap_moe_expert_parallel_comm: needs a mixture-of-experts model at ep > 1" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework megatron \
  --overlap-moe-expert-parallel-comm on --json new_out.json
row "plan: --delay-wgrad-compute without the overlap" 2 \
  "--delay-wgrad-compute: needs --overlap-moe-expert-parallel-comm on" \
  plan --model tiny-moe --cluster dgx-h100 --gpus 8 --framework megatron \
  --delay-wgrad-compute on --json new_out.json
row "plan: --overlap-moe-expert-parallel-comm at pp 2 with 1f1b" 2 \
  "overlap_moe_expert_parallel_comm: pp 2 with schedule 1f1b: Megatron-Core asserts virtual_pipeline_model_parallel_size" \
  plan --model tiny-moe --cluster dgx-h100 --gpus 8 --framework megatron --pp 2 --ep 2 \
  --schedule 1f1b --overlap-moe-expert-parallel-comm on --json new_out.json
row "plan: --fp8-param-gather under fsdp" 2 "fp8_param_gather: framework fsdp: torchtitan's float8" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --precision fp8 --framework fsdp \
  --fp8-param-gather on --json new_out.json
row "plan: --fp8-param-gather under meshplan's executor" 2 "fp8_param_gather: framework meshplan" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --precision fp8 --framework meshplan \
  --fp8-param-gather on --json new_out.json
row "plan: --overlap-p2p-comm on under deepspeed" 2 \
  "--overlap-p2p-comm: framework deepspeed: the pipeline engine's sends are blocking" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework deepspeed --overlap-p2p-comm on \
  --json new_out.json
row "plan: --overlap-p2p-comm maybe" 2 "--overlap-p2p-comm: expected on or off (maybe)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --overlap-p2p-comm maybe --json new_out.json
row "plan: --distribute-saved-activations under fsdp" 2 \
  "--distribute-saved-activations: framework fsdp: torchtitan's activation checkpointing" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework fsdp \
  --distribute-saved-activations on --json new_out.json
row "plan: --distribute-saved-activations with --recompute none" 2 \
  "--distribute-saved-activations: needs --recompute full (none)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute none \
  --distribute-saved-activations on --json new_out.json
row "plan: --distribute-saved-activations with --sequence-parallel on" 2 \
  "--distribute-saved-activations: not with --sequence-parallel on" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --sequence-parallel on \
  --distribute-saved-activations on --json new_out.json
row "plan: --distribute-saved-activations at --tp 1 under megatron" 2 \
  "--distribute-saved-activations: needs --tp above 1 under --framework megatron" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --tp 1 \
  --distribute-saved-activations on --json new_out.json
row "plan: --distribute-saved-activations at --tp 1 under meshplan" 2 \
  "--distribute-saved-activations: needs --tp above 1 under --framework meshplan" \
  plan --model tiny --cluster local-cpu --gpus 2 --tp 1 \
  --distribute-saved-activations on --json new_out.json
row "plan: --recompute-layers without --recompute full" 2 \
  "--recompute-layers: needs --recompute full (searched)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute-layers 2 --json new_out.json
row "plan: --recompute-group-layers without --recompute full" 2 \
  "--recompute-group-layers: needs --recompute full (searched)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute-group-layers 2 --json new_out.json
row "plan: --recompute-group-layers 0" 2 "--recompute-group-layers: must be positive (0)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute full --recompute-group-layers 0 \
  --json new_out.json
row "plan: --recompute-group-layers auto with --recompute selective" 2 \
  "--recompute-group-layers: auto needs full recompute among the searched ones (selective)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute selective \
  --recompute-group-layers auto --json new_out.json
row "plan: --recompute-layers past the layer bound" 2 \
  "--recompute-layers: must be between 1 and 100000 (100000000000000)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute full \
  --recompute-layers 100000000000000 --json new_out.json
row "plan: --recompute-group-layers past the layer bound" 2 \
  "--recompute-group-layers: must be between 1 and 100000 (100001)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute full \
  --recompute-group-layers 100001 --json new_out.json
row "plan: --recompute-group-layers two" 2 \
  "--recompute-group-layers: expected a positive integer or auto (two)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute full --recompute-group-layers two \
  --json new_out.json
row "plan: --recompute-group-layers with --recompute-layers" 2 \
  "--recompute-group-layers: not with --recompute-layers" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute full --recompute-group-layers 2 \
  --recompute-layers 1 --json new_out.json
row "plan: --recompute-group-layers under fsdp" 2 \
  "--recompute-group-layers: framework fsdp: torchtitan's layer AC" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute full --recompute-group-layers 2 \
  --framework fsdp --json new_out.json
row "plan: --recompute-modules without --recompute selective" 2 \
  "--recompute-modules: needs --recompute selective (searched)" \
  plan --model tiny-moe --cluster dgx-h100 --gpus 8 --recompute-modules moe_act --json new_out.json
row "plan: --recompute-modules mhc (not costed)" 2 \
  "--recompute-modules: mhc is a Megatron-Core module meshplan does not cost yet" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute selective --recompute-modules mhc \
  --json new_out.json
row "plan: --recompute-modules moe on a dense model" 2 \
  "--recompute-modules: moe needs a mixture-of-experts model (tiny)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute selective --recompute-modules moe \
  --json new_out.json
row "plan: --recompute-modules with an unknown name" 2 \
  "--recompute-modules: unknown module, expected core_attn, moe_act, layernorm, mla_up_proj, mlp, shared_experts or moe (attn)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute selective --recompute-modules attn \
  --json new_out.json
row "plan: --recompute-modules moe_act on a dense model" 2 \
  "--recompute-modules: moe_act needs a mixture-of-experts model (tiny)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute selective --recompute-modules moe_act \
  --json new_out.json
row "plan: --recompute-modules mla_up_proj without latent attention" 2 \
  "--recompute-modules: mla_up_proj needs a latent-attention model (tiny)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute selective \
  --recompute-modules mla_up_proj --json new_out.json
row "plan: --recompute-modules under deepspeed" 2 \
  "--recompute-modules: framework deepspeed: the list is Megatron-Core's" \
  plan --model tiny-moe --cluster dgx-h100 --gpus 8 --recompute selective \
  --recompute-modules moe_act --framework deepspeed --json new_out.json
row "plan: --recompute-layers 0" 2 "--recompute-layers: must be positive (0)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute full --recompute-layers 0 \
  --json new_out.json
row "plan: --recompute-layers auto with --recompute none" 2 \
  "--recompute-layers: auto needs full recompute among the searched ones (none)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute none --recompute-layers auto \
  --json new_out.json
row "plan: --recompute-layers under deepspeed" 2 \
  "--recompute-layers: framework deepspeed: Megatron-LM's --recompute-method block" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute full --recompute-layers 2 \
  --framework deepspeed --json new_out.json
row "plan: --recompute-layers under fsdp" 2 \
  "--recompute-layers: framework fsdp: Megatron-LM's --recompute-method block" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --recompute full --recompute-layers 2 \
  --framework fsdp --json new_out.json
row "plan: --distribute-saved-activations maybe" 2 \
  "--distribute-saved-activations: expected on or off (maybe)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --distribute-saved-activations maybe \
  --json new_out.json
row "plan: --fp8-param-gather maybe" 2 "--fp8-param-gather: expected on or off (maybe)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --fp8-param-gather maybe --json new_out.json
row "plan: --compile under megatron" 2 "compile: framework megatron" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --compile on --json new_out.json
row "plan: --compile under deepspeed" 2 "compile: framework deepspeed" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework deepspeed --compile on \
  --json new_out.json
row "plan: --compile maybe" 2 "--compile: expected on, off or blocks (maybe)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework fsdp --compile maybe --json new_out.json
row "plan: --flash-attention-version 3" 2 "--flash-attention-version: expected 1 or 2 (3)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --flash-attention-version 3 --json new_out.json
row "plan: --flash-attention-version 1 unfused" 2 \
  "--flash-attention-version: 1 needs flash_attention on" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --flash-attention off --flash-attention-version 1 \
  --json new_out.json
row "plan: --fsdp-version 3" 2 "--fsdp-version: expected 1 or 2 (3)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework fsdp --fsdp-version 3 \
  --json new_out.json
row "plan: --fsdp-version 1 under megatron" 2 \
  "--fsdp-version: 1 needs framework fsdp (framework megatron)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --fsdp-version 1 --json new_out.json
row "plan: --fsdp-head-in-root under megatron" 2 \
  "--fsdp-head-in-root: needs framework fsdp (framework megatron)" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --fsdp-head-in-root on --json new_out.json
row "plan: --fsdp-head-in-root yes" 2 "--fsdp-head-in-root" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework fsdp --fsdp-head-in-root yes \
  --json new_out.json
row "plan: --fsdp-version 1 with --precision fp8" 2 \
  "--fsdp-version: 1 with precision fp8" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework fsdp --fsdp-version 1 \
  --precision fp8 --json new_out.json
row "plan: --optimizer-impl lamb" 2 \
  "--optimizer-impl: unsupported optimizer implementation (lamb); supported: fused, foreach, for-loop, composer" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework fsdp --optimizer-impl lamb \
  --json new_out.json
row "plan: --optimizer-impl foreach under megatron" 2 \
  "--optimizer-impl: foreach under framework megatron" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --optimizer-impl foreach --json new_out.json
row "plan: --weight-decay off with the fused optimizer" 2 \
  "--weight-decay: off with the fused optimizer" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework fsdp --weight-decay off \
  --json new_out.json
row "plan: --norm-kernel triton" 2 \
  "--norm-kernel: unsupported norm kernel (triton); supported: fused, eager" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework fsdp --norm-kernel triton \
  --json new_out.json
row "plan: --norm-kernel eager under megatron" 2 "--norm-kernel: eager under framework megatron" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --norm-kernel eager --json new_out.json
row "plan: --pipeline-grad-scatter-gather off under megatron" 2 \
  "--pipeline-grad-scatter-gather: false under framework megatron" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --scatter-gather-pipeline on \
  --pipeline-grad-scatter-gather off --json new_out.json
row "plan: --pipeline-grad-scatter-gather off without scatter/gather" 2 \
  "--pipeline-grad-scatter-gather: false without scatter_gather_pipeline" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework deepspeed \
  --pipeline-grad-scatter-gather off --json new_out.json
row "plan: --deepspeed-grad-all-reduce off under megatron" 2 \
  "--deepspeed-grad-all-reduce: false under framework megatron" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --deepspeed-grad-all-reduce off --json new_out.json
row "plan: --deepspeed-grad-all-reduce off with --zero 3" 2 \
  "--deepspeed-grad-all-reduce: off applies to ZeRO 1-2's gradient reduce, not --zero 3" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework deepspeed --zero 3 \
  --deepspeed-grad-all-reduce off --json new_out.json
row "plan: --norm-kernel eager with --compile on" 2 "--norm-kernel: eager with compile on" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework fsdp --compile on --norm-kernel eager \
  --json new_out.json
row "plan: --norm-kernel eager for a LayerNorm model" 2 \
  "--norm-kernel: eager: model gpt3-6.7b uses layernorm" \
  plan --model gpt3-6.7b --cluster dgx-h100 --gpus 8 --framework fsdp --norm-kernel eager \
  --json new_out.json
row "plan: --grad-reduce-dtype fp16" 2 \
  "--grad-reduce-dtype: unsupported gradient reduce dtype (fp16); supported: fp32, bf16" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --grad-reduce-dtype fp16 --json new_out.json
row "plan: --grad-reduce-dtype bf16 in fp32 training" 2 \
  "--grad-reduce-dtype: bf16 needs 16-bit mixed-precision training (local-cpu trains in fp32)" \
  plan --model tiny --cluster local-cpu --gpus 2 --grad-reduce-dtype bf16 --json new_out.json
row "plan: --grad-reduce-dtype fp32 under deepspeed" 2 \
  "--grad-reduce-dtype: fp32 under framework deepspeed: DeepSpeed's communication_data_type" \
  plan --model tiny --cluster dgx-h100 --gpus 8 --framework deepspeed --grad-reduce-dtype fp32 \
  --json new_out.json
plan_row "--global-batch 10^12 (searched for hours before the cap)" \
  "--global-batch: must be between 1 and 131072 (1000000000000)" \
  --model tiny --cluster local-cpu --gpus 2 --global-batch 1000000000000
plan_row "--save-plan-rank 0" "--save-plan-rank: must be positive (0)" \
  --model tiny --cluster local-cpu --gpus 2 --save-plan-rank 0
plan_row "--save-plan-rank beyond the feasible plans" "--save-plan-rank: only " \
  --model tiny --cluster local-cpu --gpus 2 --tp 2 --zero 0 --micro-batch 1 --recompute none \
  --save-plan-rank 50
plan_row "--memory-headroom not a number" \
  "--memory-headroom: expected GiB (>= 1) or a fraction of the GPU's memory (< 1) (lots)" \
  --model tiny --cluster local-cpu --gpus 2 --memory-headroom lots
plan_row "--memory-headroom the whole GPU" \
  "--memory-headroom: leaves no memory on the 3.0 GiB of each " \
  --model tiny --cluster local-cpu --gpus 2 --memory-headroom 3
# sweep (issue 14, Sec. 1): its own options; both outputs untouched.
sweep_row() {  # sweep_row NAME PATTERN ARGS...
  local name=$1 pattern=$2
  shift 2
  row "sweep: $name" 2 "$pattern" sweep "$@" --json new_out.json --html sentinel.json
}
sweep_row "--gpus 0" "--gpus: must be between 1 and 10000000 (0)" \
  --model tiny --cluster local-cpu --gpus 0
sweep_row "--gpus reversed range" "--gpus: reversed range, the first end is larger (8..2)" \
  --model tiny --cluster local-cpu --gpus 8..2
sweep_row "--gpus range end not a power of two" "--gpus: range ends must be powers of two (2..12)" \
  --model tiny --cluster local-cpu --gpus 2..12
sweep_row "--gpus list with a word" "--gpus: expected A..B (powers of two) or a list A,B,... (2,x)" \
  --model tiny --cluster local-cpu --gpus 2,x
sweep_row "--gpus count twice" "--gpus: 4 given twice (4,2,4)" \
  --model tiny --cluster local-cpu --gpus 4,2,4
sweep_row "unknown cluster" "unknown cluster preset 'dgx-z9'" \
  --model tiny --cluster local-cpu,dgx-z9 --gpus 2..4
sweep_row "cluster named twice" "--cluster: named twice (local-cpu,local-cpu)" \
  --model tiny --cluster local-cpu,local-cpu --gpus 2..4
sweep_row "--price without =" "--price: expected CLUSTER=USD_PER_GPU_HOUR (local-cpu)" \
  --model tiny --cluster local-cpu --gpus 2..4 --price local-cpu
sweep_row "--price not a number" "--price: expected CLUSTER=USD_PER_GPU_HOUR (local-cpu=cheap)" \
  --model tiny --cluster local-cpu --gpus 2..4 --price local-cpu=cheap
sweep_row "--price in hexadecimal" "--price: expected CLUSTER=USD_PER_GPU_HOUR (local-cpu=0x10)" \
  --model tiny --cluster local-cpu --gpus 2..4 --price local-cpu=0x10
sweep_row "--price negative" "--price: must be between 0 and 1e6 USD (local-cpu=-1)" \
  --model tiny --cluster local-cpu --gpus 2..4 --price local-cpu=-1
sweep_row "--price for a cluster not swept" "--price: cluster not in --cluster (dgx-h100=2)" \
  --model tiny --cluster local-cpu --gpus 2..4 --price dgx-h100=2
sweep_row "--tokens 0" "--tokens: must be between 1 and 1e18 (0)" \
  --model tiny --cluster local-cpu --gpus 2..4 --tokens 0
sweep_row "--batch-scaling sideways" "--batch-scaling: expected fixed or grow (sideways)" \
  --model tiny --cluster local-cpu --gpus 2..4 --batch-scaling sideways
sweep_row "--global-batch with --batch-scaling grow" \
  "--global-batch: fixes the batch, --batch-scaling grow grows it: give one" \
  --model tiny --cluster local-cpu --gpus 2..4 --global-batch 8 --batch-scaling grow
sweep_row "no point with a feasible plan" \
  "no feasible plan for gpt3-175b at any of the 2 points swept (--gpus 1,2)" \
  --model gpt3-175b --cluster dgx-a100-40gb --gpus 1,2
sweep_row "--framework jax" "--framework: unsupported framework (jax)" \
  --model tiny --cluster local-cpu --gpus 2..4 --framework jax
sweep_row "--recompute-layers 4" \
  "--recompute-layers: expected auto (a fixed count is plan's, with --recompute full) (4)" \
  --model tiny --cluster local-cpu --gpus 2..4 --recompute-layers 4
sweep_row "--recompute-group-layers 3" \
  "--recompute-group-layers: expected auto (a fixed count is plan's, with --recompute full) (3)" \
  --model tiny --cluster local-cpu --gpus 2..4 --recompute-group-layers 3
sweep_row "--recompute-group-layers auto under fsdp" \
  "--recompute-group-layers: framework fsdp: torchtitan's layer AC" \
  --model tiny --cluster dgx-h100 --gpus 2..4 --framework fsdp --recompute-group-layers auto
sweep_row "--recompute-layers auto under fsdp" \
  "--recompute-layers: framework fsdp: Megatron-LM's --recompute-method block" \
  --model tiny --cluster dgx-h100 --gpus 2..4 --framework fsdp --recompute-layers auto
sweep_row "--recompute-modules core_attn,mlp" \
  "--recompute-modules: expected auto (a fixed list is plan's, with --recompute selective) (core_attn,mlp)" \
  --model tiny --cluster local-cpu --gpus 2..4 --recompute-modules core_attn,mlp
sweep_row "--recompute-modules auto under deepspeed" \
  "--recompute-modules: framework deepspeed: the list is Megatron-Core's" \
  --model tiny --cluster dgx-h100 --gpus 2..4 --framework deepspeed --recompute-modules auto
plan_row "--recompute-modules auto with --recompute full" \
  "--recompute-modules: auto needs selective recompute among the searched ones (full)" \
  --model tiny --cluster local-cpu --gpus 2 --recompute full --recompute-modules auto
row "plan: --recompute-modules auto on a parallel block" 2 \
  "--recompute-modules: auto: no module beyond core_attn changes tiny (a parallel block)" \
  plan --model parallel_tiny.json --cluster local-cpu --gpus 2 --recompute-modules auto
row "sweep: an --html that cannot be written leaves --json untouched" 1 \
  "/proc/meshplan_x.html: cannot write file" \
  sweep --model tiny --cluster local-cpu --gpus 2..4 --json sentinel.json --html /proc/meshplan_x.html
# Uneven pipeline stages (tiny has 4 layers): the list and Megatron's first/last counts.
plan_row "--stage-layers not a list of integers" \
  "--stage-layers: expected comma-separated layer counts, e.g. 7,8,8,7 (3,x)" \
  --model tiny --cluster local-cpu --gpus 2 --stage-layers 3,x
plan_row "--stage-layers summing to more than num_layers" \
  "--stage-layers: stage_layers: sum 5 differs from num_layers 4 (3,2)" \
  --model tiny --cluster local-cpu --gpus 2 --stage-layers 3,2
plan_row "--stage-layers with a stage of 0 layers" \
  "--stage-layers: stage_layers: stage 1 has 0 layers, expected 1 to num_layers 4 (4,0)" \
  --model tiny --cluster local-cpu --gpus 2 --stage-layers 4,0
plan_row "--stage-layers longer than --pp" "--stage-layers: 3 entries for --pp 2 (1,2,1)" \
  --model tiny --cluster local-cpu --gpus 2 --pp 2 --stage-layers 1,2,1
plan_row "first and last stage layers beyond the model" \
  "first and last stage layers (2 + 3) exceed num_layers 4" \
  --model tiny --cluster local-cpu --gpus 8 --pp 2 --first-stage-layers 2 --last-stage-layers 3
row "simulate: --bucket-mb 1e30" 2 "--bucket-mb: must be in (0, 1e6] MiB and at least one byte (1e+30)" \
  simulate p.json --bucket-mb 1e30 --json new_out.json
plan_row "--first-stage-layers without --pp" "--first-stage-layers: needs --pp" \
  --model tiny --cluster local-cpu --gpus 2 --first-stage-layers 3
plan_row "--last-stage-layers leaving an uneven middle" \
  "--last-stage-layers: the other 1 layers do not split evenly into 2 stages" \
  --model tiny --cluster local-cpu --gpus 3 --pp 3 --last-stage-layers 3
plan_row "--stage-layers with --first-stage-layers" \
  "--stage-layers: give either the list or --first-stage-layers/--last-stage-layers" \
  --model tiny --cluster local-cpu --gpus 2 --stage-layers 3,1 --first-stage-layers 3
# Megatron-Core's layout string (--pipeline-layout): each row one of its or meshplan's checks.
plan_row "--pipeline-layout without --pp" \
  "--pipeline-layout: needs --pp (the layout lists pp x vpp virtual stages)" \
  --model tiny --cluster local-cpu --gpus 2 --pipeline-layout "Ett|ttL"
plan_row "--pipeline-layout not a multiple of --pp" \
  '--pipeline-layout: 3 virtual stages, not a multiple of the pipeline parallel size 2 ("Et|tt|tL")' \
  --model tiny --cluster local-cpu --gpus 2 --pp 2 --pipeline-layout "Et|tt|tL"
plan_row "--pipeline-layout with an unknown character" \
  "--pipeline-layout: invalid layer character 'x' in virtual stage 1, known: E (embedding), t (decoder layer), m (MTP depth), L (loss)" \
  --model tiny --cluster local-cpu --gpus 2 --pp 2 --pipeline-layout "Ett|txtL"
plan_row "--pipeline-layout with too many layers" \
  "--pipeline-layout: 5 decoder layers 't', the model has num_layers 4" \
  --model tiny --cluster local-cpu --gpus 2 --pp 2 --pipeline-layout "Ettt|ttL"
plan_row "--pipeline-layout without the loss last" \
  "--pipeline-layout: 'L' (the loss) must close the last virtual stage, once" \
  --model tiny --cluster local-cpu --gpus 2 --pp 2 --pipeline-layout "EttL|tt"
plan_row "--pipeline-layout with an empty pipeline stage" \
  "--pipeline-layout: pipeline stage 1 holds no decoder layer; meshplan needs at least one per stage" \
  --model tiny --cluster local-cpu --gpus 2 --pp 2 --pipeline-layout "Etttt|L"
plan_row "--pipeline-layout unrolling to gigabytes" \
  "--pipeline-layout: unrolls to more than 1000000 characters" \
  --model tiny --cluster local-cpu --gpus 2 --pp 2 --pipeline-layout "Et*999999999|tL"
plan_row "--pipeline-layout against --vpp" \
  "--pipeline-layout: 2 virtual stages per rank, --vpp says 1" \
  --model tiny --cluster local-cpu --gpus 2 --pp 2 --vpp 1 --pipeline-layout "Et|t|t|tL"
plan_row "--pipeline-layout with a non-interleaved schedule" \
  "--pipeline-layout: 2 virtual stages per rank need the interleaved schedule (--schedule 1f1b)" \
  --model tiny --cluster local-cpu --gpus 2 --pp 2 --schedule 1f1b --pipeline-layout "Et|t|t|tL"
plan_row "--pipeline-layout of one virtual stage per rank, interleaved" \
  "--pipeline-layout: 1 virtual stage per rank; the interleaved schedule needs at least 2" \
  --model tiny --cluster local-cpu --gpus 2 --pp 2 --schedule interleaved --pipeline-layout "Ett|ttL"
plan_row "--pipeline-layout with --stage-layers" \
  "--pipeline-layout: give either the layout or --stage-layers/--first-stage-layers/--last-stage-layers" \
  --model tiny --cluster local-cpu --gpus 2 --pp 2 --stage-layers 3,1 --pipeline-layout "Ettt|tL"
edit virtual_stage_layers_sum.json \
  's/^    "placement": "tp-dp-pp",$/    "placement": "tp-dp-pp", "virtual_stage_layers": [3, 2],/'
plan_file_rows virtual_stage_layers_sum.json \
  "virtual_stage_layers_sum.json: layout: virtual_stage_layers: 2 entries for pp 1 x vpp 1 (3,2)" \
  "virtual_stage_layers not matching pp x vpp"
edit stage_layers_sum.json \
  's/^    "placement": "tp-dp-pp",$/    "placement": "tp-dp-pp", "stage_layers": [3, 2],/'
plan_file_rows stage_layers_sum.json \
  "stage_layers_sum.json: layout: stage_layers: 2 entries for pp 1 (3,2)" \
  "stage_layers not matching pp"
edit stage_layers_type.json \
  's/^    "placement": "tp-dp-pp",$/    "placement": "tp-dp-pp", "stage_layers": [4, "x"],/'
plan_file_rows stage_layers_type.json \
  "stage_layers_type.json: layout: stage_layers: entry 1 is not an integer (string)" \
  "stage_layers entry not an integer"
# A plan whose GPUs are shrunk below its peak: explain and simulate refuse it.
edit small_gpu.json 's/^      "hbm_bytes": [0-9]*,$/      "hbm_bytes": 108000000,/'
row "explain: a plan that does not fit its GPUs" 2 "small_gpu.json: does not fit: peak memory" \
  explain small_gpu.json
row "simulate: a plan that does not fit its GPUs" 2 "small_gpu.json: does not fit: peak memory" \
  simulate small_gpu.json --json new_out.json --trace sentinel.json
# execute checks its outputs before the first step (it used to train, then fail at the end).
row "execute: --json into /proc, refused before step 1" 2 "/proc/m.json: --json: cannot write" \
  mpi 2 execute p.json --steps 1000000 --json /proc/m.json
row "execute: --checkpoint-dir under /proc, refused before step 1" 2 \
  "/proc/ck: --checkpoint-dir: cannot create the directory" \
  mpi 2 execute p.json --steps 1000000 --checkpoint-dir /proc/ck --checkpoint-every 1 \
  --json new_out.json

# Issue 14: plan --emit, compare, calibrate.
row "plan: --emit unknown target" 2 \
  "--emit: unknown emit target (nemo); supported: megatron, torchtitan, deepspeed, megatron-deepspeed, megatron-bridge, slurm" \
  plan --model tiny --cluster local-cpu --gpus 2 --emit nemo --emit-out new_out.json \
  --save-plan sentinel.json
row "plan: --emit-out without --emit" 2 "--emit-out: needs --emit" \
  plan --model tiny --cluster local-cpu --gpus 2 --emit-out new_out.json --json sentinel.json
row "plan: --emit torchtitan for a model with no torchtitan flavor" 2 \
  "--emit torchtitan: model: torchtitan selects a model by flavor" \
  plan --model tiny --cluster local-cpu --gpus 2 --framework fsdp --emit torchtitan --emit-out new_out.json \
  --save-plan sentinel.json
row "plan: --emit deepspeed with ZeRO-2 and pp 2" 2 \
  "--framework: deepspeed cannot run this layout: its pipeline engine refuses" \
  plan --model tiny --cluster local-cpu --gpus 4 --pp 2 --zero 2 --framework deepspeed --emit deepspeed \
  --emit-out new_out.json --save-plan sentinel.json
row "plan: --emit megatron-bridge for a latent-attention model" 2 \
  "--emit megatron-bridge: model.kv_lora_rank: vanilla_gpt_pretrain_config builds a GPTModelProvider" \
  plan --model tiny-mla --cluster dgx-h100 --gpus 8 --framework megatron --emit megatron-bridge --emit-out new_out.json \
  --save-plan sentinel.json
row "plan: --emit slurm without --save-plan" 2 "--emit slurm: needs --save-plan" \
  plan --model tiny --cluster local-cpu --gpus 2 --emit slurm --json new_out.json
row "plan: --emit-out into /proc" 1 "/proc/meshplan_x.sh: cannot write file" \
  plan --model tiny --cluster local-cpu --gpus 2 --framework megatron --emit megatron \
  --emit-out /proc/meshplan_x.sh
printf 'step 1 took a while\nno numbers here\n' >not_a_log.txt
printf ' iteration 1/ 2 | elapsed time per iteration (ms): 5.0 |\n[Rank 7] (after 1 iterations) memory (MB) | allocated: 1 | max allocated: 2\n' >rank7.log
echo '{"steps": []}' >no_steps.json
row "compare: nonexistent measured file" 2 "no_such_run.log: cannot read file" \
  compare p.json no_such_run.log --json new_out.json
row "compare: a text file that is no known log" 2 \
  "not_a_log.txt: not meshplan execute's --json, a Megatron-LM log" \
  compare p.json not_a_log.txt --json new_out.json
row "compare: malformed execute JSON" 2 "malformed.json: malformed JSON: " \
  compare p.json malformed.json --json new_out.json
row "compare: execute JSON without steps" 2 "no_steps.json: steps: missing or empty" \
  compare p.json no_steps.json --json new_out.json
echo '{"steps": [{"step_time_s": -1}]}' >negative_step.json
echo '{"steps": [{"step_time_s": 0.1}], "peak_memory_bytes": [{"stage": 5, "measured": 1}]}' \
  >other_stage.json
row "compare: execute JSON with a negative step time" 2 \
  "negative_step.json: steps[]: step_time_s: must be between 1e-6 and 3.2e7 seconds (-1)" \
  compare p.json negative_step.json --json new_out.json
row "compare: execute JSON with a stage the plan lacks" 2 \
  "other_stage.json: peak_memory_bytes: stage 5 is not in the plan (pp 1)" \
  compare p.json other_stage.json --json new_out.json
row "compare: Megatron-LM memory line of a rank the plan lacks" 2 \
  "rank7.log: line 2: rank 7 is not in the plan's 2 ranks" \
  compare p.json rank7.log --json new_out.json
printf ' iteration 99999999999999999999999999/ 2 | elapsed time per iteration (ms): 5.0 |\n' >big.log
printf ' iteration 1/ 2 | elapsed time per iteration (ms): 1e999 |\n' >inf.log
row "compare: Megatron-LM iteration beyond 1e15" 2 \
  "big.log: line 1: iteration: out of range (99999999999999999999999999)" \
  compare p.json big.log --json new_out.json
row "compare: Megatron-LM time beyond double" 2 \
  "inf.log: line 1: elapsed time per iteration (ms): not a finite number (1e999)" \
  compare p.json inf.log --json new_out.json
row "compare: malformed plan file" 2 "malformed.json: malformed JSON: " \
  compare malformed.json rank7.log --json new_out.json
echo '{"steps": [{"step_time_s": 0.1}, {"step_time_s": 0.2}]}' >two_steps.json
row "compare: --json into /proc" 1 "/proc/meshplan_x.json: cannot write file" \
  compare p.json two_steps.json --json /proc/meshplan_x.json
row "compare: a Megatron-LM log of another global batch" 2 \
  "megatron_memory_lines.log: line 3: global batch size: 16, the plan's is 4 (a log of another plan's run)" \
  compare p.json "$data/compare/megatron_memory_lines.log" --json new_out.json
printf 'step:  2  loss:  7.0  memory:  1.00GiB(1.0%%)  tps: 100  tflops: 1.0  mfu: 1.0%%\n' >titan.log
row "compare: a torchtitan log beside a plan for meshplan's executor" 2 \
  "titan.log: a torchtitan log compares with a plan costed for fsdp; this plan was costed for meshplan (re-plan with --framework fsdp)" \
  compare p.json titan.log --json new_out.json
row "calibrate: a GPU cluster as the base" 2 "dgx-h100: precision: calibrate measures" \
  mpi 2 calibrate --quick --base dgx-h100 --out new_out.json
row "calibrate: --max-mib 0" 2 "--max-mib: must be between 1/256 (4 KiB: two message sizes) and 1024 (0)" \
  mpi 2 calibrate --quick --max-mib 0 --out new_out.json
row "calibrate: --max-mib 0.001, a single message size" 2 \
  "--max-mib: must be between 1/256 (4 KiB: two message sizes) and 1024 (0.001)" \
  mpi 2 calibrate --quick --max-mib 0.001 --out new_out.json
row "calibrate: --max-mib above --quick's 1 MiB" 2 \
  "--max-mib: above --quick's 1 MiB; drop --quick or give at most 1 (1024)" \
  mpi 2 calibrate --quick --max-mib 1024 --out new_out.json
row "execute: --checkpoint-every larger than --steps" 2 \
  "--checkpoint-every: larger than --steps (4): no checkpoint would be written (9)" \
  mpi 2 execute p.json --steps 4 --checkpoint-dir new_ck --checkpoint-every 9 --json new_out.json
row "calibrate: --out into /proc, refused before measuring" 2 \
  "/proc/meshplan_x.json: --out: cannot write" \
  mpi 2 calibrate --quick --out /proc/meshplan_x.json --json new_out.json

# An output on an input file is refused before anything is written (sentinel.json is the input
# and must stay as it was); a device output is written through, never replaced (checked in
# output_set_test); inputs without end or nesting without bound stop with one line.
cp p.json plan_copy.json
row "plan: --save-plan on the --model file" 2 \
  "--save-plan: the same file as --model (sentinel.json)" \
  plan --model sentinel.json --cluster local-cpu --gpus 2 --save-plan sentinel.json --json new_out.json
row "simulate: --json on the plan file" 2 "--json: the same file as the plan file (sentinel.json)" \
  simulate sentinel.json --json ./sentinel.json --svg new_out.json
row "validate: --json on the runs file" 2 "--json: the same file as the runs file (sentinel.json)" \
  validate sentinel.json --json sentinel.json
row "compare: --json on the measured log" 2 "--json: the same file as MEASURED (sentinel.json)" \
  compare plan_copy.json sentinel.json --json sentinel.json
row "execute: --json on the plan file" 2 "--json: the same file as the plan file (sentinel.json)" \
  mpi 2 execute sentinel.json --steps 1 --json sentinel.json
row "calibrate: --out on --base" 2 "--out: the same file as --base (sentinel.json)" \
  mpi 2 calibrate --quick --base sentinel.json --out sentinel.json
row "simulate: /dev/zero as the plan file" 2 "/dev/zero: larger than 256 MiB, not a meshplan input" \
  simulate /dev/zero --json new_out.json
# A file of one kind given where another is expected is named as what it is.
row "plan: a plan file as --model" 2 \
  "p.json: a meshplan plan file, not a model description: --model takes a preset name, a meshplan model JSON or a Hugging Face config.json" \
  plan --model p.json --cluster local-cpu --gpus 2 --json new_out.json --save-plan sentinel.json
row "simulate: a cluster file as the plan file" 2 \
  "local-cpu.json: a cluster description, not a meshplan plan file: this command takes a plan file written by plan --save-plan" \
  simulate "$source_dir/models/presets/clusters/local-cpu.json" --json new_out.json
row "validate: a plan file as the runs file" 2 \
  "p.json: a meshplan plan file, not a published-runs file: validate takes a runs file (\"format\": \"meshplan published runs\")" \
  validate p.json --json new_out.json
# Session 36's hostile-input audit: inputs clobbered by sweep and execute, sizes that wrapped
# 64 bits, names that broke tables and SVG.
"$meshplan" plan --model tiny --cluster local-cpu --gpus 2 --tp 2 --zero 0 --json /dev/null \
  >/dev/null 2>&1
sed -n '/^  "model": {$/,/^  },$/p' p.json | sed '1s/.*/{/; $s/.*/}/' >tiny_model.json
row "sweep: --json on its --model file" 2 "--json: the same file as --model (tiny_model.json)" \
  sweep --model tiny_model.json --cluster local-cpu --gpus 2..4 --json tiny_model.json \
  --html new_out.json
printf 'training text, read byte by byte\n' >corpus.txt
row "execute: --json on its --data file" 2 "--json: the same file as --data (corpus.txt)" \
  mpi 2 execute p.json --steps 1 --data corpus.txt --json corpus.txt
plan_row "--micro-batch beyond 64-bit products" \
  "--micro-batch: must be between 1 and 131072 (4611686018427387905)" \
  --model tiny --cluster local-cpu --gpus 4 --dp 4 --micro-batch 4611686018427387905 \
  --global-batch 4
plan_row "--vpp near 2^63" "--vpp: must be between 1 and 100000 (9223372036854775807)" \
  --model tiny --cluster local-cpu --gpus 2 --vpp 9223372036854775807
edit name_newline.json '0,/^    "name": "tiny",$/s//    "name": "ti\\nny",/'
row "explain: a newline in the model name" 2 \
  "name_newline.json: model: name: control character (U+000A) in the name" \
  explain name_newline.json
# A replay over the simulator's task cap stops before it builds anything (a million
# micro-batches on every one of 16 ranks would take about 15 GB and a minute). plan caps the
# global batch at 131,072 sequences; a plan file may state up to 10^6.
"$meshplan" plan --model tiny --cluster local-cpu --gpus 16 --tp 2 --pp 4 --dp 2 \
  --schedule 1f1b --global-batch 131072 --micro-batch 1 --save-plan huge_m.json >/dev/null 2>&1
sed -i 's/"global_batch": 131072/"global_batch": 1000000/' huge_m.json
row "simulate --all-ranks: over the task cap" 2 \
  "huge_m.json: all_ranks: the task graph would hold about 80000224 tasks (~19 GiB), over the simulator's limit of 33554432 (~8 GiB) (simulate one rank per stage instead)" \
  simulate huge_m.json --all-ranks --json new_out.json --svg sentinel.json
"$meshplan" plan --model tiny --cluster local-cpu --gpus 16 --tp 2 --pp 4 --dp 2 \
  --schedule 1f1b --global-batch 131072 --micro-batch 1 --save-plan trace_m.json >/dev/null 2>&1
row "simulate --trace: over the trace's task cap" 2 \
  "trace_m.json: --trace: the replay would hold about 10485984 tasks, over the trace's limit of 8388608 (~1.3 GB of JSON; Perfetto's UI holds about 2 GB) (trace one rank per stage: without --all-ranks)" \
  simulate trace_m.json --all-ranks --trace new_out.json --json sentinel.json
levels=$(printf '%*s' 100000 '')
printf '%s%s\n' "${levels// /[}" "${levels// /]}" >nested.json
row "plan: a model file nested 100,000 levels deep" 2 \
  "nested.json: malformed JSON: nested deeper than 64 levels" \
  plan --model nested.json --cluster local-cpu --gpus 2 --json new_out.json --save-plan sentinel.json

echo "# bad-input matrix, part $part: $num_passed passed, $num_failed failed (of $num_rows rows)"
# The README (plan's outputs and Reliability) states how many bad inputs this matrix runs (all
# parts: num_rows counts the rows of the other parts too).
for said in "runs $num_rows bad inputs" "holds this for $num_rows bad inputs"; do
  if ! grep -q "$said" "$source_dir/README.md"; then
    echo "README.md does not say '$said' (the matrix's count)"
    num_failed=$((num_failed + 1))
  fi
done
[ "$num_failed" -eq 0 ]
