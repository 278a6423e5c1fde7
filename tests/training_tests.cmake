# Tests of the compute layer and of the model part of training (architectures, parameter
# counts, per-operator costs, memory formulas). Included OPTIONAL from tests/CMakeLists.txt.
# One executable for the compute, model and training tests (one link and fewer compiled units
# than one each): the model layer's serving batches too (model/layer_operators.h); the training
# job's parallel layout, pipeline schedules, simulated iteration, published runs and EP.
parallax_test(training_test compute_model_test.cpp attention_model_test.cpp training_model_test.cpp training_operators_test.cpp
              training_memory_test.cpp model_ragged_test.cpp training_layout_test.cpp training_pipeline_test.cpp
              training_iteration_test.cpp training_cp_test.cpp training_symmetry_test.cpp training_cosim_test.cpp
              training_published_runs_test.cpp training_ep_test.cpp training_offload_test.cpp
              training_op_checkpointing_test.cpp training_constant_fit_test.cpp training_hybrid_test.cpp
              model_sparse_attention_test.cpp
              LONG IterationSymmetry.EveryReplicaGivesTheFoldedResultOn64Gpus
                   Explain.FullShardingAcrossNodesOffersHybridShardingWithinANode
                   Explain.FullRecomputationWithMemoryToSpareOffersTheFewestLayersThatFit
                   Explain.EverySuggestionIsASimulationAndItsFlagsReproduceIt
                   PublishedRuns.ARowWrittenAsAWorkloadSimulatesAsTheRow
                   CoSimulatedIteration.InPacketsTakesTheFlowModelsTimeWhereNothingCongests)
target_link_libraries(training_test PRIVATE parallax_training)



# ---- parallax train / validate through the CLI ----------------------------------------------------
file(GLOB train_workloads CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/workloads/train/*.json)
foreach(workload ${train_workloads})
  get_filename_component(workload_name ${workload} NAME_WE)
  add_test(NAME example.train.${workload_name} COMMAND parallax train ${workload})
  set_tests_properties(example.train.${workload_name} PROPERTIES PASS_REGULAR_EXPRESSION "MFU / HFU")
endforeach()
# A cluster of two kinds of GPU (topology node_groups) is for serving fleets: training refuses it.
add_test(NAME example.train.refuses_node_groups
         COMMAND bash ${PROJECT_SOURCE_DIR}/calibrate/harness/check-exit.sh 2
                 "node-groups-train.json: /topology: .*dgx-h100-a100-mixed.json is a cluster of node groups"
                 $<TARGET_FILE:parallax> train ${PROJECT_SOURCE_DIR}/tests/data/workloads/node-groups-train.json)
# Megatron-Core's micro-batch groups: 30 micro-batches on 4 stages interleave in groups of 6 (not
# a multiple of pp, which the depth-first default needs); a group leaving 2 is refused.
add_test(NAME example.train.microbatch_group
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xgb200-nvfp4.json --gbs 240
                 --microbatch-group 6 --network analytical)
set_tests_properties(example.train.microbatch_group PROPERTIES PASS_REGULAR_EXPRESSION "vpp 5 \\(micro-batch groups of 6\\)")
add_test(NAME example.train.microbatch_group_short_last
         COMMAND bash ${PROJECT_SOURCE_DIR}/calibrate/harness/check-exit.sh 2
                 "/parallel/microbatch_group: the micro-batch group \\(7\\) leaves a last group of 2 micro-batches"
                 $<TARGET_FILE:parallax> train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xgb200-nvfp4.json --gbs 240
                 --microbatch-group 7)
# --explain ranks re-simulated knobs; the overlap switches are flags too.
add_test(NAME example.train.explain
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --explain)
set_tests_properties(example.train.explain PROPERTIES PASS_REGULAR_EXPRESSION "what to try.*\n +-[0-9.]+ s +[0-9.]+ s +tp_comm_overlap on +--tp-comm-overlap on")
# torchtitan's op-level checkpointing with memory to spare on H200: dropping it is offered, re-simulated.
add_test(NAME example.train.explain_selective_op
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-8b-32xh200-torchtitan-fp8.json --explain)
set_tests_properties(example.train.explain_selective_op PROPERTIES PASS_REGULAR_EXPRESSION
                     "what to try.*\n +-[0-9.]+ s +[0-9.]+ s +no recomputation instead of op-level checkpointing +--recompute none")
add_test(NAME example.train.flow
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --network flow --tp-comm-overlap on)
set_tests_properties(example.train.flow PROPERTIES PASS_REGULAR_EXPRESSION "busiest link of each class")
# The flex (DeepEP / HybridEP) dispatcher from the command line, named in the layout line.
add_test(NAME example.train.moe_flex
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json --moe-dispatcher flex)
set_tests_properties(example.train.moe_flex PROPERTIES PASS_REGULAR_EXPRESSION "ep 8 \\(flex\\)")
# The rotary embedding unfused from the command line (the bundled GPT-OSS example runs it so), named
# in the layout line.
add_test(NAME example.train.rope_unfused
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --rope-fusion off)
set_tests_properties(example.train.rope_unfused PROPERTIES PASS_REGULAR_EXPRESSION "SP, selective recompute, unfused RoPE")
# How the experts' GEMMs are issued, from the command line: named in the layout line when grouped,
# and an unknown one refused with exit 2, naming the flag.
add_test(NAME example.train.expert_gemm_grouped
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json --expert-gemm grouped)
set_tests_properties(example.train.expert_gemm_grouped PROPERTIES PASS_REGULAR_EXPRESSION "ep 8 \\(grouped expert GEMMs\\)")
parallax_refuses(train.bad_expert_gemm_is_refused
                 "--expert-gemm: unknown expert GEMM issue \"batched\" \\(expected per_expert, grouped or sequential\\)"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json --expert-gemm batched)
# Megatron-Core's default SequentialMLP: each expert's activation a kernel of its own, the outputs
# concatenated.
add_test(NAME example.train.expert_gemm_sequential
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json --expert-gemm sequential --ep 2 --ops)
set_tests_properties(example.train.expert_gemm_sequential PROPERTIES PASS_REGULAR_EXPRESSION "expert_output_cat")
# The router's fused kernels and its load-balancing loss from the command line, named in the
# layout line; an unknown loss refused with exit 2, naming the flag.
add_test(NAME example.train.moe_router
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json --network analytical
                 --moe-router-fusion on --moe-router-load-balancing seq_aux_loss)
set_tests_properties(example.train.moe_router PROPERTIES
                     PASS_REGULAR_EXPRESSION "fused router, load balancing seq_aux_loss")
parallax_refuses(train.bad_load_balancing_is_refused
                 "--moe-router-load-balancing: unknown load-balancing loss \"z_loss\" \\(expected none, aux_loss, seq_aux_loss or global_aux_loss\\)"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json --moe-router-load-balancing z_loss)
# Hybrid sharding from the command line, named in the layout line; groups that do not divide the
# data-parallel ranks are refused naming the field.
add_test(NAME example.train.hsdp
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --network analytical
                 --zero 3 --dp-shard 4)
set_tests_properties(example.train.hsdp PROPERTIES PASS_REGULAR_EXPRESSION "ZeRO-3 \\(HSDP: shards of 4, 4 replicas\\)")
parallax_refuses(train.hsdp_bad_shard_is_refused "/parallel/dp_shard: 3 does not divide dp·cp=16"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --zero 3 --dp-shard 3)
# Router skew and token dropping from the command line: named in the layout line, and the report
# says how many token-slots were dropped; a capacity factor with the flex dispatcher is refused.
add_test(NAME example.train.moe_token_drop
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json --network analytical
                 --moe-expert-skew 1.2 --moe-capacity-factor 1.25 --moe-pad-to-capacity on)
set_tests_properties(example.train.moe_token_drop PROPERTIES PASS_REGULAR_EXPRESSION
                     "router skew \\(Zipf 1.2\\), capacity factor 1.25 \\(padded\\).*MoE routing +every expert padded to 1.25x its even share of tokens; [0-9.]+% of token-slots dropped")
parallax_refuses(train.token_drop_with_flex_is_refused
                 "/parallel/moe_capacity_factor: Megatron drops tokens only with the alltoall dispatcher, not flex"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json --moe-capacity-factor 1 --moe-dispatcher flex)
# Muon from the command line, named in the layout line; an unknown optimizer refused with exit 2.
add_test(NAME example.train.muon
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json --network analytical
                 --optimizer muon)
set_tests_properties(example.train.muon PROPERTIES PASS_REGULAR_EXPRESSION "Muon \\(Adam on the embedding and head\\)")
parallax_refuses(train.bad_optimizer_is_refused
                 "--optimizer: unknown optimizer \"lion\" \\(expected adam or muon\\)"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json --optimizer lion)
# Kernels replayed from CUDA graphs: named in the layout line (a Megatron scope in its order);
# an unknown scope refused with exit 2.
add_test(NAME example.train.cuda_graphs
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json --cuda-graphs moe_router,attn)
set_tests_properties(example.train.cuda_graphs PROPERTIES PASS_REGULAR_EXPRESSION "CUDA graphs \\(attn/moe_router\\)")
parallax_refuses(train.bad_cuda_graphs_is_refused
                 "--cuda-graphs: unknown CUDA graph scope \"attn/experts\" \\(expected none, layers, full_iteration, or parts of attn/mlp/moe_router/moe_preprocess/mamba\\)"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --cuda-graphs attn/experts)
parallax_refuses(train.bad_recompute_module_is_refused
                 "--recompute-modules: unknown module \"foo\" \\(expected mla_up_proj, moe_act, mlp, moe, layernorm or core_attn\\)"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/nemotron-3-nano-8xgb300-mxfp8.json --recompute-modules moe,foo)
parallax_refuses(train.bad_module_precision_is_refused
                 "--module-precision: expected module=type, found \"attention\""
                 train ${PROJECT_SOURCE_DIR}/workloads/train/nemotron-3-nano-8xgb300-mxfp8.json --module-precision attention)
add_test(NAME train.module_recipes_from_flags
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/nemotron-3-nano-8xgb300-mxfp8.json --network analytical
                 --recompute-modules moe,layernorm --module-precision attention=bf16)
set_tests_properties(train.module_recipes_from_flags PROPERTIES
                     PASS_REGULAR_EXPRESSION "attention bf16.*recompute moe\\+layernorm")
# What-if flags override the file; a layout that cannot run is refused before anything runs.
add_test(NAME example.train.what_if_flags
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --pp 8 --nodes 32
                 --schedule interleaved_1f1b --vpp 2 --zero 3)
set_tests_properties(example.train.what_if_flags PROPERTIES PASS_REGULAR_EXPRESSION "tp 8 · pp 8 · dp 4 · vpp 2")
# Activation offloading: the recipe's 40 layers fit a GB200's memory, none do not; every layer
# is refused as Megatron-Core refuses it, naming the flag.
add_test(NAME example.train.offload_none
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xgb200-fsdp-offload.json
                 --cpu-offloading-layers 0 --network analytical)
set_tests_properties(example.train.offload_none PROPERTIES PASS_REGULAR_EXPRESSION "OUT OF MEMORY")
parallax_refuses(train.offloading_every_layer_is_refused "cpu_offloading_layers: must be at least 0 and less than the 80 layers"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xgb200-fsdp-offload.json --cpu-offloading-layers 80)
parallax_refuses(train.recompute_layers_without_full_recomputation_is_refused
                 "/parallel/recompute_layers: needs full recomputation"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --recompute selective --recompute-layers 4)
# torchtitan's op-level checkpointing with TP needs sequence parallelism, as its TP plan runs it;
# without it, refused naming the field.
parallax_refuses(train.selective_op_with_tp_is_refused "/parallel/recompute: selective_op with tp > 1 needs sequence parallelism"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --recompute selective_op
                 --sequence-parallel off)
parallax_refuses(train.bad_tp_is_refused "/parallel/tp: 6 does not divide"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --tp 6)
# Every published run of the dev set is predicted or reported with its reason.
set(train_scratch ${CMAKE_CURRENT_BINARY_DIR}/train-scratch)
file(MAKE_DIRECTORY ${train_scratch})
add_test(NAME example.validate.dev_runs
         COMMAND bash -c "\"$0\" validate \"$1\" --json \"$2\" && python3 -c 'import json,sys; rows=json.load(open(sys.argv[1])); assert len(rows)==108; assert all((\"error\" in r) != (\"error_message\" in r) for r in rows); assert all(\"predicted_tokens_per_sec_per_gpu\" in r for r in rows if \"error\" in r); assert all(0 < r[\"iteration_time_s\"] and 0 <= r[\"pipeline_bubble_fraction\"] < 1 and 0 <= r[\"exposed_communication_s\"] < r[\"iteration_time_s\"] for r in rows if \"error\" in r); assert all(0 < r[\"peak_memory_bytes\"] and r[\"gpu_memory_bytes\"] in (40 * 2**30, 80 * 2**30) for r in rows if \"error\" in r)' \"$2\""
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/dev-runs.json ${train_scratch}/dev-runs.json)
# The per-source summary names each publication by the start of its source text and counts its
# rows (22 from Narayanan et al. 2021's two tables).
add_test(NAME example.validate.per_source
         COMMAND bash -c "\"$0\" validate \"$1\" 2>/dev/null | grep -E '^  Narayanan et al\\. 2021 +22 rows: median [+-][0-9.]+%, mean \\|error\\| [0-9.]+%$'"
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/dev-runs.json)
# Per GPU type and precision, FP8 by its scaling recipe: Megatron-Bridge's 9 H100 rows in FP8 with
# current scaling.
add_test(NAME example.validate.per_gpu_and_precision
         COMMAND bash -c "\"$0\" validate \"$1\" 2>/dev/null | grep -E '^  H100-80GB fp8 \\(current\\) +9 rows: median [0-9.]+%, bias [+-][0-9.]+%, mean [0-9.]+%$'"
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/mbridge-dev.json)
set_tests_properties(example.validate.per_gpu_and_precision PROPERTIES LABELS long)

# Several runs files at once: the summaries over all their rows, then one line per file; --json
# holds every row; a row that cannot be simulated names its file, and a file that is not a runs
# file fails the whole command (exit 2), naming it.
add_test(NAME example.validate.several_files
         COMMAND bash -c "\"$0\" validate \"$1\" \"$2\" --json \"$4\" 2>/dev/null > \"$4.txt\" && grep -q 'over 9 simulated rows' \"$4.txt\" && grep -Eq '^  .*mpt-h100-fp8-holdout\\.json +7 rows: MAPE [0-9.]+%, median [0-9.]+%, bias [+-][0-9.]+%$' \"$4.txt\" && grep -Eq '^  .*torchtitan-h200-fp8-holdout\\.json +2 rows: MAPE' \"$4.txt\" && grep -q '^# Parallax validate: 2 runs files (9 runs' \"$4.txt\" && python3 -c 'import json,sys; assert len(json.load(open(sys.argv[1])))==9' \"$4\" && \"$0\" validate \"$1\" \"$3\" 2>/dev/null | grep -q 'not simulated: .*bad-published-runs.json: /1/layout/tp: expected an integer' && \"$0\" validate \"$1\" \"$5\" > /dev/null 2> \"$4.err\"; test $? = 2 && grep -q 'llama3-70b-64xdgx-h100.json: expected an array of runs' \"$4.err\""
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/mpt-h100-fp8-holdout.json
                 ${PROJECT_SOURCE_DIR}/workloads/validation/torchtitan-h200-fp8-holdout.json
                 ${PROJECT_SOURCE_DIR}/tests/data/training/bad-published-runs.json ${train_scratch}/several-files.json
                 ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json)

# σ fitted to a file's rows, each source held out, then every row reported at the fitted σ;
# the fit and a given σ exclude each other.
add_test(NAME example.validate.fit_sustained_fraction
         COMMAND bash -c "\"$0\" validate \"$1\" --fit-sustained-fraction --jobs 2 --plot \"$2.plots\" 2>/dev/null > \"$2\" && s=$(sed -nE 's/^fitted sigma (0\\.[0-9]+): MAPE [0-9.]+%, median \\|error\\| [0-9.]+%, median signed error [+-][0-9.]+%$/\\1/p' \"$2\") && test -n \"$s\" && grep -Eq '^  mosaicml/llm-foundry [^ ]+ +7 rows: alone 0\\.[0-9]+ \\(MAPE [0-9.]+%\\); no other source' \"$2\" && grep -q \"kernels at $s of their stand-alone speed\" \"$2\" && test -s \"$2.plots/validate.png\" && test -s \"$2.plots/sigma.png\" && ! \"$0\" validate \"$1\" --fit-sustained-fraction --sustained-fraction 0.8 > /dev/null 2>&1"
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/mpt-h100-fp8-holdout.json
                 ${CMAKE_CURRENT_BINARY_DIR}/fit_sustained_fraction.txt)
# 4 s under the sanitizers: run once, in the release pass (the fit's code runs there in
# ConstantFit's and HostDispatchSweep's tests).
set_tests_properties(example.validate.fit_sustained_fraction PROPERTIES LABELS long)
# The fused attention form fitted to cuDNN's kernel rates, chosen for a validation; an emitted
# row carries it into its workload, which train reads back; an unknown model name exits 2.
add_test(NAME example.validate.attention_model_cudnn
         COMMAND bash -c "set -e; out=$(\"$0\" validate \"$1\" --attention-model cudnn 2>/dev/null); echo \"$out\" | grep -q 'fused attention by the form fitted to cuDNN'; echo \"$out\" | grep -q 'over 4 simulated rows'; \"$0\" validate \"$1\" --attention-model cudnn --emit-workload mbridge_26.06.01_qwen3_30b_a3b_dgx-gb200_mxfp8_8 \"$2\" > /dev/null; grep -q '\"attention_model\": \"cudnn\"' \"$2\"; \"$0\" train \"$2\" --network analytical | grep -q 'fused attention by the form fitted to cuDNN'; set +e; \"$0\" validate \"$1\" --attention-model fast > /dev/null 2>&1; test $? = 2"
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/mbridge-qwen3-moe-holdout.json
                 ${train_scratch}/attention-model-cudnn.json)
# 2-3 s under the sanitizers: run once, in the release pass (FusedAttention's tests run the form there).
set_tests_properties(example.validate.attention_model_cudnn PROPERTIES LABELS long)
# The long-context example under the cudnn form: its report names it, and the fitted kernels
# (faster than the shape form's at 64k tokens) give a shorter iteration than the default's.
add_test(NAME example.train.attention_model_cudnn
         COMMAND bash -c "set -e; \"$0\" train \"$1\" --network analytical --json \"$3.shape.json\" > /dev/null; \"$0\" train \"$2\" --network analytical --json \"$3.cudnn.json\" | grep -q 'fused attention by the form fitted to cuDNN'; grep -q '\"attention_model\": \"cudnn\"' \"$3.cudnn.json\"; a=$(grep -o '\"iteration_time_s\": [0-9.e+-]*' \"$3.shape.json\" | cut -d' ' -f2); b=$(grep -o '\"iteration_time_s\": [0-9.e+-]*' \"$3.cudnn.json\" | cut -d' ' -f2); test -n \"$a\" && test -n \"$b\" && awk -v a=\"$a\" -v b=\"$b\" 'BEGIN { exit !(b < a) }'"
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-seq64k-cp8-32xdgx-h100.json
                 ${PROJECT_SOURCE_DIR}/tests/data/workloads/llama3-70b-seq64k-cp8-cudnn-attention.json
                 ${train_scratch}/attention-model)
# A file with no published throughput (one row published as out of memory) cannot fit σ: exit 2
# before any simulation, naming the file.
add_test(NAME example.validate.fit_without_throughput
         COMMAND bash -c "\"$0\" validate \"$1\" --fit-sustained-fraction 2>&1 >/dev/null | grep -q 'out-of-memory-only-runs.json: --fit-sustained-fraction needs a row with a published throughput' && test \"\${PIPESTATUS[0]}\" = 2"
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/tests/data/training/out-of-memory-only-runs.json)

# --plot: each stage's time and memory as stacked bars; every stage's time columns add up to the
# same iteration time. And the passes as they ran: every stage has boxes, none past the iteration.
add_test(NAME example.train.plot
         COMMAND bash -c "set -e; \"$0\" train \"$1\" --network analytical --plot \"$2\" > /dev/null; test -s \"$2/train.png\"; awk '!/^#/ { t = 0; for (i = 2; i <= 10; i++) t += $i; if (n++ == 0 || t < lo) lo = t; if (t > hi) hi = t } END { exit !(n > 0 && hi - lo < 1e-4) }' \"$2/train.dat\"; test $(grep -vc '^#' \"$2/train.dat\") = 4; test -s \"$2/pipeline.png\"; test $(awk '!/^#/ { print $2 }' \"$2/pipeline.dat\" | sort -u | wc -l) = 4; awk 'NR == FNR { if (!/^#/) { t = 0; for (i = 2; i <= 10; i++) t += $i; it = t } next } !/^#/ && $1 + $3 > it + 1e-4 { bad = 1 } END { exit bad }' \"$2/train.dat\" \"$2/pipeline.dat\""
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json ${train_scratch}/plot)
set_tests_properties(example.train.plot PROPERTIES LABELS long)

# The trace opens in Perfetto: one process per pipeline stage, compute and communication threads
# (a pass's kernels named by it, F0, B0, ...);
# co-simulated, a process of the busiest links, with an arrow from each task to the links it crossed.
add_test(NAME example.train.trace
         COMMAND bash -c "\"$0\" train \"$1\" --trace \"$2\" > /dev/null && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); ev=d[\"traceEvents\"]; x=[e for e in ev if e[\"ph\"]==\"X\" and e[\"cat\"]!=\"link\"]; assert {e[\"pid\"] for e in x}=={0,1,2,3}; s=[e for e in ev if e[\"ph\"]==\"s\"]; f=[e for e in ev if e[\"ph\"]==\"f\"]; assert s and sorted(e[\"id\"] for e in s)==sorted(e[\"id\"] for e in f); assert {e[\"pid\"] for e in f}=={4}; assert {\"F0\",\"B0\",\"tp\",\"pp\",\"dp\"} <= {e[\"name\"] for e in x}; assert all(e[\"args\"][\"pass\"]==e[\"name\"] for e in x if e[\"name\"][0] in \"FBW\"); assert all(e[\"dur\"]>0 for e in x); c=[e for e in ev if e[\"ph\"]==\"C\"]; assert {e[\"name\"].split()[0] for e in c}=={\"nvlink\",\"pcie\",\"network\"}, sorted({e[\"name\"] for e in c})' \"$2\""
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json ${train_scratch}/trace.json)

# ---- context parallelism through the CLI ---------------------------------------------------------
# --cp-comm switches the bundled ring-attention workload to Ulysses where the heads allow it...
add_test(NAME example.train.cp_ulysses
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-seq64k-cp8-32xdgx-h100.json
                 --cp-comm ulysses --tp 4 --cp 2 --gbs 64)
set_tests_properties(example.train.cp_ulysses PROPERTIES PASS_REGULAR_EXPRESSION "cp 2 \\(ulysses\\)")
# ...and refuses it, naming the field, where cp does not divide a TP rank's heads.
parallax_refuses(train.ulysses_needs_divisible_heads "/parallel/cp: Ulysses needs cp=16"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-seq64k-cp8-32xdgx-h100.json --cp-comm ulysses --cp 16 --pp 2)
# The zero-bubble schedule through the CLI.
add_test(NAME example.train.zero_bubble
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --schedule zb_h1)
set_tests_properties(example.train.zero_bubble PROPERTIES PASS_REGULAR_EXPRESSION "zb_h1, ZeRO-1")

# ---- the compute model of a workload ---------------------------------------------------------------
# A workload's compute block names a harness file of measured GEMMs (relative to the workload);
# the report says which model timed the GEMMs and at what sustained fraction.
add_test(NAME example.train.measured_gemm_table
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/tests/data/training/measured-gemms.json)
set_tests_properties(example.train.measured_gemm_table PROPERTIES PASS_REGULAR_EXPRESSION
                     "GEMMs by the measured GEMM table \\(6 shapes, bf16, fp8\\).*kernels at 1.00 of their stand-alone speed")
# --sustained-fraction overrides the default 0.80 and is checked like the file's key.
add_test(NAME example.train.sustained_fraction_flag
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --sustained-fraction 0.9)
set_tests_properties(example.train.sustained_fraction_flag PROPERTIES PASS_REGULAR_EXPRESSION "kernels at 0.90 of their")
parallax_refuses(train.bad_host_dispatch_is_refused "bad-host-dispatch.json: /compute/host_dispatch: \"-74 us\" is negative"
                 train ${PROJECT_SOURCE_DIR}/tests/data/training/bad-host-dispatch.json)
# Output that spans lines is matched with [^@]* (the outputs hold no '@'), not (.*\n)*: CTest
# matches in its own process, where nested repeats backtrack for seconds on a long output and
# hold up every test running beside it.
# The host's dispatch time fitted to 12 of vTrain's single-node runs (every 120th row of the
# bundled file, tests/data/training/vtrain-single-node-sample.json): the fit, each source and GPU
# held out, then every row at the fitted value.
add_test(NAME validate.fit_host_dispatch
         COMMAND parallax validate ${PROJECT_SOURCE_DIR}/tests/data/training/vtrain-single-node-sample.json --fit-host-dispatch --jobs 2)
set_tests_properties(validate.fit_host_dispatch PROPERTIES LABELS long PASS_REGULAR_EXPRESSION
                     "fitted t_dispatch [0-9]+ us: MAPE [^@]*# Parallax validate: [^\n]* [0-9]+ us to issue one")
# validate's dispatch time: a time, not negative, refused before any row is simulated.
parallax_refuses(validate.bad_host_dispatch_is_refused "--host-dispatch: \"fast\" is not a time"
                 validate ${PROJECT_SOURCE_DIR}/workloads/validation/mpt-h100-fp8-holdout.json --host-dispatch fast)
parallax_refuses(validate.negative_host_dispatch_is_refused "--host-dispatch: \"-1 us\" is negative"
                 validate ${PROJECT_SOURCE_DIR}/workloads/validation/mpt-h100-fp8-holdout.json --host-dispatch "-1 us")
# The host's time to issue a per-expert GEMM fitted to the Qwen3 MoE dev rows (10, every one issued
# per expert): the fit, then every row at the fitted value, named in the report's header.
add_test(NAME validate.fit_host_gemm_issue
         COMMAND parallax validate ${PROJECT_SOURCE_DIR}/workloads/validation/mbridge-qwen3-moe-dev.json --fit-host-gemm-issue --jobs 2)
set_tests_properties(validate.fit_host_gemm_issue PROPERTIES LABELS long PASS_REGULAR_EXPRESSION
                     "fitted t_host [0-9]+ us: MAPE [^@]*# Parallax validate: [^\n]* [0-9]+ us a per-expert GEMM")
parallax_refuses(validate.bad_host_gemm_issue_is_refused "--host-gemm-issue: \"fast\" is not a time"
                 validate ${PROJECT_SOURCE_DIR}/workloads/validation/mpt-h100-fp8-holdout.json --host-gemm-issue fast)
parallax_refuses(validate.negative_host_gemm_issue_is_refused "--host-gemm-issue: \"-3 us\" is negative"
                 validate ${PROJECT_SOURCE_DIR}/workloads/validation/mpt-h100-fp8-holdout.json --host-gemm-issue "-3 us")
parallax_refuses(train.bad_host_gemm_issue_is_refused "bad-host-gemm-issue.json: /compute/host_gemm_issue: \"-5 us\" is negative"
                 train ${PROJECT_SOURCE_DIR}/tests/data/training/bad-host-gemm-issue.json)
parallax_refuses(train.bad_sustained_fraction_is_refused
                 "bad-sustained-fraction.json: /compute/sustained_fraction: must be in \\(0, 1\\], found 1.2"
                 train ${PROJECT_SOURCE_DIR}/tests/data/training/bad-sustained-fraction.json)
# The hold-out set (H100 rows that played no part in choosing the defaults) is predicted whole.
add_test(NAME example.validate.h100_holdout
         COMMAND bash -c "\"$0\" validate \"$1\" --json \"$2\" > /dev/null && python3 -c 'import json,sys; rows=json.load(open(sys.argv[1])); assert len(rows)==70 and all(\"error\" in r for r in rows)' \"$2\""
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/mpt-h100-holdout.json ${train_scratch}/h100-holdout.json)
set_tests_properties(example.validate.h100_holdout PROPERTIES LABELS long)  # 70 rows, up to 512-GPU FSDP
# Megatron-Bridge's Hopper and Blackwell tables (FP8 current scaling, MXFP8, NVFP4; GB200/GB300
# racks in part): every row simulated, none refused.
foreach(set dev holdout)
  add_test(NAME example.validate.mbridge_${set}
           COMMAND bash -c "\"$0\" validate \"$1\" --json \"$2\" > /dev/null && python3 -c 'import json,sys; rows=json.load(open(sys.argv[1])); assert len(rows)==int(sys.argv[2]) and all(\"error\" in r for r in rows)' \"$2\" \"$3\""
                   $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/mbridge-${set}.json
                   ${train_scratch}/mbridge-${set}.json $<IF:$<STREQUAL:${set},dev>,69,7>)
  # 69 rows of 64-1,024 GPUs: a minute under the sanitizers, so the release pass runs them.
  set_tests_properties(example.validate.mbridge_${set} PROPERTIES LABELS long)
endforeach()
# DeepSeek-V3 on 256 Blackwell GPUs (Megatron-Bridge 25.11-26.08): the bundled model's MLA, dense
# first layers, shared expert and MTP, Megatron's pipeline layouts as stage_layers: every row simulated.
foreach(set dev holdout)
  add_test(NAME example.validate.deepseek_v3_${set}
           COMMAND bash -c "\"$0\" validate \"$1\" --json \"$2\" > /dev/null && python3 -c 'import json,sys; rows=json.load(open(sys.argv[1])); assert len(rows)==int(sys.argv[2]) and all(\"error\" in r for r in rows)' \"$2\" \"$3\""
                   $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/mbridge-deepseek-v3-${set}.json
                   ${train_scratch}/deepseek-v3-${set}.json $<IF:$<STREQUAL:${set},dev>,25,4>)
  set_tests_properties(example.validate.deepseek_v3_${set} PROPERTIES LABELS long)
endforeach()
# BigScience's BLOOM layout benchmarks (75 measured layouts of 176-184B GPT models on 384 A100s of
# Jean Zay, and 5 published as out of memory): every row simulated on the cluster's own preset,
# the rank agreement printed per model, the out-of-memory rows counted apart (no error, no rank).
add_test(NAME example.validate.bloom_layouts
         COMMAND bash -c "\"$0\" validate \"$1\" --json \"$2\" > \"$2.txt\" && grep -q 'mean over 12 groups' \"$2.txt\" && grep -Eq '^published out of memory: 5 rows, [0-5] of them predicted out of memory$' \"$2.txt\" && python3 -c 'import json,sys; rows=json.load(open(sys.argv[1])); assert len(rows)==80; oom=[r for r in rows if r.get(\"expected_out_of_memory\")]; assert len(oom)==5 and all(\"error\" not in r and r[\"peak_memory_bytes\"] > 0 for r in oom); assert all(\"error\" in r for r in rows if r not in oom)' \"$2\""
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/bloom-a100-layouts.json
                 ${train_scratch}/bloom-layouts.json)
# 80 pipelines of 2-48 stages and 64-512 micro-batches: 44 s under the sanitizers, 1 s in release.
set_tests_properties(example.validate.bloom_layouts PROPERTIES LABELS long)
# Layout-ranking sets read whole and predicted, each with its rank agreement per model: vTrain's
# measured Megatron-DeepSpeed layouts (109 rows, 4 models) and MegaScale's 175B/530B runs of
# Megatron-LM and MegaScale on 256-12,288 A100s (22 rows, 2 models); MegaScale-MoE's 352B MoE on
# 240-1,440 H800s (10 rows, Megatron-LM and MegaScale-MoE).
foreach(pair "vtrain-a100-layouts:109:4" "megascale-a100-holdout:22:2" "megascale-moe-h800-holdout:10:1")
  string(REPLACE ":" ";" parts ${pair})
  list(GET parts 0 file)
  list(GET parts 1 rows)
  list(GET parts 2 groups)
  add_test(NAME example.validate.${file}
           COMMAND bash -c "\"$0\" validate \"$1\" --json \"$2\" > \"$2.txt\" && grep -q \"mean over $4 groups\" \"$2.txt\" && python3 -c 'import json,sys; rows=json.load(open(sys.argv[1])); assert len(rows)==int(sys.argv[2]) and all(\"error\" in r for r in rows)' \"$2\" \"$3\""
                   $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/${file}.json ${train_scratch}/${file}.json
                   ${rows} ${groups})
  set_tests_properties(example.validate.${file} PROPERTIES LABELS long)
endforeach()
# Issue 19's check on vTrain's layouts: in every model the layout predicted fastest publishes
# within 5% of the fastest published.
add_test(NAME example.validate.vtrain_first_choice
         COMMAND bash -c "\"$0\" validate \"$1\" > \"$2\" && python3 -c 'import re,sys; worst=[float(x) for x in re.findall(r\"first choice at worst ([-+0-9.]+)% from the best\", open(sys.argv[1]).read())]; assert len(worst)==1 and worst[0] >= -5.0, worst' \"$2\""
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/vtrain-a100-layouts.json
                 ${train_scratch}/vtrain-first-choice.txt)
set_tests_properties(example.validate.vtrain_first_choice PROPERTIES LABELS long)
# Hold-outs read whole and every row simulated: llm-foundry's H100 FP8 table (7 rows) and A100 80GB
# table (61 rows),
# Megatron-Core r0.8.0's weak-scaling table of GPT 1.7B-462B on 48-6,144 H100s (9 rows), NeMo 24.07's
# DGX-H100 FP8 table (12 rows), NeMo 25.02-25.07's DGX-B200 and GB200 FP8 tables (20 rows), NeMo's
# long-context table of Llama 2 7B on DGX-H100 with CP, 4K-1M tokens (9 rows), torchtitan's Llama 3.1 8B
# on 32 and 64 H200s with op-level selective checkpointing (2 rows), Megatron-Bridge's GPT-OSS 120B
# on 64 GB300, GB200 and B300 (5 rows, the bundled gpt-oss-120b), its Kimi K2 on 256 GB300 (4 rows,
# the bundled kimi-k2), its 25.11 tables of Qwen3 MoE and GPT-OSS (12 rows).
foreach(pair "mpt-h100-fp8-holdout:7" "mpt-a100-80gb-holdout:61" "megatron-core-h100-holdout:9" "nemo-h100-fp8-holdout:12"
             "nemo-blackwell-fp8-holdout:20" "nemo-h100-long-context-holdout:9" "torchtitan-h200-fp8-holdout:2"
             "mbridge-gpt-oss-holdout:5" "mbridge-kimi-k2-holdout:4" "mbridge-2511-moe-holdout:12")
  string(REPLACE ":" ";" parts ${pair})
  list(GET parts 0 file)
  list(GET parts 1 rows)
  add_test(NAME example.validate.${file}
           COMMAND bash -c "\"$0\" validate \"$1\" --json \"$2\" > /dev/null && python3 -c 'import json,sys; rows=json.load(open(sys.argv[1])); assert len(rows)==int(sys.argv[2]) and all(\"error\" in r for r in rows)' \"$2\" \"$3\""
                   $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/${file}.json ${train_scratch}/${file}.json
                   ${rows})
  # Data checks: the release pass runs them; the sanitizer pass has the same code paths elsewhere.
  set_tests_properties(example.validate.${file} PROPERTIES LABELS long)
endforeach()
# One published row as a workload that parallax train runs (to look into it with --ops); a row
# the file does not have is refused, naming the flag. Checked with grep: a ctest regex with
# (.|\n)* over --ops' output backtracks for three minutes.
add_test(NAME example.validate.emit_workload
         COMMAND bash -c "\"$0\" validate \"$1\" --emit-workload vtrain-multi-L41 \"$2/row.json\" | grep -q '^# row vtrain-multi-L41 written to ' && \"$0\" train \"$2/row.json\" --network analytical --ops > \"$2/row.txt\" && grep -q '^# Parallax train: GPT 18.4B' \"$2/row.txt\" && grep -q '^compute per operator' \"$2/row.txt\""
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/validation/vtrain-a100-layouts.json ${train_scratch})
parallax_refuses(validate.emit_unknown_row "vtrain-a100-layouts.json: --emit-workload: no row has the id \"nope\""
                 validate ${PROJECT_SOURCE_DIR}/workloads/validation/vtrain-a100-layouts.json --emit-workload nope ${train_scratch}/nope.json)
# --measured-step fits σ to a step timed on the user's cluster and reports at it: the reported
# iteration is the measured one (to the bisection's 1e-4 on σ: well under 10 ms of 21 s).
add_test(NAME example.train.measured_step
         COMMAND parallax train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --measured-step "21 s")
set_tests_properties(example.train.measured_step PROPERTIES PASS_REGULAR_EXPRESSION
                     "fitted to the measured step of 21.000 s: 0\\.[0-9]+.*iteration time +21\\.00[0-9] s")
parallax_refuses(train.measured_step_faster_than_the_kernels_is_refused
                 "--measured-step: the measured step \\(5.000 s\\) is shorter than the simulated one"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --measured-step "5 s")

# ---- layout search (planning/) -----------------------------------------------------------------
parallax_test(planning_search_test planning_search_test.cpp planning_scaling_test.cpp
              LONG LayoutSearch.BestEqualsTheBestOfSimulatingEveryLayoutAndTheCountsAddUp)
target_link_libraries(planning_search_test PRIVATE parallax_planning)
# Through the CLI: the small case ranks, writes its best layout, and parallax train runs it; a
# bad space fails with its pointer and exit 2.
add_test(NAME example.search.small_case
         COMMAND bash -c "\"$0\" search \"$1\" --jobs 2 --top 3 --emit \"$2/best.json\" --json \"$2/all.json\" && \"$0\" train \"$2/best.json\" --network analytical"
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/tests/data/workloads/gpt-1.3b-16xa100.json ${train_scratch})
set_tests_properties(example.search.small_case PROPERTIES PASS_REGULAR_EXPRESSION
                     "layouts: [0-9]+ enumerated = .*simulated.*\n.*best layout written.*\n.*Parallax train: gpt-1.3b")
# A job on part of a node (64 of an NVL72 rack's 72 GPUs): the emitted workload keeps its 64 GPUs.
add_test(NAME example.search.partial_rack_emit
         COMMAND bash -c "\"$0\" search \"$1\" --jobs 2 --top 1 --network analytical --emit \"$2/best-rack.json\" && \"$0\" train \"$2/best-rack.json\" --network analytical"
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xgb200-nvfp4.json ${train_scratch})
set_tests_properties(example.search.partial_rack_emit PROPERTIES LABELS long PASS_REGULAR_EXPRESSION "Parallax train: llama3-70b .* on GB200 NVL72, 64 GPUs")
file(WRITE ${train_scratch}/space.json "{\"tp\": [0]}\n")
parallax_refuses(search.bad_space "space.json: /tp/0: must be between 1"
                 search ${PROJECT_SOURCE_DIR}/tests/data/workloads/gpt-1.3b-16xa100.json --space ${train_scratch}/space.json)
# The MoE dispatcher as a search dimension: both appear in the ranking (inside one node, one expert
# per GPU, flex sends what alltoall does and pays HybridEP's routing-map all-gather besides, so it
# ranks second), and the emitted best layout keeps its dispatcher.
add_test(NAME example.search.moe_dispatcher
         COMMAND bash -c "echo '{\"moe_dispatcher\": [\"alltoall\", \"flex\"], \"ep\": [8]}' > \"$2/moe-space.json\" && \"$0\" search \"$1\" --space \"$2/moe-space.json\" --top 4 --emit \"$2/moe-best.json\" && \"$0\" train \"$2/moe-best.json\" --network analytical"
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json ${train_scratch})
set_tests_properties(example.search.moe_dispatcher PROPERTIES PASS_REGULAR_EXPRESSION
                     "ep 8[ ,][^\n]*\n[^\n]*ep 8 \\(flex\\)[^@]*# layout: [^\n]*ep 8[^\n]*, 1f1b")
# 15 s under the sanitizers (a search of Mixtral on 16 GPUs): run once, in the release pass.
set_tests_properties(example.search.moe_dispatcher PROPERTIES LABELS long)
# parallax scale: every strategy at every count, with the plot.
add_test(NAME example.scale.small_case
         COMMAND bash -c "out=$(\"$0\" scale \"$1\" --gpus 8,16,32 --strategies ddp,zero1,fsdp --weak --plot \"$2/scale-plot\" --json \"$2/scale.json\") && echo \"$out\" && echo \"$out\" | grep -qE '^  ddp +8 .* 100\\.0%' && echo \"$out\" | grep -qE '^  fsdp +32 ' && test -s \"$2/scale-plot/scale.png\""
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR}/tests/data/workloads/gpt-1.3b-16xa100.json ${train_scratch})
# Ranked by cost: the order of throughput (one GPU count), with GPU-hours and dollars per million
# tokens: 1e6 / (tok/s/GPU · 3600) GPU-hours (18,907.5 tok/s/GPU: 0.01469, and $2 an hour 0.02938).
add_test(NAME search.objective_cost
         COMMAND $<TARGET_FILE:parallax> search ${PROJECT_SOURCE_DIR}/tests/data/workloads/gpt-1.3b-16xa100.json --top 2
                 --objective cost --gpu-hour-price 2)
set_tests_properties(search.objective_cost PROPERTIES PASS_REGULAR_EXPRESSION
                     "ranked by cost .*\n.*GPU-h/Mtok +\\$/Mtok\n +1  .* 18907\\.5 .* [0-9]+\\.[0-9]+%  +0\\.01469 +0\\.02938\n")
# Predicted against measured scaling: Narayanan et al. 2021's published strong scaling of GPT-3
# 175B (384-1,536 GPUs), each point's error and the plot; a bad measured file names its line.
add_test(NAME example.scale.measured
         COMMAND bash -c "out=$(\"$0\" scale \"$1/workloads/train/gpt3-175b-384xdgx-a100.json\" --measured \"$1/workloads/scaling/gpt3-175b-narayanan2021-table2.csv\" --plot \"$2/scale-measured\" --json \"$2/scale-measured.json\") && echo \"$out\" && test -s \"$2/scale-measured/scale.png\" && grep -q '\"measured\"' \"$2/scale-measured.json\""
                 $<TARGET_FILE:parallax> ${PROJECT_SOURCE_DIR} ${train_scratch})
set_tests_properties(example.scale.measured PROPERTIES PASS_REGULAR_EXPRESSION
                     "ddp +1536 [^\n]* 98.326 +-?[0-9.]+%\n[^@]*measured: 3 runs from [^\n]*: mean \\|error\\| [0-9.]+%")
file(WRITE ${train_scratch}/bad-measured.csv "gpus,step_time_s\n8,2\n16,fast\n")
parallax_refuses(scale.measured_bad_line "bad-measured.csv:3: step_time_s: expected a positive number, found \"fast\""
                 scale ${PROJECT_SOURCE_DIR}/tests/data/workloads/gpt-1.3b-16xa100.json --measured ${train_scratch}/bad-measured.csv)
# The same layout under every rank order: TP inside a node against TP across nodes.
add_test(NAME example.scale.rank_orders
         COMMAND $<TARGET_FILE:parallax> scale ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json
                 --rank-orders tp-dp-pp,dp-tp-pp --json ${train_scratch}/rank-orders.json)
set_tests_properties(example.scale.rank_orders PROPERTIES PASS_REGULAR_EXPRESSION
                     "512 GPUs, tp 8 .*\n.*\n  tp-dp-pp .* tp 8: in a node, .*\n  dp-tp-pp .* tp 8: 8 nodes")
# mpirun -np 2 parallax search: the same ranking and counts as one process (where MPI is built in).
if(PARALLAX_CLI_HAS_MPI AND PARALLAX_CLI_MPIEXEC)
  add_test(NAME search.mpi_two_ranks_rank_as_one
           COMMAND bash ${PROJECT_SOURCE_DIR}/tools/search-mpi-test.sh ${PARALLAX_CLI_MPIEXEC} $<TARGET_FILE:parallax>
                   ${PROJECT_SOURCE_DIR}/tests/data/workloads/gpt-1.3b-16xa100.json ${train_scratch}/search-mpi)
endif()
# A space with no valid layout, and GPUs the nodes cannot hold, fail before any simulation.
file(WRITE ${train_scratch}/empty-space.json "{\"tp\": [16], \"pp\": [16]}\n")
parallax_refuses(search.no_valid_layout "empty-space.json: no layout of the space is valid on 16 GPUs"
                 search ${PROJECT_SOURCE_DIR}/tests/data/workloads/gpt-1.3b-16xa100.json --space ${train_scratch}/empty-space.json)
# 12 GPUs of 8-GPU nodes: placed as a launcher would, 6 on each of 2 nodes.
add_test(NAME search.gpus_on_part_of_each_node
         COMMAND $<TARGET_FILE:parallax> search ${PROJECT_SOURCE_DIR}/tests/data/workloads/gpt-1.3b-16xa100.json --gpus 12 --top 1)
set_tests_properties(search.gpus_on_part_of_each_node PROPERTIES PASS_REGULAR_EXPRESSION "DGX A100, 12 GPUs")
parallax_refuses(search.no_gpus "--gpus: must be at least 1" search ${PROJECT_SOURCE_DIR}/tests/data/workloads/gpt-1.3b-16xa100.json --gpus 0)

# A job on part of a scale-up domain: 64 of an NVL72 rack's 72 GPUs, sized from the layout;
# and 256 GPUs as 4 racks of 64 (--gpus).
add_test(NAME train.part_of_a_rack
         COMMAND $<TARGET_FILE:parallax> train ${PROJECT_SOURCE_DIR}/tests/data/workloads/llama3-70b-64xgb200-nvl72.json --network analytical)
set_tests_properties(train.part_of_a_rack PROPERTIES PASS_REGULAR_EXPRESSION "on GB200 NVL72, 64 GPUs")
# NVFP4 training on Blackwell: the recipe named in the layout; refused on a GPU without fp4 tensor cores.
add_test(NAME train.nvfp4_on_gb200
         COMMAND $<TARGET_FILE:parallax> train ${PROJECT_SOURCE_DIR}/tests/data/workloads/llama3-70b-64xgb200-nvl72.json --network analytical --dtype fp4)
set_tests_properties(train.nvfp4_on_gb200 PROPERTIES PASS_REGULAR_EXPRESSION "fp4 \\(nvfp4\\)")
parallax_refuses(train.fp4_on_h100_refused "H100-SXM5-80GB has no fp4 peak"
                 train ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json --network analytical --dtype fp4)
add_test(NAME train.racks_of_64
         COMMAND $<TARGET_FILE:parallax> train ${PROJECT_SOURCE_DIR}/tests/data/workloads/llama3-70b-64xgb200-nvl72.json --dp 64 --network analytical)
set_tests_properties(train.racks_of_64 PROPERTIES PASS_REGULAR_EXPRESSION "on GB200 NVL72, 256 GPUs")

# The longest examples (each tens of seconds under the sanitizers) run in the release pass
# only: the asan pass leaves out the label `long` (tools/run-tests.sh).
set_tests_properties(example.train.llama3-405b-2048xdgx-h100 example.train.measured_step example.validate.dev_runs
                     example.validate.per_source example.train.explain example.train.what_if_flags
                     PROPERTIES LABELS long)
