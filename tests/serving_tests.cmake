# Tests of sim/serving and `parallax serve`. Included OPTIONAL from tests/CMakeLists.txt.

# ---- engine steps of model-parallel instances ----------------------------------------------------
parallax_test(serving_step_test serving_step_test.cpp)
target_link_libraries(serving_step_test PRIVATE parallax_serving)

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
