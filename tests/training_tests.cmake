# Tests of the compute layer and of the model part of training (architectures, parameter
# counts, per-operator costs, memory formulas). Included OPTIONAL from tests/CMakeLists.txt.
foreach(training_test compute_model_test training_model_test training_operators_test training_memory_test)
  parallax_test(${training_test} ${training_test}.cpp)
  target_link_libraries(${training_test} PRIVATE parallax_training)
endforeach()

# ---- training job: parallel layout, pipeline schedules, simulated iteration ----------------
foreach(training_test training_layout_test training_pipeline_test training_iteration_test)
  parallax_test(${training_test} ${training_test}.cpp)
  target_link_libraries(${training_test} PRIVATE parallax_training)
endforeach()

# ---- published training runs (validation rows) ------------------------------------------------
parallax_test(training_published_runs_test training_published_runs_test.cpp)
target_link_libraries(training_published_runs_test PRIVATE parallax_training)
