# hvd.init() under torchrun, an initialised torch.distributed and Kubernetes'
# operators' environments (no mpirun): detection from the environment, then
# real torchrun jobs.
set(HVL_LAUNCHERS_ENV "${HVL_PY_TEST_ENV}")
if(TARGET train)
  list(APPEND HVL_LAUNCHERS_ENV "HVL_TRAIN_BIN=$<TARGET_FILE:train>")
endif()
# A program of the core alone (no LibTorch): it refuses another launcher's world.
if(TARGET core_init_app)
  list(APPEND HVL_LAUNCHERS_ENV "HVL_CORE_BIN=$<TARGET_FILE:core_init_app>")
endif()
add_test(NAME py_launchers_torchrun
  COMMAND ${Python_EXECUTABLE} -m pytest -q -rs -x -p no:cacheprovider --color=no
          ${CMAKE_CURRENT_SOURCE_DIR}/launchers/test_detect.py ${CMAKE_CURRENT_SOURCE_DIR}/launchers/test_torchrun.py
          ${CMAKE_CURRENT_SOURCE_DIR}/launchers/test_kubernetes.py
  WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/launchers)
set_tests_properties(py_launchers_torchrun PROPERTIES ENVIRONMENT "${HVL_LAUNCHERS_ENV}" TIMEOUT 600)
# torchrun across simulated hosts (root and network namespaces; skipped, saying
# why, elsewhere).
add_test(NAME py_launchers_torchrun_hosts
  COMMAND ${Python_EXECUTABLE} -m pytest -q -rs -x -p no:cacheprovider --color=no
          ${CMAKE_CURRENT_SOURCE_DIR}/launchers/test_torchrun_hosts.py
  WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/launchers)
set_tests_properties(py_launchers_torchrun_hosts PROPERTIES ENVIRONMENT "${HVL_LAUNCHERS_ENV}" TIMEOUT 400
  RUN_SERIAL ON SKIP_REGULAR_EXPRESSION "multi-host launcher tests need root")
include(${CMAKE_CURRENT_LIST_DIR}/engines.cmake)
