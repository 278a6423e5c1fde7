# Issue 21's crash reproducers as command-line regressions: each must exit 2 with a message
# naming the input at fault (never a signal, exit 1 or a hang). Inputs in tests/data/reliability.
set(rel ${PROJECT_SOURCE_DIR}/tests/data/reliability)
set(rel_workload ${PROJECT_SOURCE_DIR}/workloads/train/llama3-70b-64xdgx-h100.json)

# parallax_exit2(NAME REGEX ARGS...): parallax_refuses (tests/CMakeLists.txt) as reliability.NAME,
# within 20 s (a hang is a failure too).
function(parallax_exit2 name regex)
  parallax_refuses(reliability.${name} "${regex}" ${ARGN})
  set_tests_properties(reliability.${name} PROPERTIES TIMEOUT 20)
endfunction()

# 1. Division by zero (SIGFPE): zero or wrapped degrees.
parallax_exit2(tp_zero "--tp: must be between 1 and 65536" train ${rel_workload} --tp 0)
parallax_exit2(pp_zero "--pp: must be between 1 and 65536" train ${rel_workload} --pp 0)
parallax_exit2(cp_zero "--cp: must be between 1 and 65536" train ${rel_workload} --cp 0)
parallax_exit2(pp_wraps "pp-wraps.json: /parallel/pp: must be between 1 and 65536" train ${rel}/pp-wraps.json)
# 2. A value nested 100,000 arrays deep (segfault in validate).
parallax_exit2(deep_nesting "deep.json: nests deeper than 256 levels" validate ${rel}/deep.json)
# 3. A number beyond a double: a raw parser exception before.
parallax_exit2(number_overflow "number-overflow-topology.json: malformed JSON: number overflow"
               topo show ${rel}/number-overflow-topology.json)
# 4. Sizes whose times overflow, refused at the boundary.
parallax_exit2(huge_sequence "--seq: must be between 1 and 16777216" train ${rel_workload} --seq 1000000000)
parallax_exit2(tiny_sustained_fraction "--sustained-fraction: must be in \\[0.01, 1\\]" train ${rel_workload}
               --sustained-fraction 1e-300)
parallax_exit2(huge_hidden "huge-hidden.json: /model/hidden: is too large" train ${rel}/huge-hidden.json)
# 5. Allocations beyond memory.
parallax_exit2(huge_nodes "huge-nodes.json: /topology/nodes: must be between 1 and 1048576 nodes" train ${rel}/huge-nodes.json)
# 6. Hangs: refused beyond their documented limits.
parallax_exit2(nodes_flag "--nodes must be between 1 and 16384" train ${rel_workload} --nodes 100000)
parallax_exit2(huge_batch "exceed the 16384 that an iteration may have" train ${rel}/huge-batch.json)
parallax_exit2(channels "--channels: must be between 1 and 64" collective --topology ${PROJECT_SOURCE_DIR}/topologies/dgx-h100.json
               --channels 100000)
# 7. Preset names that are no names.
parallax_exit2(long_preset "long-preset.json: /topology/preset: a preset name has 1 to 128 characters" train ${rel}/long-preset.json)
parallax_exit2(nul_preset "nul-preset.json: /topology/preset: a preset name has only letters" train ${rel}/nul-preset.json)
# 8. calibrate fit accepting what its fit then rejected (exit 1, no file named): a time below the
# picosecond resolution (read as zero), and rows too few once outliers are rejected.
# Its only line rejected: one error with the reason, not a warning before it.
parallax_exit2(sub_picosecond_time "sub-picosecond-sweep.jsonl: line 2: /time_us: is below one picosecond.*no collective measurement is left"
               calibrate fit ${rel}/sub-picosecond-sweep.jsonl --topology ${PROJECT_SOURCE_DIR}/topologies/hgx-h200.json
               -o ${CMAKE_CURRENT_BINARY_DIR}/sub-picosecond-fit.json)
set_tests_properties(reliability.sub_picosecond_time PROPERTIES FAIL_REGULAR_EXPRESSION "warning")
parallax_exit2(underdetermined_fit "underdetermined-sweep.jsonl: these measurements cannot be fitted: .* underdetermined"
               calibrate fit ${rel}/underdetermined-sweep.jsonl --topology ${PROJECT_SOURCE_DIR}/topologies/hgx-h200.json
               -o ${CMAKE_CURRENT_BINARY_DIR}/underdetermined-fit.json)
# 9. Outputs that cannot be written.
parallax_exit2(json_directory "is a directory, not a file to write" train ${rel_workload} --network analytical --json .)
parallax_exit2(json_missing_folder "no-such-folder/out.json: cannot be written: No such file or directory" train ${rel_workload}
               --network analytical --json ${CMAKE_CURRENT_BINARY_DIR}/no-such-folder/out.json)
# A validation row whose counts overflow: not simulated, with the field named (the others run).
add_test(NAME reliability.huge_heads_row COMMAND $<TARGET_FILE:parallax> validate ${rel}/huge-heads-run.json)
set_tests_properties(reliability.huge_heads_row PROPERTIES PASS_REGULAR_EXPRESSION "num_attention_heads: must be at most 1073741824"
                                                           TIMEOUT 20)
# Unhelpful messages: an input string's newline and control characters are escaped (one line),
# and a layout the topology cannot hold names the topology file.
parallax_exit2(newline_escaped "unknown collective \"all\\\\nreduce\\\\t\""
               collective --topology ${PROJECT_SOURCE_DIR}/topologies/dgx-h100.json --op "all\nreduce\t")
parallax_exit2(room_for_ranks "topologies/dgx-h100.json: the topology has room for 16 ranks, not 512"
               collective --topology ${PROJECT_SOURCE_DIR}/topologies/dgx-h100.json -g 512)
# An unknown attention model in a workload's compute block: its pointer and the two it takes.
parallax_exit2(bad_attention_model "bad-attention-model.json: /compute/attention_model: expected \"shape\" or \"cudnn\""
               train ${rel}/bad-attention-model.json)
