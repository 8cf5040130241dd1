# CUDA + NCCL detection (HVL_WITH_CUDA = AUTO, ON or OFF).
#
# Sets, for the rest of the build:
#   HVL_HAVE_CUDA / HVL_HAVE_NCCL  ON when the CUDA backend is built (both or neither:
#                                  the device path needs NCCL)
#   HVL_NCCL_VERSION_CODE          NCCL's version as an int (e.g. 22809 for 2.28.9)
#   target hvl::nccl               NCCL's include dir and library
# and enables the CUDA language (nvcc) with CMAKE_CUDA_ARCHITECTURES defaulting to
# "80;90" (A100, H100/H200); pass -DCMAKE_CUDA_ARCHITECTURES=... to override.
# NCCL is searched for under NCCL_ROOT / NCCL_HOME (CMake or environment) and the
# CUDA toolkit.
set(HVL_HAVE_CUDA OFF)
set(HVL_HAVE_NCCL OFF)
set(HVL_NCCL_VERSION_CODE 0)

function(_hvl_cuda_missing why)
  if(HVL_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "HVL_WITH_CUDA=ON but ${why}")
  endif()
  message(STATUS "horovodlite: CUDA backend off (${why})")
endfunction()

if(NOT HVL_WITH_CUDA MATCHES "^(ON|OFF|AUTO)$")
  message(FATAL_ERROR "HVL_WITH_CUDA must be ON, OFF or AUTO, not '${HVL_WITH_CUDA}'")
endif()

if(NOT HVL_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    _hvl_cuda_missing("the CUDA toolkit was not found (set CUDAToolkit_ROOT)")
  else()
    if(NOT CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE)
      set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
    endif()
    include(CheckLanguage)
    check_language(CUDA)
    find_path(HVL_NCCL_INCLUDE_DIR nccl.h
      HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${NCCL_HOME} $ENV{NCCL_HOME} ${CUDAToolkit_INCLUDE_DIRS}
      PATH_SUFFIXES include)
    find_library(HVL_NCCL_LIBRARY nccl
      HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${NCCL_HOME} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_DIR}
      PATH_SUFFIXES lib lib64)
    if(NOT CMAKE_CUDA_COMPILER)
      _hvl_cuda_missing("no CUDA compiler (nvcc) was found")
    elseif(NOT HVL_NCCL_INCLUDE_DIR OR NOT HVL_NCCL_LIBRARY)
      _hvl_cuda_missing("NCCL was not found (set NCCL_ROOT)")
    else()
      if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
        set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures to build the kernels for")
      endif()
      enable_language(CUDA)
      set(CMAKE_CUDA_STANDARD 17)
      set(CMAKE_CUDA_STANDARD_REQUIRED ON)
      file(STRINGS ${HVL_NCCL_INCLUDE_DIR}/nccl.h _hvl_nccl_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
      foreach(part MAJOR MINOR PATCH)
        string(REGEX REPLACE ".*#define NCCL_${part} ([0-9]+).*" "\\1" _v "${_hvl_nccl_lines}")
        set(_hvl_nccl_${part} ${_v})
      endforeach()
      # NCCL's own NCCL_VERSION(X, Y, Z) formula.
      if(_hvl_nccl_MAJOR LESS_EQUAL 2 AND _hvl_nccl_MINOR LESS_EQUAL 8)
        math(EXPR HVL_NCCL_VERSION_CODE "${_hvl_nccl_MAJOR} * 1000 + ${_hvl_nccl_MINOR} * 100 + ${_hvl_nccl_PATCH}")
      else()
        math(EXPR HVL_NCCL_VERSION_CODE "${_hvl_nccl_MAJOR} * 10000 + ${_hvl_nccl_MINOR} * 100 + ${_hvl_nccl_PATCH}")
      endif()
      add_library(hvl_nccl INTERFACE)
      add_library(hvl::nccl ALIAS hvl_nccl)
      target_include_directories(hvl_nccl INTERFACE ${HVL_NCCL_INCLUDE_DIR})
      target_link_libraries(hvl_nccl INTERFACE ${HVL_NCCL_LIBRARY})
      set(HVL_HAVE_CUDA ON)
      set(HVL_HAVE_NCCL ON)
      message(STATUS "horovodlite: CUDA ${CUDAToolkit_VERSION} (archs ${CMAKE_CUDA_ARCHITECTURES}), "
                     "NCCL ${_hvl_nccl_MAJOR}.${_hvl_nccl_MINOR}.${_hvl_nccl_PATCH} (${HVL_NCCL_LIBRARY})")
    endif()
  endif()
endif()

# Turns on the CUDA path of the LibTorch adapter when the Torch that was found has
# CUDA (a CPU-only LibTorch, like Debian's, cannot compile it).
function(hvl_torch_cuda target)
  if(NOT TARGET ${target})
    return()
  endif()
  if(HVL_HAVE_CUDA AND (CAFFE2_USE_CUDA OR TORCH_CUDA_LIBRARIES))
    target_compile_definitions(${target} PUBLIC HVL_TORCH_CUDA=1)
    target_link_libraries(${target} PUBLIC CUDA::cudart)
    message(STATUS "horovodlite: LibTorch has CUDA: building the adapter's CUDA path")
  elseif(HVL_HAVE_CUDA)
    message(STATUS "horovodlite: LibTorch is CPU-only: the adapter's CUDA path is not built")
  endif()
endfunction()
