# Installs the build into a scratch prefix, checks that the installed libraries
# find each other ($ORIGIN in their RUNPATH), builds a separate project against
# the install with find_package(horovodlite <version> EXACT), and runs it with no
# LD_LIBRARY_PATH: the core program on 2 ranks and, when the LibTorch adapter is
# installed, a DistributedOptimizer program on 3 ranks that fails unless every
# rank ends with the same parameters.
# -DBUILD_DIR= -DSOURCE_DIR= -DWORK_DIR= -DMPIEXEC= "-DMPIRUN_FLAGS=..." -DVERSION= -DWITH_TORCH=ON|OFF -DREADELF=
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --component Unspecified
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()

# Every installed horovodlite library carries an $ORIGIN-relative RUNPATH.
file(GLOB libs ${prefix}/lib*/libhorovodlite*.so)
if(NOT libs)
  message(FATAL_ERROR "no libhorovodlite*.so under ${prefix}")
endif()
foreach(lib ${libs})
  execute_process(COMMAND ${READELF} -d ${lib} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
  if(rc OR NOT dyn MATCHES "\\((RUNPATH|RPATH)\\)[^\n]*\\$ORIGIN")
    message(FATAL_ERROR "${lib} has no $ORIGIN in its RUNPATH/RPATH:\n${dyn}")
  endif()
endforeach()

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix}
                        -DHVL_EXPECTED_VERSION=${VERSION}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "configuring the consumer with find_package(horovodlite ${VERSION} EXACT) failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "building the consumer failed:\n${out}\n${err}")
endif()

# As a user would run it: nothing pointing at the install's lib directory.
unset(ENV{LD_LIBRARY_PATH})
separate_arguments(flags UNIX_COMMAND "${MPIRUN_FLAGS}")
execute_process(COMMAND ${MPIEXEC} -np 2 ${flags} ${WORK_DIR}/build/core_app RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message("${out}")
if(rc)
  message(FATAL_ERROR "the core consumer failed (${rc}):\n${err}")
endif()

if(WITH_TORCH)
  if(NOT EXISTS ${WORK_DIR}/build/torch_app)
    message(FATAL_ERROR "the install has no horovodlite::horovodlite_torch target")
  endif()
  execute_process(COMMAND ${MPIEXEC} -np 3 ${flags} ${WORK_DIR}/build/torch_app RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  string(REGEX MATCHALL "same on every rank: yes, trained: yes" agreed "${out}")
  list(LENGTH agreed n)
  if(rc OR NOT n EQUAL 3)
    message(FATAL_ERROR "the LibTorch consumer failed (exit ${rc}, ${n} of 3 ranks agreed):\n${out}\n${err}")
  endif()
endif()
