# Warnings for horovodlite's own C++ (every target defined after this file is
# included: the core, the adapter, the Python module, examples, tests, benches;
# imported targets' headers — torch, gtest, MPI — are system headers and stay
# quiet). HVL_WERROR=ON (the ci/ scripts set it) turns them into errors.
option(HVL_WERROR "Treat compiler warnings in horovodlite's own code as errors" OFF)
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wall> $<$<COMPILE_LANGUAGE:CXX>:-Wextra>
                    $<$<COMPILE_LANGUAGE:CXX>:-Wno-unused-parameter>
                    # Options structs are meant to be filled partly: {ReduceOp::kSum}.
                    $<$<COMPILE_LANGUAGE:CXX>:-Wno-missing-field-initializers>)
if(HVL_WERROR)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
