// horovodlite's version, written here and nowhere else: CMake (the project
// VERSION, find_package(horovodlite VERSION), the libraries' SOVERSION), setup.py
// and horovodlite.__version__ all read these three numbers.
#pragma once

#define HVL_VERSION_MAJOR 0
#define HVL_VERSION_MINOR 1
#define HVL_VERSION_PATCH 0

#define HVL_VERSION_STR_(x) #x
#define HVL_VERSION_STR(x) HVL_VERSION_STR_(x)
// "0.1.0"
#define HVL_VERSION_STRING \
  HVL_VERSION_STR(HVL_VERSION_MAJOR) "." HVL_VERSION_STR(HVL_VERSION_MINOR) "." HVL_VERSION_STR(HVL_VERSION_PATCH)
// For #if: 10000 * major + 100 * minor + patch.
#define HVL_VERSION (HVL_VERSION_MAJOR * 10000 + HVL_VERSION_MINOR * 100 + HVL_VERSION_PATCH)
