# Finds the C++ Actor Framework 0.17 (Debian's libcaf-dev ships no CMake config).
#
#   find_package(CAF 0.17 REQUIRED COMPONENTS core io)
#
# Creates CAF::core, CAF::io and CAF::openssl for the components found; io depends on core and
# openssl on io. Sets CAF_FOUND, CAF_VERSION and CAF_INCLUDE_DIR. Hint: CAF_ROOT.

set(_troupe_caf_components ${CAF_FIND_COMPONENTS})
if(NOT _troupe_caf_components)
  set(_troupe_caf_components core)
endif()
# A component implies the ones it links against.
if("openssl" IN_LIST _troupe_caf_components)
  list(APPEND _troupe_caf_components io)
endif()
list(APPEND _troupe_caf_components core)
list(REMOVE_DUPLICATES _troupe_caf_components)

find_path(CAF_INCLUDE_DIR NAMES caf/config.hpp PATH_SUFFIXES include)
mark_as_advanced(CAF_INCLUDE_DIR)

# caf/config.hpp holds "#define CAF_VERSION 1706" for 0.17.6.
if(CAF_INCLUDE_DIR)
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _troupe_caf_line REGEX "^#define CAF_VERSION [0-9]+")
  if(_troupe_caf_line MATCHES "CAF_VERSION ([0-9]+)")
    set(_v "${CMAKE_MATCH_1}")
    math(EXPR _major "${_v} / 10000")
    math(EXPR _minor "${_v} / 100 % 100")
    math(EXPR _patch "${_v} % 100")
    set(CAF_VERSION "${_major}.${_minor}.${_patch}")
  endif()
endif()

foreach(_c IN LISTS _troupe_caf_components)
  string(TOUPPER "${_c}" _C)
  find_library(CAF_${_C}_LIBRARY NAMES caf_${_c} PATH_SUFFIXES lib lib64)
  mark_as_advanced(CAF_${_C}_LIBRARY)
  if(CAF_${_C}_LIBRARY AND CAF_INCLUDE_DIR)
    set(CAF_${_c}_FOUND TRUE)
  else()
    set(CAF_${_c}_FOUND FALSE)
  endif()
endforeach()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF REQUIRED_VARS CAF_INCLUDE_DIR VERSION_VAR CAF_VERSION HANDLE_COMPONENTS)

if(CAF_FOUND)
  find_package(Threads REQUIRED)
  set(_troupe_caf_core_deps Threads::Threads)
  set(_troupe_caf_io_deps CAF::core)
  set(_troupe_caf_openssl_deps CAF::io)
  foreach(_c core io openssl)
    string(TOUPPER "${_c}" _C)
    if(CAF_${_c}_FOUND AND NOT TARGET CAF::${_c})
      add_library(CAF::${_c} UNKNOWN IMPORTED)
      set_target_properties(CAF::${_c} PROPERTIES
        IMPORTED_LOCATION "${CAF_${_C}_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
        INTERFACE_LINK_LIBRARIES "${_troupe_caf_${_c}_deps}")
    endif()
  endforeach()
endif()
