# hvd.init() under real Slurm jobs (srun, sbatch) on a one-node Slurm that the
# suite starts itself (slurm/slurm_cluster.py: munged, slurmctld and slurmd on a
# temporary directory and free ports). Needs root and Debian's slurm-wlm and
# munge (ci/install_deps.sh installs them); reported as skipped, with the
# reason, without them. RUN_SERIAL: up to three ranks and three daemons on
# the machine's cores.
set(HVL_SLURM_ENV "${HVL_PY_TEST_ENV}")
if(TARGET train)
  list(APPEND HVL_SLURM_ENV "HVL_TRAIN_BIN=$<TARGET_FILE:train>")
endif()
# A program of the core alone (no LibTorch): it refuses another launcher's world.
if(TARGET core_init_app)
  list(APPEND HVL_SLURM_ENV "HVL_CORE_BIN=$<TARGET_FILE:core_init_app>")
endif()
add_test(NAME py_slurm
  COMMAND ${Python_EXECUTABLE} -m pytest -q -rsx -p no:cacheprovider --color=no ${CMAKE_CURRENT_SOURCE_DIR}/slurm
  WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/slurm)
set_tests_properties(py_slurm PROPERTIES ENVIRONMENT "${HVL_SLURM_ENV}" TIMEOUT 300 RUN_SERIAL ON
  SKIP_REGULAR_EXPRESSION "Slurm tests need root")
