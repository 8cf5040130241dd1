# Gloo detection (HVL_WITH_GLOO = AUTO, ON or OFF): Debian's libgloo-dev (CMake
# package `Gloo`, imported target `gloo`, TCP transport).
#
# Sets HVL_HAVE_GLOO (ON when the Gloo transport is built: src/transport/gloo_*).
set(HVL_HAVE_GLOO OFF)
if(NOT HVL_WITH_GLOO MATCHES "^(ON|OFF|AUTO)$")
  message(FATAL_ERROR "HVL_WITH_GLOO must be ON, OFF or AUTO, not '${HVL_WITH_GLOO}'")
endif()
if(NOT HVL_WITH_GLOO STREQUAL "OFF")
  find_package(Gloo CONFIG QUIET)
  if(Gloo_FOUND AND TARGET gloo)
    set(HVL_HAVE_GLOO ON)
  elseif(HVL_WITH_GLOO STREQUAL "ON")
    message(FATAL_ERROR "HVL_WITH_GLOO=ON but Gloo was not found (install libgloo-dev or set Gloo_DIR)")
  else()
    message(STATUS "horovodlite: Gloo transport off (Gloo not found; apt-get install libgloo-dev)")
  endif()
endif()
