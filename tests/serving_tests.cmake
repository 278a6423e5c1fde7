# Tests of sim/serving and `parallax serve`. Included OPTIONAL from tests/CMakeLists.txt.

# One executable for the serving tests: engine steps of model-parallel instances, the fleet
# (queues, batching, memory), request traces, prefix caching and routing, P/D disaggregation.
parallax_test(serving_test serving_step_test.cpp serving_fleet_test.cpp serving_trace_test.cpp serving_prefix_test.cpp
              serving_pd_test.cpp serving_split_search_test.cpp serving_sizing_test.cpp serving_autoscale_test.cpp
              LONG ServingQueue.MM1WaitingTimeIsRhoOverMuMinusLambda ServingQueue.MD1WaitingTimeIsPollaczekKhinchine
                   ServingQueue.JoinShortestQueueWaitsLessThanPowerOfTwoThanRoundRobin
                   ServingPrefixCache.CacheAwareRoutersHitMoreThanRoundRobin ServingPrefixIndex.AForgetfulRouterIndexLosesAffinity
                   ServingPrefixCache.AnUnboundedCacheHitsTheTracesOwnBlockReuse ServingTrace.MooncakeKeepsItsPrefixBlocks
                   ServingSearch.EveryShapeFillsTheGpusAndTheRankingIsTheCapacitysWhateverTheThreads
                   ServingSplitSearch.PruningKeepsTheExhaustiveBestAndTheCountsAddUp
                   ServingSplitSearch.OnNodeGroupsEachPoolRunsOnOneGroup
                   ServingSearchCost.PricedSearchesRankByCapacityPerDollarAnHour
                   ServingSizing.OnNodeGroupsEachPoolGrowsOnItsGroupAndPricesSeekTheCheapest
                   ServingShapeSearch.OnNodeGroupsThePoolTriesEachGroup
                   ServingAutoscale.ScalingOnTheArrivalRateRunsEachInstanceAtTheTargetShareOfItsRate
                   ServingAutoscale.ScalingUpAtMaxWhileInstancesDrainRevivesThem
                   ServingPrefixCache.AHostTierGivesBackWhatASmallGpuCacheEvicts
                   ServingSizing.TheChosenFleetMeetsTheTargetAndOneInstanceFewerDoesNot)
target_link_libraries(serving_test PRIVATE parallax_serving)

# ---- parallax serve step through the CLI -------------------------------------------------------------
set(serve_scratch ${CMAKE_CURRENT_BINARY_DIR}/serve-scratch)
file(MAKE_DIRECTORY ${serve_scratch})
add_test(NAME example.serve.step_decode
         COMMAND parallax serve step --model llama3-70b --topology dgx-h100 --tp 8 --decode 64 --context 4096
                 --json ${serve_scratch}/decode.json)
set_tests_properties(example.serve.step_decode PROPERTIES PASS_REGULAR_EXPRESSION "TP all-reduce.*step ")
add_test(NAME example.serve.step_prefill_pp
         COMMAND parallax serve step --model llama3-70b --topology dgx-h100 --nodes 2 --tp 8 --pp 2 --prefill 4096x2)
set_tests_properties(example.serve.step_prefill_pp PROPERTIES PASS_REGULAR_EXPRESSION "slowest stage")
# Bad input: one line naming what is wrong, exit 2.
add_test(NAME example.serve.step_bad_tp
         COMMAND bash ${PROJECT_SOURCE_DIR}/calibrate/harness/check-exit.sh 2 "tp=3 does not divide heads=64"
                 $<TARGET_FILE:parallax> serve step --model llama3-70b --topology dgx-h100 --tp 3 --decode 1 --context 8)
add_test(NAME example.serve.step_bad_prefill
         COMMAND bash ${PROJECT_SOURCE_DIR}/calibrate/harness/check-exit.sh 2 "--prefill: expected LENxBATCH"
                 $<TARGET_FILE:parallax> serve step --model llama3-8b --topology dgx-h100 --prefill 4096)

# ---- the fleet simulation: queues, batching, memory --------------------------------------------

# ---- parallax serve FLEET.json through the CLI ---------------------------------------------------
set(serve_fleet ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-8b-4xtp2-h100.json)
add_test(NAME example.serve.fleet
         COMMAND parallax serve ${serve_fleet} --requests 500 --json ${serve_scratch}/fleet.json
                 --per-request ${serve_scratch}/fleet.csv)
set_tests_properties(example.serve.fleet PROPERTIES PASS_REGULAR_EXPRESSION "500 completed, 0 rejected.*TTFT.*SLO")
# Same inputs and seed: byte-identical JSON and CSV.
add_test(NAME example.serve.fleet_deterministic
         COMMAND bash -c "set -e; for i in 1 2; do $<TARGET_FILE:parallax> serve ${serve_fleet} --requests 300 --seed 7 --json ${serve_scratch}/det$i.json --per-request ${serve_scratch}/det$i.csv >/dev/null; done; cmp ${serve_scratch}/det1.json ${serve_scratch}/det2.json; cmp ${serve_scratch}/det1.csv ${serve_scratch}/det2.csv")
set(serve_data ${PROJECT_SOURCE_DIR}/tests/data/serve)
set(check_exit ${PROJECT_SOURCE_DIR}/calibrate/harness/check-exit.sh)
add_test(NAME example.serve.bad_router
         COMMAND bash ${check_exit} 2 "bad-router.json: /router/policy: unknown router \"fastest\" \\(round_robin, "
                 $<TARGET_FILE:parallax> serve ${serve_data}/bad-router.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.bad_tp
         COMMAND bash ${check_exit} 2 "bad-tp.json: /pools/0: tp=3 does not divide heads=32"
                 $<TARGET_FILE:parallax> serve ${serve_data}/bad-tp.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.bad_preemption
         COMMAND bash ${check_exit} 2 "bad-preemption.json: /pools/0/kv_cache/preemption: preemption is \"recompute\" or \"swap\""
                 $<TARGET_FILE:parallax> serve ${serve_data}/bad-preemption.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.bad_kv_dtype
         COMMAND bash ${check_exit} 2 "bad-kv-dtype.json: /pools/0/kv_cache/dtype: \"int4\" is not a serving type \\(bf16 or fp8\\)"
                 $<TARGET_FILE:parallax> serve ${serve_data}/bad-kv-dtype.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.dp_dense
         COMMAND bash ${check_exit} 2 "dp-dense.json: /pools/0: data-parallel attention \\(dp > 1\\) is for MoE models"
                 $<TARGET_FILE:parallax> serve ${serve_data}/dp-dense.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.bad_dp_dispatch
         COMMAND bash ${check_exit} 2 "bad-dp-dispatch.json: /pools/0/batching/dp_dispatch: \"least_loaded\" is not a dispatch"
                 $<TARGET_FILE:parallax> serve ${serve_data}/bad-dp-dispatch.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.bad_draft
         COMMAND bash ${check_exit} 2 "bad-draft.json: /pools/0/speculative/model: only a draft model"
                 $<TARGET_FILE:parallax> serve ${serve_data}/bad-draft.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.bad_speculative
         COMMAND bash ${check_exit} 2 "bad-speculative.json: /pools/0/speculative/method: \"medusa\" is not a drafting method \\(mtp, eagle or draft\\)"
                 $<TARGET_FILE:parallax> serve ${serve_data}/bad-speculative.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.step_speculative
         COMMAND parallax serve step --model deepseek-v3 --topology hgx-h200 --tp 8 --ep 8 --dtype fp8 --decode 64
                 --context 4096 --speculative mtp --draft-tokens 1 --acceptance 0.85)
set_tests_properties(example.serve.step_speculative PROPERTIES
                     PASS_REGULAR_EXPRESSION "verifying 1 draft.*of it, drafting.*1.85 tokens a sequence a step")
add_test(NAME example.serve.static_swap
         COMMAND bash ${check_exit} 2 "static-swap.json: /pools/0/kv_cache/preemption: static batching never preempts"
                 $<TARGET_FILE:parallax> serve ${serve_data}/static-swap.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.pool_does_not_fit
         COMMAND bash ${check_exit} 2 "no-fit.json: /pools/0: llama3-70b at tp=1, pp=1 does not fit on H100"
                 $<TARGET_FILE:parallax> serve ${serve_data}/no-fit.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.prefill_without_decode
         COMMAND bash ${check_exit} 2 "prefill-only.json: /pools: a disaggregated fleet has prefill and decode pools"
                 $<TARGET_FILE:parallax> serve ${serve_data}/prefill-only.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.malformed
         COMMAND bash ${check_exit} 2 "malformed.json: .*line [0-9]+"
                 $<TARGET_FILE:parallax> serve ${serve_data}/malformed.json --json ${serve_scratch}/never.json)
# A hybrid model (Mamba layers: a state per sequence beside the attention layers' KV) served;
# its prefix cache refused.
add_test(NAME example.serve.hybrid
         COMMAND parallax serve ${PROJECT_SOURCE_DIR}/workloads/serve/nemotron-3-nano-8xh100.json --requests 300)
set_tests_properties(example.serve.hybrid PROPERTIES PASS_REGULAR_EXPRESSION "300 completed, 0 rejected")
add_test(NAME example.serve.hybrid_prefix_cache
         COMMAND bash ${check_exit} 2 "hybrid-prefix-cache.json: /pools/0/kv_cache/prefix_caching: prefix caching of a hybrid model's Mamba states is not modelled"
                 $<TARGET_FILE:parallax> serve ${serve_data}/hybrid-prefix-cache.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.hybrid_swap
         COMMAND bash ${check_exit} 2 "hybrid-swap.json: /pools/0/kv_cache/preemption: swapping a hybrid model's Mamba states is not modelled"
                 $<TARGET_FILE:parallax> serve ${serve_data}/hybrid-swap.json --json ${serve_scratch}/never.json)
# None of the failing runs left an output file.
add_test(NAME example.serve.no_output_on_error
         COMMAND bash -c "! test -e ${serve_scratch}/never.json")
set_tests_properties(example.serve.no_output_on_error PROPERTIES
                     DEPENDS "example.serve.bad_router;example.serve.bad_tp;example.serve.bad_kv_dtype;example.serve.dp_dense;example.serve.bad_speculative;example.serve.pool_does_not_fit;example.serve.prefill_without_decode;example.serve.malformed;example.serve.hybrid_prefix_cache;example.serve.hybrid_swap")

# DeepSeek-V3 from its fp8 checkpoint on one H200 node: fp8 weights fit where bf16 would not.
add_test(NAME example.serve.fp8_deepseek
         COMMAND parallax serve ${PROJECT_SOURCE_DIR}/workloads/serve/deepseek-v3-fp8-8xh200.json --requests 200)
set_tests_properties(example.serve.fp8_deepseek PROPERTIES PASS_REGULAR_EXPRESSION "KV blocks of 64 tokens.*200 completed, 0 rejected")
add_test(NAME example.serve.step_fp8
         COMMAND parallax serve step --model deepseek-v3 --topology hgx-h200 --tp 8 --ep 8 --decode 64 --context 4096
                 --dtype fp8 --kv-cache-dtype fp8)
set_tests_properties(example.serve.step_fp8 PROPERTIES PASS_REGULAR_EXPRESSION "fp8 weights, fp8 KV cache.*78.3 GiB of weights.*: fits")

# DeepSeek-V3 disaggregated, each pool data-parallel attention over 16 GPUs of two nodes with
# the experts spread over them (SGLang's large-scale EP).
add_test(NAME example.serve.pd_wide_ep
         COMMAND parallax serve ${PROJECT_SOURCE_DIR}/workloads/serve/deepseek-v3-pd-wide-ep-4xdgx-h100.json --requests 500)
# 5-6 s under the sanitizers: run once, in the release pass (example.serve.fleet_disaggregated
# and example.serve.step_dp_attention run its code there).
set_tests_properties(example.serve.pd_wide_ep PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "dp 16 attention ranks, ep 16.*500 completed, 0 rejected.*KV move")
# A windowed model served (GPT-OSS: 128 tokens on half its layers): the report names the hybrid
# allocator's rule. Run once, in the release pass (ServingFleet.AHybridAllocator* run the same
# fleet under the sanitizers).
add_test(NAME example.serve.hybrid_allocator
         COMMAND parallax serve ${PROJECT_SOURCE_DIR}/tests/data/serve/gpt-oss-windowed.json --requests 40)
set_tests_properties(example.serve.hybrid_allocator PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "hybrid KV allocator: on 50% of the KV bytes .* last 143 tokens")
add_test(NAME example.serve.step_dp_attention
         COMMAND parallax serve step --model deepseek-v3 --topology dgx-h100 --nodes 2 --tp 1 --dp 16 --decode 1024
                 --context 2400 --dtype fp8)
set_tests_properties(example.serve.step_dp_attention PROPERTIES PASS_REGULAR_EXPRESSION "dp 16 attention ranks.*EP all-to-all.*: fits")
add_test(NAME example.serve.step_two_batch_overlap
         COMMAND parallax serve step --model deepseek-v3 --topology dgx-h100 --nodes 2 --tp 1 --dp 16 --decode 1024
                 --context 2400 --dtype fp8 --two-batch-overlap)
set_tests_properties(example.serve.step_two_batch_overlap PROPERTIES PASS_REGULAR_EXPRESSION "EP all-to-all.*beside one another  *-")
# Speculative decoding by a separate draft model (Llama 3.2 1B for Llama 3 70B): its decode steps
# before each verification, its weights and KV beside the target's; a vocabulary that differs is
# refused.
add_test(NAME example.serve.step_draft_model
         COMMAND parallax serve step --model llama3-70b --topology dgx-h100 --tp 4 --decode 64 --context 4096
                 --speculative draft --draft-model llama3.2-1b --draft-tokens 4 --acceptance 0.7)
set_tests_properties(example.serve.step_draft_model PROPERTIES PASS_REGULAR_EXPRESSION "of it, drafting.*2.77 tokens a sequence a step.*the draft model's included.*: fits")
add_test(NAME example.serve.step_draft_vocabulary
         COMMAND bash ${check_exit} 2 "must share the target's tokenizer"
                 $<TARGET_FILE:parallax> serve step --model llama3-70b --topology dgx-h100 --tp 4 --decode 8 --context 512
                 --speculative draft --draft-model llama2-7b --draft-tokens 2 --acceptance 0.7)
add_test(NAME example.serve.draft_model_fleet
         COMMAND parallax serve ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-draft-2xtp4-h100.json --requests 200)
set_tests_properties(example.serve.draft_model_fleet PROPERTIES PASS_REGULAR_EXPRESSION "speculative decoding by the draft model llama3.2-1b.*200 completed, 0 rejected")

# Which instance shape serves the example's traffic best on its 8 H100s: every shape simulated at
# rising rates to its capacity at the SLO; the best written as a fleet file that runs.
add_test(NAME example.serve.search
         COMMAND bash -c "set -e; $<TARGET_FILE:parallax> serve search ${serve_fleet} --requests 200 --jobs 2 --max-sequences 64,256 --token-budgets 2048,8192 --emit ${serve_scratch}/best-fleet.json --json ${serve_scratch}/search.json --plot ${serve_scratch}/search-plot; test -s ${serve_scratch}/search-plot/shapes.png; $<TARGET_FILE:parallax> serve ${serve_scratch}/best-fleet.json --requests 100")
set_tests_properties(example.serve.search PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "batching.*seqs / .* tokens.*capacity.*shapes: 40 enumerated = 0 rejected by rule \\+ 0 rejected by memory \\+ [1-9][0-9]* pruned by bound \\+ [1-9][0-9]* simulated.*100 completed, 0 rejected")
# A speculating pool: how many draft tokens a step, with each shape.
add_test(NAME example.serve.search_draft_tokens
         COMMAND parallax serve search ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-draft-2xtp4-h100.json --requests 200
                 --draft-tokens 1,2,4 --jobs 2)
set_tests_properties(example.serve.search_draft_tokens PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "seqs / 8192 tokens / [124] drafts.*shapes: 12 enumerated = ")
add_test(NAME example.serve.search_draft_tokens_without_speculation
         COMMAND bash ${check_exit} 2 "draft tokens to try, but the pool does not speculate"
                 $<TARGET_FILE:parallax> serve search ${serve_fleet} --draft-tokens 2)
# A disaggregated fleet: how many of the 8 GPUs prefill and how many decode, each side's shape;
# splits whose rate bound cannot reach the best are pruned unsimulated; the best fleet runs.
add_test(NAME example.serve.search_split
         COMMAND bash -c "set -e; $<TARGET_FILE:parallax> serve search ${PROJECT_SOURCE_DIR}/tests/data/serve/pd-split.json --jobs 2 --emit ${serve_scratch}/best-split.json --json ${serve_scratch}/split.json --plot ${serve_scratch}/split-plot; test -s ${serve_scratch}/split-plot/shapes.png; $<TARGET_FILE:parallax> serve ${serve_scratch}/best-split.json --requests 100")
set_tests_properties(example.serve.search_split PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "prefill/decode splits.*splits: [0-9]+ fill the GPUs = 0 unplaceable \\+ [1-9][0-9]* pruned by bound \\+ 0 refused \\+ [0-9]+ simulated.*100 completed, 0 rejected")
add_test(NAME example.serve.search_bad_attainment
         COMMAND bash ${check_exit} 2 "--attainment: a fraction in"
                 $<TARGET_FILE:parallax> serve search ${PROJECT_SOURCE_DIR}/tests/data/serve/pd-split.json --attainment 2)

# How many instances serve 120 requests/s within the SLO (the example's 4 x TP 2 carry 94 with its
# 3,000 requests; this short run of 300 sees more).
add_test(NAME example.serve.size
         COMMAND bash -c "set -e; $<TARGET_FILE:parallax> serve size ${serve_fleet} --requests 300 --target 120 --emit ${serve_scratch}/sized.json --json ${serve_scratch}/sized-runs.json; $<TARGET_FILE:parallax> serve ${serve_scratch}/sized.json --requests 100")
set_tests_properties(example.serve.size PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "the smallest that meets it.*to serve 120.00: chat [0-9]+ .*GPUs on [0-9]+ nodes.*100 completed")
# A disaggregated fleet: each pool grown alone, the better kept, then each trimmed.
add_test(NAME example.serve.size_disaggregated
         COMMAND parallax serve size ${PROJECT_SOURCE_DIR}/tests/data/serve/pd-split.json --requests 150 --target 20)
set_tests_properties(example.serve.size_disaggregated PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "to serve 20.00: prefill [0-9]+ .* \\+ decode [0-9]+ ")
add_test(NAME example.serve.size_without_target
         COMMAND bash ${check_exit} 2 "--target is required" $<TARGET_FILE:parallax> serve size ${serve_fleet})

# ---- request traces and their replay -------------------------------------------------------------------
# Prefix caching with a host-memory tier on the Mooncake conversation trace: blocks the GPUs
# evicted come back over PCIe.
add_test(NAME example.serve.host_cache_mooncake
         COMMAND parallax serve ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-8b-host-cache-4xtp2-h100.json
                 --replay ${PROJECT_SOURCE_DIR}/tests/data/serving-traces/mooncake-conversation.jsonl)
set_tests_properties(example.serve.host_cache_mooncake PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "prefix cache: 2[0-9].[0-9]% of prompt blocks found cached.*from host memory: [1-9][0-9]*.[0-9]% of prompt blocks")
add_test(NAME example.serve.bad_host_cache
         COMMAND bash ${check_exit} 2 "bad-host-cache.json: /pools/0/kv_cache/host_cache: a host tier extends the prefix cache"
                 $<TARGET_FILE:parallax> serve ${serve_data}/bad-host-cache.json)
add_test(NAME example.serve.replay_azure_code
         COMMAND parallax serve ${serve_fleet} --replay ${PROJECT_SOURCE_DIR}/tests/data/serving-traces/azure-llm-2023-code.csv
                 --rate-scale 4)
set_tests_properties(example.serve.replay_azure_code PROPERTIES PASS_REGULAR_EXPRESSION "Azure LLM CSV, 8819 requests.*8819 completed")
add_test(NAME example.serve.replay_mooncake
         COMMAND parallax serve ${serve_fleet} --replay ${PROJECT_SOURCE_DIR}/tests/data/serving-traces/mooncake-synthetic.jsonl
                 --requests 1000)
set_tests_properties(example.serve.replay_mooncake PROPERTIES PASS_REGULAR_EXPRESSION "Mooncake JSON lines, 1000 requests.*1000 completed")

# ---- prefix caching and prefix-aware routing -------------------------------------------------------------

# ---- prefill/decode disaggregation ---------------------------------------------------------------------
add_test(NAME example.serve.fleet_disaggregated
         COMMAND parallax serve ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-pd-2xdgx-h100.json --requests 300)
set_tests_properties(example.serve.fleet_disaggregated PROPERTIES PASS_REGULAR_EXPRESSION "300 completed.*KV move")
# The capacity curve and the router comparison, with their plots.
add_test(NAME example.serve.sweep
         COMMAND parallax serve sweep ${serve_fleet} --rates 10:80:x2 --requests 400 --plot ${serve_scratch}/sweep-plots)
set_tests_properties(example.serve.sweep PROPERTIES PASS_REGULAR_EXPRESSION "highest rate meeting the SLOs.*capacity.png")
add_test(NAME example.serve.compare_routers
         COMMAND parallax serve ${serve_fleet} --compare-routers rr,least_tokens,power_of_two --requests 400
                 --plot ${serve_scratch}/router-plots)
set_tests_properties(example.serve.compare_routers PROPERTIES PASS_REGULAR_EXPRESSION "power_of_two.*routers.png")

# ---- autoscaling and time-varying traffic ------------------------------------------------------------
# The bundled example: a 6x surge, instances following it, and the plot of both with the SLO met.
add_test(NAME example.serve.autoscale
         COMMAND bash -c "set -e; $<TARGET_FILE:parallax> serve ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-autoscale-2xdgx-h100.json --json ${serve_scratch}/autoscale.json --plot ${serve_scratch}/autoscale-plot; test -s ${serve_scratch}/autoscale-plot/autoscale.png")
set_tests_properties(example.serve.autoscale PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "autoscaled on concurrency \\(target 16 an instance.*[1-9][0-9]* started.*GPU-hours.*autoscale.png")
# The capacity curve of an autoscaled fleet adds its mean instances and GPU-hours per rate.
add_test(NAME example.serve.autoscale_sweep
         COMMAND parallax serve sweep ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-autoscale-2xdgx-h100.json --rates 1:4:x2 --requests 1000)
set_tests_properties(example.serve.autoscale_sweep PROPERTIES PASS_REGULAR_EXPRESSION "instances  GPU-hours\n +1.00 .*highest rate")
# Priced, each rate's cost per million output tokens falls as the fixed GPUs carry more.
add_test(NAME example.serve.sweep_priced
         COMMAND parallax serve sweep ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-8b-4xtp2-h100.json --rates 10,40 --requests 400
                 --gpu-hour-price 2.5 --json ${serve_scratch}/sweep-priced.json)
set_tests_properties(example.serve.sweep_priced PROPERTIES
                     PASS_REGULAR_EXPRESSION "out tok/s   \\$/M out\n +10.00 .* [0-9]+\\.[0-9]+\n +40.00 .* [0-9]+\\.[0-9]+")
add_test(NAME example.serve.autoscale_with_count
         COMMAND bash ${check_exit} 2 "autoscale-with-count.json: /pools/0/count: an autoscaled pool holds autoscale's max instances"
                 $<TARGET_FILE:parallax> serve ${serve_data}/autoscale-with-count.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.bad_autoscale_metric
         COMMAND bash ${check_exit} 2 "bad-autoscale-metric.json: /pools/0/autoscale/metric: \"gpu_utilization\" is not a scaling metric"
                 $<TARGET_FILE:parallax> serve ${serve_data}/bad-autoscale-metric.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.bad_arrival_target
         COMMAND bash ${check_exit} 2 "bad-arrival-target.json: /pools/0/autoscale/target: must be between 0.010000 and 1.000000"
                 $<TARGET_FILE:parallax> serve ${serve_data}/bad-arrival-target.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.bad_rate_profile
         COMMAND bash ${check_exit} 2 "bad-rate-profile.json: /traffic/rate_profile/2/from: steps must start later and later"
                 $<TARGET_FILE:parallax> serve ${serve_data}/bad-rate-profile.json --json ${serve_scratch}/never.json)
add_test(NAME example.serve.search_refuses_autoscale
         COMMAND bash ${check_exit} 2 "pool chat autoscales, and the shape search chooses fixed counts"
                 $<TARGET_FILE:parallax> serve search ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-autoscale-2xdgx-h100.json)

# ---- clusters of several kinds of GPU (topology node_groups) ---------------------------------------------
add_test(NAME example.serve.pd_h100_a100
         COMMAND parallax serve ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-pd-h100-a100.json --requests 300)
set_tests_properties(example.serve.pd_h100_a100 PROPERTIES
                     PASS_REGULAR_EXPRESSION "pool prefill.*\\(H100-SXM5-80GB\\).*pool decode.*\\(A100-SXM4-80GB\\).*300 completed.*KV move")
# Priced by GPU: the H100 prefill and the A100 decode each at their own price.
add_test(NAME example.serve.cost_by_gpu
         COMMAND parallax serve ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-pd-h100-a100.json --requests 200
                 --gpu-hour-price H100-SXM5-80GB=2.99,A100-SXM4-80GB=1.29 --json ${serve_scratch}/cost.json)
set_tests_properties(example.serve.cost_by_gpu PROPERTIES
                     PASS_REGULAR_EXPRESSION "cost: [0-9.]+ GPU-hours, \\$[0-9.]+; \\$[0-9.]+ per million output tokens")
add_test(NAME example.serve.cost_unpriced
         COMMAND bash ${check_exit} 2 "--gpu-hour-price: no price for H100-SXM5-80GB \\(pool prefill\\)"
                 $<TARGET_FILE:parallax> serve ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-pd-h100-a100.json
                 --gpu-hour-price A100-SXM4-80GB=1.29)
# The searches place pools on each kind of node: a colocated pool, and a prefill/decode split.
add_test(NAME example.serve.search_node_groups
         COMMAND bash -c "set -e; $<TARGET_FILE:parallax> serve search ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-h100-or-a100.json --requests 300 --emit ${serve_scratch}/h100-or-a100.json; grep -q '\"placement\"' ${serve_scratch}/h100-or-a100.json; echo EMITTED_PLACED")
set_tests_properties(example.serve.search_node_groups PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "on h100 .*node groups: the pool is placed on one group.*\n  h100 +9 .*\n  a100 +9 .*EMITTED_PLACED")
add_test(NAME example.serve.split_search_node_groups
         COMMAND parallax serve search ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-pd-h100-a100.json --requests 300 --top 3)
set_tests_properties(example.serve.split_search_node_groups PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "prefill on +decode on.*\n  h100 +h100 .*\n  h100 +a100 .*\n  a100 +h100 .*\n  a100 +a100 ")
# Priced: ranked per dollar an hour of the GPUs in use, every kind of GPU priced or refused.
add_test(NAME example.serve.search_priced
         COMMAND parallax serve search ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-h100-or-a100.json --requests 300
                 --gpu-hour-price H100-SXM5-80GB=2.99,A100-SXM4-80GB=1.29)
set_tests_properties(example.serve.search_priced PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "ranked by capacity at the SLO per dollar an hour.*\\$/hour +\\$/M out.*priced: ranked by capacity per dollar")
add_test(NAME example.serve.search_free_gpu
         COMMAND bash ${check_exit} 2 "--gpu-hour-price: ranking by cost needs every price above 0"
                 $<TARGET_FILE:parallax> serve search ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-h100-or-a100.json
                 --gpu-hour-price H100-SXM5-80GB=2.99,A100-SXM4-80GB=0)
add_test(NAME example.serve.search_unpriced_gpu
         COMMAND bash ${check_exit} 2 "--gpu-hour-price: no price for H100-SXM5-80GB"
                 $<TARGET_FILE:parallax> serve search ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-h100-or-a100.json
                 --gpu-hour-price A100-SXM4-80GB=1.29)
# Sizing on two kinds of GPU, priced: each group given the nodes its pool takes, the written
# fleet placed and runnable.
add_test(NAME example.serve.size_mix_priced
         COMMAND bash -c "set -e; d=${serve_scratch}/size-mix; mkdir -p $d/topologies $d/workloads/serve; cp ${PROJECT_SOURCE_DIR}/topologies/*.json $d/topologies/; $<TARGET_FILE:parallax> serve size ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-mix-h100-a100.json --target 16 --gpu-hour-price H100-SXM5-80GB=2.99,A100-SXM4-80GB=1.29 --emit $d/workloads/serve/sized.json; $<TARGET_FILE:parallax> serve $d/workloads/serve/sized.json --requests 200")
set_tests_properties(example.serve.size_mix_priced PROPERTIES LABELS long
                     PASS_REGULAR_EXPRESSION "\\$/hour.*the cheapest that meets it.*nodes \\(h100 [0-9]+, a100 [0-9]+\\).*at \\$[0-9.]+ an hour.*every mix cheaper than it.*none meets the SLO.*pool h100.*pool a100.*200 completed")
add_test(NAME example.serve.bad_group_nodes
         COMMAND bash ${check_exit} 2 "bad-group-nodes.json: /topology/group_nodes/b200: no node group is named \"b200\""
                 $<TARGET_FILE:parallax> serve ${serve_data}/bad-group-nodes.json)
add_test(NAME example.topo.node_groups
         COMMAND parallax topo show ${PROJECT_SOURCE_DIR}/topologies/dgx-h100-a100-mixed.json)
set_tests_properties(example.topo.node_groups PROPERTIES
                     PASS_REGULAR_EXPRESSION "node group h100: node 0, H100-SXM5-80GB.*node group a100: node 1, A100-SXM4-80GB")

# ---- published engine-step times: the dev and hold-out sets run end to end -------------------------------
add_test(NAME example.serve.validate_dev
         COMMAND parallax serve validate ${PROJECT_SOURCE_DIR}/workloads/serve-validation/step-dev.json)
add_test(NAME example.serve.validate_holdout
         COMMAND parallax serve validate ${PROJECT_SOURCE_DIR}/workloads/serve-validation/step-holdout.json)
set_tests_properties(example.serve.validate_dev example.serve.validate_holdout PROPERTIES
                     PASS_REGULAR_EXPRESSION "all +[0-9]+ rows: mean \\|error\\|" FAIL_REGULAR_EXPRESSION "not predicted")
# A Chrome/Perfetto trace of the engine steps: valid JSON, one named track per instance.
add_test(NAME example.serve.chrome_trace
         COMMAND bash -c "$<TARGET_FILE:parallax> serve ${PROJECT_SOURCE_DIR}/workloads/serve/llama3-70b-pd-2xdgx-h100.json --requests 100 --trace ${serve_scratch}/steps.json >/dev/null && python3 -c \"import json,sys; ev=json.load(open(sys.argv[1]))['traceEvents']; names={e['args']['name'] for e in ev if e['name']=='thread_name'}; steps=[e for e in ev if e['ph']=='X']; assert len(names)==4 and steps and {e['name'] for e in steps} <= {'prefill','decode','mixed'}, (names, len(steps))\" ${serve_scratch}/steps.json")

# Variants of examples whose code the sanitizer pass runs elsewhere (example.serve.sweep and
# ServingSweep for sweeps, the ServingRouter and ServingPrefixCache tests for routers, the byte
# comparisons of the fleet tests): 3-6 s each under the sanitizers, run once, in the release pass.
set_tests_properties(example.serve.autoscale_sweep example.serve.sweep_priced example.serve.compare_routers
                     example.serve.fleet_deterministic PROPERTIES LABELS long)
