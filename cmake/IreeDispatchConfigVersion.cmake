# Version of the iree_dispatch checkout this file lives in, read from its pyproject.toml so
# there is one place to change it. Compatible: the same major version, and before 1.0 the
# same minor version too.
file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/../pyproject.toml" PACKAGE_VERSION REGEX "^version = \"[^\"]+\"$" LIMIT_COUNT 1)
string(REGEX REPLACE "^version = \"([^\"]+)\"$" "\\1" PACKAGE_VERSION "${PACKAGE_VERSION}")
set(PACKAGE_VERSION_COMPATIBLE TRUE)
if(PACKAGE_FIND_VERSION)
  string(REGEX MATCH "^0\\.[0-9]+|^[1-9][0-9]*" _ours "${PACKAGE_VERSION}")
  string(REGEX MATCH "^0\\.[0-9]+|^[1-9][0-9]*" _wanted "${PACKAGE_FIND_VERSION}")
  if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION OR NOT _ours STREQUAL _wanted)
    set(PACKAGE_VERSION_COMPATIBLE FALSE)
  elseif(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
