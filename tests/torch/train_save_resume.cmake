# Runs the `train` example (on its synthetic data) through mpirun three times: 4 epochs straight, then 2
# epochs with --save and 2 more with --resume. The resumed run must start at
# epoch 3 and continue where the first stopped: its epoch-3 and epoch-4 losses
# match the straight run's (up to reduction-order rounding). Resuming with a
# different optimizer must fail cleanly.
# Inputs: MPIEXEC, MPIRUN_FLAGS (list), TRAIN, WORK_DIR.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(common --data synthetic --optimizer adam --train-samples 4096 --test-samples 1024 --threads 1)

function(run_train out_var expect_success)
  execute_process(COMMAND ${MPIEXEC} -np 2 ${MPIRUN_FLAGS} ${TRAIN} ${ARGN}
                  WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("$ train ${ARGN}\n${out}${err}")
  if(expect_success AND NOT rc EQUAL 0)
    message(FATAL_ERROR "train ${ARGN} failed with ${rc}")
  elseif(NOT expect_success AND rc EQUAL 0)
    message(FATAL_ERROR "train ${ARGN} should have failed")
  endif()
  set(${out_var} "${out}${err}" PARENT_SCOPE)
endfunction()

# "epoch E/N  train-loss X" -> X
function(train_loss out_var text epoch)
  if(NOT text MATCHES "epoch ${epoch}/[0-9]+  train-loss ([0-9.]+)")
    message(FATAL_ERROR "no train-loss for epoch ${epoch}")
  endif()
  set(${out_var} ${CMAKE_MATCH_1} PARENT_SCOPE)
endfunction()

run_train(straight TRUE ${common} --epochs 4)
run_train(first TRUE ${common} --epochs 2 --save ck.pt)
if(NOT EXISTS "${WORK_DIR}/ck.pt")
  message(FATAL_ERROR "--save did not write ck.pt")
endif()
run_train(resumed TRUE ${common} --epochs 4 --resume ck.pt)
if(NOT resumed MATCHES "resumed from ck.pt after epoch 2")
  message(FATAL_ERROR "the resumed run did not report resuming after epoch 2")
endif()
if(resumed MATCHES "epoch [12]/4")
  message(FATAL_ERROR "the resumed run trained epochs 1-2 again")
endif()

train_loss(first_epoch1 "${straight}" 1)
foreach(epoch 3 4)
  train_loss(a "${straight}" ${epoch})
  train_loss(b "${resumed}" ${epoch})
  # CMake has no floating point: compare via fixed-point micro-units.
  string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\1\\2" a_int "${a}")
  string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\1\\2" b_int "${b}")
  math(EXPR diff "${a_int} - ${b_int}")
  if(diff LESS 0)
    math(EXPR diff "-${diff}")
  endif()
  # Losses are printed with 4 decimals: allow 2% of the straight run's loss plus 0.002.
  math(EXPR allowed "${a_int} / 50 + 20")
  if(diff GREATER allowed)
    message(FATAL_ERROR "epoch ${epoch}: resumed loss ${b} vs straight ${a}")
  endif()
endforeach()
train_loss(resumed3 "${resumed}" 3)
string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\1\\2" r3 "${resumed3}")
string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\1\\2" f1 "${first_epoch1}")
if(NOT r3 LESS f1)
  message(FATAL_ERROR "resumed epoch-3 loss ${resumed3} is not below a fresh run's epoch-1 loss ${first_epoch1}")
endif()

run_train(wrong FALSE --data synthetic --optimizer sgd --train-samples 4096 --test-samples 1024 --epochs 4 --resume ck.pt)
if(NOT wrong MATCHES "cannot resume from ck.pt")
  message(FATAL_ERROR "resuming with another optimizer did not explain the failure")
endif()
run_train(missing FALSE ${common} --epochs 4 --resume does-not-exist.pt)
message("train save/resume: OK")
