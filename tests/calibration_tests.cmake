# Tests of calibrate/: included from tests/CMakeLists.txt (after calibrate/ is configured, so its
# targets exist here). Each part keeps to its own block.

# ---- Calibration library (calibrate/lib/): measurement sets, robust fitting ----------------------
# (Restored by the harness author after overwriting this file by mistake; reconstructed from the
# build trees' CTestTestfile/flags: two GoogleTest executables linking parallax_calibration.)
# The Crusoe log's fit takes ~5 s under the sanitizers: of the three tests that refit it, the
# measurement comparison runs it there, the other two once, in the release pass.
parallax_test(calibration_test measurement_set_test.cpp robust_fit_test.cpp collective_fit_test.cpp
              LONG CalibratedModel.TheSimulatorPredictsWithTheFittedParameters Logs/HeldOutAccuracy.*
                   CalibrationRecord.TheWrittenBlockLoadsBackAsTheFit)
target_link_libraries(calibration_test PRIVATE parallax_calibration)
# ---- end of the calibration library block ---------------------------------------------------------

# ---- Harnesses (calibrate/harness/): parallax-nccl-bench, parallax-mpi-bench ----------------------
# The shared harness code on a fake backend (no GPU, no MPI needed).
if(TARGET parallax_harness)
  parallax_test(harness_test ${PROJECT_SOURCE_DIR}/calibrate/harness/harness_test.cpp)
  target_link_libraries(harness_test PRIVATE parallax_harness)
endif()

set(harness_dir ${PROJECT_SOURCE_DIR}/calibrate/harness)
set(harness_scratch ${CMAKE_CURRENT_BINARY_DIR}/harness-scratch)

# Without a GPU (CUDA_VISIBLE_DEVICES empty hides any there is), one line on stderr and exit 3;
# bad arguments are refused with 2 before any GPU is looked for.
if(TARGET parallax-nccl-bench)
  add_test(NAME harness.nccl_bench.no_gpu_exits_3
           COMMAND bash ${harness_dir}/check-exit.sh 3 "no usable GPU: .*; nothing measured"
                   env CUDA_VISIBLE_DEVICES= $<TARGET_FILE:parallax-nccl-bench> --groups self -e 1M)
  add_test(NAME harness.nccl_bench.bad_size_exits_2
           COMMAND bash ${harness_dir}/check-exit.sh 2 "-e: .*expected a size"
                   $<TARGET_FILE:parallax-nccl-bench> -e 12Q)
  # The CUDA driver maps memory where ASan's shadow gap would be (harmless without a GPU).
  set_tests_properties(harness.nccl_bench.no_gpu_exits_3 harness.nccl_bench.bad_size_exits_2 PROPERTIES
                       ENVIRONMENT "ASAN_OPTIONS=protect_shadow_gap=0")
endif()
if(TARGET parallax-nccl-bench-mpi)
  add_test(NAME harness.nccl_bench_mpi.no_gpu_exits_3
           COMMAND bash ${harness_dir}/check-exit.sh 3 "no usable GPU: .*; nothing measured"
                   env CUDA_VISIBLE_DEVICES= $<TARGET_FILE:parallax-nccl-bench-mpi> --groups self -e 1M)
  set_tests_properties(harness.nccl_bench_mpi.no_gpu_exits_3 PROPERTIES ENVIRONMENT "ASAN_OPTIONS=protect_shadow_gap=0")
endif()

# MPI over shared memory on this host: the lines written, resume, repair of a cut file, a job
# SIGKILLed at four points and rerun, and a failed warm-up on one rank (the coordinator both
# harnesses share).
if(TARGET parallax-mpi-bench)
  foreach(check np2 resume repair kill np4 fault)
    add_test(NAME harness.mpi_bench.${check}
             COMMAND bash ${harness_dir}/mpi-bench-test.sh ${check} ${MPIEXEC_EXECUTABLE}
                     $<TARGET_FILE:parallax-mpi-bench> ${harness_scratch}/mpi_${check})
    set_tests_properties(harness.mpi_bench.${check} PROPERTIES TIMEOUT 60 RUN_SERIAL TRUE)
  endforeach()
  # Under the sanitizers each launch takes seconds and the file's resume and repair are covered
  # in-process by harness_test (HarnessLog, HarnessSweep): these run in the release pass only.
  set_tests_properties(harness.mpi_bench.kill harness.mpi_bench.resume harness.mpi_bench.repair
                       harness.mpi_bench.np4 PROPERTIES LABELS long)
endif()
# The GPU smoke script with a stand-in binary: its output files, part logs and point timeout.
add_test(NAME harness.gpu_smoke.script
         COMMAND bash ${harness_dir}/gpu-smoke-test.sh ${harness_dir}/gpu-smoke.sh ${harness_scratch}/gpu_smoke)
# The attention benchmark without a GPU: its plan's FLOPs are the compute model's (causal
# 2·(s²/2)·heads·batch·2d), and with no PyTorch or no GPU it says so and exits 3, writing nothing.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME harness.attention_bench.no_gpu
           COMMAND bash ${harness_dir}/attention-bench-test.sh ${Python3_EXECUTABLE}
                   ${PROJECT_SOURCE_DIR}/calibrate/scripts/attention-bench.py ${harness_scratch}/attention_bench)
endif()
# The GPU harness's host code that needs no GPU (built only where CUDA and NCCL are found).
if(TARGET parallax_harness_gpu)
  parallax_test(harness_gpu_test ${harness_dir}/harness_gpu_test.cpp)
  target_link_libraries(harness_gpu_test PRIVATE parallax_harness_gpu)
endif()
# ---- end of the harness block ---------------------------------------------------------------------

# ---- Collective α/β fit (calibrate/lib/collective_fit.h) --------------------------------------------
# (Its tests are in calibration_test above.)
# ---- end of the collective fit block ----------------------------------------------------------------

# ---- parallax calibrate fit|compare through the CLI ---------------------------------------------------
# A real nccl-tests log: fit, then compare it with the calibrated topology (plots need gnuplot,
# which tools/install-deps.sh installs).
set(calibrate_scratch ${CMAKE_CURRENT_BINARY_DIR}/calibrate-scratch)
file(MAKE_DIRECTORY ${calibrate_scratch})
add_test(NAME example.calibrate.fit_crusoe
         COMMAND parallax calibrate fit ${PROJECT_SOURCE_DIR}/tests/data/nccl-tests/crusoe-a100-80gb-2node-16gpu-ib-allreduce.txt
                 --topology ${PROJECT_SOURCE_DIR}/topologies/dgx-a100.json -o ${calibrate_scratch}/crusoe-calibrated.json)
add_test(NAME example.calibrate.compare_crusoe
         COMMAND parallax calibrate compare ${PROJECT_SOURCE_DIR}/tests/data/nccl-tests/crusoe-a100-80gb-2node-16gpu-ib-allreduce.txt
                 --topology ${calibrate_scratch}/crusoe-calibrated.json --plot ${calibrate_scratch}/crusoe-plots)
set_tests_properties(example.calibrate.compare_crusoe PROPERTIES DEPENDS example.calibrate.fit_crusoe)
# --gpus-per-node, as parallax collective takes it: agreeing with the log's device lines, or refused.
add_test(NAME example.calibrate.gpus_per_node
         COMMAND parallax calibrate compare ${PROJECT_SOURCE_DIR}/tests/data/nccl-tests/pcie-1node-2x-rtx2080ti-allreduce.txt
                 --topology ${PROJECT_SOURCE_DIR}/topologies/pcie-2gpu-rtx2080ti.json --gpus-per-node 2)
set_tests_properties(example.calibrate.gpus_per_node PROPERTIES PASS_REGULAR_EXPRESSION "# summary: time")
# The calibrated topology is a topology: `parallax collective` predicts with its fitted parameters.
add_test(NAME example.calibrate.collective_on_calibrated
         COMMAND parallax collective --topology ${calibrate_scratch}/crusoe-calibrated.json --gpus 16
                 --model analytical -b 8 -e 1G -f 8)
set_tests_properties(example.calibrate.collective_on_calibrated PROPERTIES DEPENDS example.calibrate.fit_crusoe
                     PASS_REGULAR_EXPRESSION "with the topology's calibrated parameters")
# A bad line: reported with its file and line and skipped; the lines before and after it are fitted.
add_test(NAME example.calibrate.bad_line_keeps_good_lines
         COMMAND parallax calibrate fit ${PROJECT_SOURCE_DIR}/tests/data/calibration/bad-line-sweep.jsonl
                 --topology ${PROJECT_SOURCE_DIR}/topologies/hgx-h200.json -o ${calibrate_scratch}/bad-line.json)
set_tests_properties(example.calibrate.bad_line_keeps_good_lines PROPERTIES
                     PASS_REGULAR_EXPRESSION "bad-line-sweep.jsonl:4: /time_us: .*line skipped.*3 collective measurements")
# The whole loop on data measured here: MPI over shared memory, fit on half the sizes, held-out error.
if(TARGET parallax-mpi-bench)
  add_test(NAME calibrate.mpi_loop_2_ranks
           COMMAND bash ${PROJECT_SOURCE_DIR}/calibrate/scripts/mpi-loop-check.sh ${MPIEXEC_EXECUTABLE}
                   $<TARGET_FILE:parallax-mpi-bench> $<TARGET_FILE:parallax>
                   ${PROJECT_SOURCE_DIR}/topologies/host-shm-4ranks.json ${calibrate_scratch}/mpi-loop)
  set_tests_properties(calibrate.mpi_loop_2_ranks PROPERTIES LABELS long TIMEOUT 120 RUN_SERIAL TRUE)
endif()
# ---- end of the calibrate CLI block -------------------------------------------------------------------
