# MPI detection (HVL_WITH_MPI = AUTO, ON or OFF).
#
# Sets HVL_HAVE_MPI (ON when the MPI backend is built: src/mpi/). Without it the
# core builds its transport-neutral world only: every job runs on Gloo
# (horovodlite-run --gloo, the elastic driver, Spark, Ray), and mpi_built() is
# false. The CUDA backend's communicators are MPI's: it needs MPI.
set(HVL_HAVE_MPI OFF)
if(NOT HVL_WITH_MPI MATCHES "^(ON|OFF|AUTO)$")
  message(FATAL_ERROR "HVL_WITH_MPI must be ON, OFF or AUTO, not '${HVL_WITH_MPI}'")
endif()
if(NOT HVL_WITH_MPI STREQUAL "OFF")
  if(HVL_WITH_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS C)
  else()
    find_package(MPI QUIET COMPONENTS C)
  endif()
  if(MPI_C_FOUND)
    set(HVL_HAVE_MPI ON)
  else()
    message(STATUS "horovodlite: MPI backend off (MPI not found; apt-get install libopenmpi-dev)")
  endif()
endif()
