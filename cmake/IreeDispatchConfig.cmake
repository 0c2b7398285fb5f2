# find_package(IreeDispatch) entry point. Point CMake here with
# -DIreeDispatch_DIR=/path/to/iree_dispatch/cmake (or CMAKE_PREFIX_PATH=/path/to/iree_dispatch).
# Provides iree_dispatch_add_module(); see IreeDispatch.cmake. A missing Python package or CUDA compiler
# makes the package not found, with the reason, instead of stopping the configure.
set(_IREE_DISPATCH_FROM_FIND_PACKAGE TRUE)
include("${CMAKE_CURRENT_LIST_DIR}/IreeDispatch.cmake")
unset(_IREE_DISPATCH_FROM_FIND_PACKAGE)
