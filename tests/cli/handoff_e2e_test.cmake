# calibrate -> plan -> execute -> compare on 4 ranks under real mpirun (issue 14, Sec. 5), run by
# ctest as
#   cmake -DMESHPLAN=<binary> -DMPIEXEC=<mpirun> -DMPIRUN_FLAGS=<;-list> -DWORK_DIR=<scratch>
#         -DSOURCE_DIR=<repo> -P handoff_e2e_test.cmake
# Checks each hand-off: the profile calibrate writes is one plan accepts (and every collective
# came back exact), the plan executes, and compare's measured step time is the mean that
# execute's --json gives (steps after the first) while its predicted one is the plan file's.
# The errors themselves depend on the machine: printed (README "compare" quotes a run), not
# asserted.

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK_DIR} TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (${rc}):\n${out}\n${err}")
  endif()
  set(${name}_out "${out}" PARENT_SCOPE)
endfunction()

run_step(calibrate ${MPIEXEC} ${MPIRUN_FLAGS} -np 4 ${MESHPLAN} calibrate --quick
         --out profile.json)
if(NOT calibrate_out MATCHES "# Out of bounds values : 0 OK\n")
  message(FATAL_ERROR "calibrate: collectives not exact:\n${calibrate_out}")
endif()
string(REGEX MATCH "# fit: [^\n]*" fit "${calibrate_out}")
message(STATUS "${fit}")
run_step(plan ${MESHPLAN} plan --model ${SOURCE_DIR}/tests/data/compare/e2e_small.json
         --cluster profile.json --gpus 4 --global-batch 8 --save-plan plan.json)
run_step(execute ${MPIEXEC} ${MPIRUN_FLAGS} -np 4 ${MESHPLAN} execute plan.json --steps 3
         --json measured.json)
run_step(compare ${MESHPLAN} compare plan.json measured.json --json compare.json)

# Measured: the mean of steps 2 and 3 of execute's --json.
file(READ ${WORK_DIR}/measured.json measured)
string(JSON second GET "${measured}" steps 1 step_time_s)
string(JSON third GET "${measured}" steps 2 step_time_s)
file(READ ${WORK_DIR}/compare.json comparison)
string(JSON measured_step GET "${comparison}" rows 0 measured)
string(JSON component GET "${comparison}" rows 0 component)
# Predicted: the plan file's prediction (written by plan from the same estimate).
file(READ ${WORK_DIR}/plan.json plan)
string(JSON predicted_plan GET "${plan}" prediction step_time_s)
string(JSON predicted_step GET "${comparison}" rows 0 predicted)
execute_process(
  COMMAND awk -v a=${second} -v b=${third} -v m=${measured_step} -v p=${predicted_step}
          -v q=${predicted_plan}
          "BEGIN { d = (a + b) / 2 - m; e = p - q; if (d < 0) d = -d; if (e < 0) e = -e;
                   exit !(d <= 1e-9 * m && e <= 1e-9 * q) }"
  RESULT_VARIABLE consistent)
if(NOT component STREQUAL "step time" OR NOT consistent EQUAL 0)
  message(FATAL_ERROR "compare: step time row (${component}: predicted ${predicted_step}, plan "
                      "${predicted_plan}; measured ${measured_step}, execute ${second} ${third})")
endif()
string(JSON time_error GET "${comparison}" step_time_error_pct)
string(JSON memory_error GET "${comparison}" peak_memory_error_pct)
string(JSON verdict GET "${comparison}" verdict)
message(STATUS "e2e: step time error ${time_error}%, peak memory error ${memory_error}%: ${verdict}")
