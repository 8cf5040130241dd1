# horovodlite.lightning.HorovodStrategy on Lightning 2.x (lightning from PyPI,
# ci/setup_venv.sh): one 2-rank job per launcher (mpirun with the MPI backend,
# horovodlite-run --gloo and torchrun with Gloo), each running several fits
# against one plain-PyTorch process. Skipped, saying why, without lightning.
set(HVL_LIGHTNING_ENV "${HVL_PY_TEST_ENV}")
if(HVL_HAVE_GLOO)
  list(APPEND HVL_LIGHTNING_ENV "HVL_TEST_GLOO=1")
else()
  list(APPEND HVL_LIGHTNING_ENV "HVL_TEST_GLOO=0")
endif()
add_test(NAME py_lightning
  COMMAND ${Python_EXECUTABLE} -m pytest -q -rs -p no:cacheprovider --color=no
          ${CMAKE_CURRENT_SOURCE_DIR}/lightning/test_lightning.py
  WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/lightning)
set_tests_properties(py_lightning PROPERTIES ENVIRONMENT "${HVL_LIGHTNING_ENV}" TIMEOUT 600
  SKIP_RETURN_CODE 5 SKIP_REGULAR_EXPRESSION "lightning is not installed [(]ci/setup_venv.sh installs it[)]")
