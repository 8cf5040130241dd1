# Installs the build into a scratch prefix, builds a separate C++-only project
# against it with find_package(horovodlite), and runs it on 2 ranks.
# -DBUILD_DIR= -DSOURCE_DIR= -DWORK_DIR= -DMPIEXEC= "-DMPIRUN_FLAGS=..."
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix --component Unspecified
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "configuring the consumer with find_package(horovodlite) failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "building the consumer failed:\n${out}\n${err}")
endif()
separate_arguments(flags UNIX_COMMAND "${MPIRUN_FLAGS}")
set(ENV{LD_LIBRARY_PATH} "${WORK_DIR}/prefix/lib:$ENV{LD_LIBRARY_PATH}")
execute_process(COMMAND ${MPIEXEC} -np 2 ${flags} ${WORK_DIR}/build/core_app RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message("${out}")
if(rc)
  message(FATAL_ERROR "the consumer failed (${rc}):\n${err}")
endif()
