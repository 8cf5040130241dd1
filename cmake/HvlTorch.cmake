# Finds LibTorch for the adapter: the one that belongs to the Python interpreter
# the build uses, so that C++ and Python see the same PyTorch.
#
# PyTorch wheels from PyPI carry LibTorch (headers, libraries, the CMake package
# under torch.utils.cmake_prefix_path). When Python_EXECUTABLE is given and
# Torch_DIR does not name another LibTorch, that interpreter's torch is searched
# first; Debian's python3-torch has no such
# directory, and libtorch-dev's package (/usr/lib/<arch>/cmake/Torch) is found
# the usual way. A LibTorch whose version differs from the interpreter's torch
# is an error: the Python module links both.
#
# Sets HVL_HAVE_TORCH, HVL_TORCH_VERSION (e.g. 2.13.0) and HVL_TORCH_PYTHON_VERSION.
macro(hvl_find_torch)
  set(HVL_HAVE_TORCH OFF)
  set(HVL_TORCH_PYTHON_VERSION "")
  if(NOT HVL_WITH_TORCH STREQUAL "OFF")
    if(Python_EXECUTABLE)
      execute_process(
        COMMAND ${Python_EXECUTABLE} -c "import torch, torch.utils; print(torch.__version__.split('+')[0]); print(torch.utils.cmake_prefix_path)"
        OUTPUT_VARIABLE _hvl_py_torch OUTPUT_STRIP_TRAILING_WHITESPACE
        RESULT_VARIABLE _hvl_py_rc ERROR_QUIET)
      if(_hvl_py_rc EQUAL 0)
        string(REPLACE "\n" ";" _hvl_py_torch "${_hvl_py_torch}")
        list(GET _hvl_py_torch 0 HVL_TORCH_PYTHON_VERSION)
        list(GET _hvl_py_torch 1 _hvl_py_prefix)
        get_filename_component(_hvl_py_torch_dir "${_hvl_py_prefix}/Torch" ABSOLUTE)
        if(Torch_DIR)
          get_filename_component(_hvl_given_dir "${Torch_DIR}" ABSOLUTE)
        else()
          set(_hvl_given_dir "${_hvl_py_torch_dir}")
        endif()
        if(EXISTS "${_hvl_py_torch_dir}/TorchConfig.cmake" AND _hvl_given_dir STREQUAL _hvl_py_torch_dir)
          list(PREPEND CMAKE_PREFIX_PATH "${_hvl_py_prefix}")
          # TorchConfig looks for libc10 with find_library(... PATHS <torch>/lib),
          # which searches the system first: with Debian's libtorch-dev installed it
          # takes /usr/lib/<arch>/libc10.so (1.13), and two c10s in one process
          # crash at exit. Point it at the wheel's own.
          get_filename_component(_hvl_torch_lib "${_hvl_py_prefix}/../../lib" ABSOLUTE)
          if(c10_LIBRARY AND NOT c10_LIBRARY MATCHES "^${_hvl_torch_lib}/")
            unset(c10_LIBRARY CACHE)
          endif()
          find_library(c10_LIBRARY c10 PATHS "${_hvl_torch_lib}" NO_DEFAULT_PATH)
        endif()
      endif()
    endif()
    if(HVL_WITH_TORCH STREQUAL "ON")
      find_package(Torch REQUIRED)
    else()
      find_package(Torch QUIET)
    endif()
    if(Torch_FOUND)
      set(HVL_HAVE_TORCH ON)
      # Torch_VERSION is set by TorchConfigVersion.cmake (e.g. 1.13.0 or 2.13.0).
      set(HVL_TORCH_VERSION "${Torch_VERSION}")
      message(STATUS "horovodlite: LibTorch ${HVL_TORCH_VERSION} from ${Torch_DIR}")
      foreach(_hvl_lib IN LISTS TORCH_LIBRARIES)
        if(_hvl_lib MATCHES "/lib(c10|torch[a-z_]*)\\.so" AND NOT _hvl_lib MATCHES "^${TORCH_INSTALL_PREFIX}/")
          message(FATAL_ERROR "horovodlite: LibTorch ${Torch_DIR} would link ${_hvl_lib}, which is not its own "
                  "(${TORCH_INSTALL_PREFIX}/lib); clear that cache entry or set it to the matching library")
        endif()
      endforeach()
      if(HVL_TORCH_PYTHON_VERSION)
        string(REGEX MATCH "^[0-9]+\\.[0-9]+" _hvl_a "${HVL_TORCH_VERSION}")
        string(REGEX MATCH "^[0-9]+\\.[0-9]+" _hvl_b "${HVL_TORCH_PYTHON_VERSION}")
        if(NOT _hvl_a STREQUAL _hvl_b)
          message(FATAL_ERROR "horovodlite: LibTorch ${HVL_TORCH_VERSION} (${Torch_DIR}) does not match "
                  "torch ${HVL_TORCH_PYTHON_VERSION} of ${Python_EXECUTABLE}; set Torch_DIR to that torch's "
                  "share/cmake/Torch or pick the interpreter that belongs to this LibTorch")
        endif()
      endif()
    endif()
  endif()
endmacro()
