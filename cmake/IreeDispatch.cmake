# iree_dispatch for CMake: build hand-written CUDA kernels into IREE .vmfb modules.
#
#   include(/path/to/iree_dispatch/cmake/IreeDispatch.cmake)   # or find_package(IreeDispatch)
#   iree_dispatch_add_module(NAME <target> SPEC <spec.toml>
#                            [SOURCES <a.cu>...] [ARCHS <80 90 | sm_80 sm_90>...]
#                            [PROGRAM <program.mlir>] [OUTPUT_DIR <dir>]
#                            [OBJECTS cubin|ptx|fatbin] [EMBED_OBJECTS]
#                            [OUTPUT_VMFB <var>] [OUTPUT_MLIR <var>] [EXCLUDE_FROM_ALL])
#
# EMBED_OBJECTS writes the kernels' object bytes into the .mlir, so that it compiles with plain
# iree-compile anywhere, without the <module>.objects/ folder.
#
# Each module is one `iree-dispatch build` run (the package's command line, so CMake and the
# CLI can't disagree). Including this file checks, at configure time, that the Python of
# IREE_DISPATCH_PYTHON imports iree_dispatch and the IREE compiler, and that the CUDA compiler
# of IREE_DISPATCH_TOOLCHAIN is there.
#
# Cache variables:
#   IREE_DISPATCH_PYTHON  the Python that has iree_dispatch installed (default: the .venv of
#                         this checkout if there is one, else the Python 3 that CMake finds)
#   IREE_DISPATCH_TOOLCHAIN  auto (default), nvcc or nvrtc: as `iree-dispatch build --toolchain`;
#                         auto is nvcc where one is found, else NVRTC (pip install iree-dispatch[nvrtc])
#   IREE_DISPATCH_NVCC    nvcc for every build with nvcc (default: what the package finds: $NVCC,
#                         PATH, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, the nvidia-cuda-nvcc
#                         wheel); fixed at configure time so a later build from another shell
#                         uses the same one

include_guard(GLOBAL)

if(CMAKE_VERSION VERSION_LESS 3.21)
  # DEPFILE on add_custom_command, for every generator, needs 3.21.
  message(FATAL_ERROR "IreeDispatch.cmake needs CMake 3.21 or newer; this is ${CMAKE_VERSION}")
endif()
# Depfiles of custom commands are translated by CMake for every generator (policy CMP0116);
# set here so that a project with an older cmake_minimum_required gets no policy warning.
cmake_policy(SET CMP0116 NEW)

get_filename_component(_IREE_DISPATCH_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

# Configure-time failures: fatal when included, a not-found result when loaded by find_package
# (which turns it into an error only for REQUIRED).
macro(_iree_dispatch_unavailable)
  string(CONCAT _message ${ARGV})
  if(_IREE_DISPATCH_FROM_FIND_PACKAGE)
    set(IreeDispatch_FOUND FALSE)
    set(IreeDispatch_NOT_FOUND_MESSAGE "${_message}")
    return()
  endif()
  message(FATAL_ERROR "${_message}")
endmacro()

# Runs Python code with IREE_DISPATCH_PYTHON; `_out` gets what it prints, `_err` the message
# it exits with (the code turns expected exceptions into `sys.exit(message)`). It runs where the
# builds run, in the build tree: `python -c` imports from its working directory, and a source
# checkout there must not pass for an installed package.
macro(_iree_dispatch_python code)
  execute_process(
    COMMAND "${IREE_DISPATCH_PYTHON}" -c "${code}"
    WORKING_DIRECTORY "${CMAKE_BINARY_DIR}"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_STRIP_TRAILING_WHITESPACE)
endmacro()

# The Python that has the package.
if(NOT IREE_DISPATCH_PYTHON)
  if(EXISTS "${_IREE_DISPATCH_ROOT}/.venv/bin/python")
    set(_python "${_IREE_DISPATCH_ROOT}/.venv/bin/python")
  elseif(EXISTS "${_IREE_DISPATCH_ROOT}/.venv/Scripts/python.exe")
    set(_python "${_IREE_DISPATCH_ROOT}/.venv/Scripts/python.exe")
  else()
    find_package(Python3 3.11 COMPONENTS Interpreter)
    if(NOT Python3_Interpreter_FOUND)
      _iree_dispatch_unavailable(
        "iree_dispatch: no Python 3.11 or newer found. Install one with the package "
        "(python3 -m venv .venv && .venv/bin/pip install -e '${_IREE_DISPATCH_ROOT}') "
        "or pass -DIREE_DISPATCH_PYTHON=/path/to/python")
    endif()
    set(_python "${Python3_EXECUTABLE}")
  endif()
  set(IREE_DISPATCH_PYTHON "${_python}" CACHE FILEPATH "Python with the iree_dispatch package installed" FORCE)
endif()
if(NOT EXISTS "${IREE_DISPATCH_PYTHON}" OR IS_DIRECTORY "${IREE_DISPATCH_PYTHON}")
  _iree_dispatch_unavailable(
    "iree_dispatch: IREE_DISPATCH_PYTHON=${IREE_DISPATCH_PYTHON} is not a Python executable; "
    "pass -DIREE_DISPATCH_PYTHON=/path/to/python")
endif()

# The package and the IREE compiler it drives. The compiler's path is kept for plain
# iree-compile command lines (tests).
_iree_dispatch_python([=[
import sys
try:
    import iree_dispatch
except ImportError as exc:
    sys.exit(str(exc))
]=])
if(NOT _rc EQUAL 0)
  _iree_dispatch_unavailable(
    "iree_dispatch: ${IREE_DISPATCH_PYTHON} can't import the iree_dispatch package (${_err}). "
    "Install it with `${IREE_DISPATCH_PYTHON} -m pip install -e ${_IREE_DISPATCH_ROOT}`, "
    "or pass -DIREE_DISPATCH_PYTHON=/path/to/python of an environment that has it")
endif()
_iree_dispatch_python([=[
import sys
try:
    from iree.compiler.tools.binaries import find_tool
    print(find_tool("iree-compile"))
except (ImportError, ValueError) as exc:
    sys.exit(str(exc))
]=])
if(NOT _rc EQUAL 0)
  _iree_dispatch_unavailable(
    "iree_dispatch: ${IREE_DISPATCH_PYTHON} has iree_dispatch but no usable IREE compiler (${_err}); "
    "install it with `${IREE_DISPATCH_PYTHON} -m pip install iree-base-compiler==3.13.0`")
endif()
set(IREE_DISPATCH_IREE_COMPILE "${_out}" CACHE INTERNAL "iree-compile of IREE_DISPATCH_PYTHON")

# The CUDA compiler: the toolchain the package would select, fixed at configure time
# (IREE_DISPATCH_NVCC, given or found before, means nvcc unless nvrtc is asked for).
set(IREE_DISPATCH_TOOLCHAIN "auto" CACHE STRING "CUDA compiler of iree_dispatch builds: auto, nvcc or nvrtc")
set_property(CACHE IREE_DISPATCH_TOOLCHAIN PROPERTY STRINGS auto nvcc nvrtc)
if(NOT IREE_DISPATCH_TOOLCHAIN MATCHES "^(auto|nvcc|nvrtc)$")
  _iree_dispatch_unavailable("iree_dispatch: IREE_DISPATCH_TOOLCHAIN=${IREE_DISPATCH_TOOLCHAIN}: use auto, nvcc or nvrtc")
endif()
set(_toolchain "${IREE_DISPATCH_TOOLCHAIN}")
if(IREE_DISPATCH_NVCC AND NOT _toolchain STREQUAL "nvrtc")
  set(_toolchain nvcc)
else()
  # Prints the toolchain's name, then nvcc's path (empty for NVRTC).
  _iree_dispatch_python("
import sys
from iree_dispatch.core.errors import ToolchainError
from iree_dispatch.toolchains import select_toolchain
try:
    toolchain = select_toolchain('${_toolchain}')
except ToolchainError as exc:
    sys.exit(str(exc))
print(toolchain.name)
print(getattr(toolchain, 'nvcc', ''))
")
  if(NOT _rc EQUAL 0)
    _iree_dispatch_unavailable("iree_dispatch: ${_err}; or pass -DIREE_DISPATCH_NVCC=/path/to/nvcc")
  endif()
  string(REPLACE "\n" ";" _found "${_out}")
  list(GET _found 0 _toolchain)
  if(_toolchain STREQUAL "nvcc")
    list(GET _found 1 _nvcc)
    set(IREE_DISPATCH_NVCC "${_nvcc}" CACHE FILEPATH "nvcc used by iree_dispatch builds" FORCE)
  endif()
endif()
if(_toolchain STREQUAL "nvcc")
  if(NOT EXISTS "${IREE_DISPATCH_NVCC}" OR IS_DIRECTORY "${IREE_DISPATCH_NVCC}")
    _iree_dispatch_unavailable(
      "iree_dispatch: IREE_DISPATCH_NVCC=${IREE_DISPATCH_NVCC} is not an nvcc executable; "
      "install the CUDA toolkit or pass -DIREE_DISPATCH_NVCC=/path/to/nvcc")
  endif()
  set(_IREE_DISPATCH_BUILD_ENV "NVCC=${IREE_DISPATCH_NVCC}" CACHE INTERNAL "")
else()
  set(_IREE_DISPATCH_BUILD_ENV "" CACHE INTERNAL "")
endif()
set(_IREE_DISPATCH_TOOLCHAIN_ARGS --toolchain ${_toolchain} CACHE INTERNAL "")
message(STATUS "iree_dispatch: CUDA compiler ${_toolchain} ${IREE_DISPATCH_NVCC}")

# Prints the spec's module name, then its sources (absolute), one a line. Only what CMake needs
# to name outputs and dependencies: the build itself validates the spec and says what is wrong.
set(_IREE_DISPATCH_READ_SPEC [=[
import pathlib, sys, tomllib
spec = pathlib.Path(sys.argv[1])
try:
    data = tomllib.loads(spec.read_text(encoding="utf-8"))
except (OSError, tomllib.TOMLDecodeError) as exc:
    sys.exit(f"can't read spec {spec}: {exc}")
print(data.get("module", {}).get("name", spec.stem))
for kernel in data.get("kernel", []):
    if isinstance(kernel, dict) and isinstance(kernel.get("source"), str):
        print((spec.parent / kernel["source"]).absolute())
]=])

function(iree_dispatch_add_module)
  cmake_parse_arguments(PARSE_ARGV 0 arg "EXCLUDE_FROM_ALL;EMBED_OBJECTS"
    "NAME;SPEC;PROGRAM;OUTPUT_DIR;OUTPUT_VMFB;OUTPUT_MLIR;OBJECTS" "SOURCES;ARCHS")
  set(where "iree_dispatch_add_module(${arg_NAME})")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${where}: unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_NAME OR NOT arg_SPEC)
    message(FATAL_ERROR "iree_dispatch_add_module: NAME and SPEC are required")
  endif()

  # Inputs are relative to this source directory, outputs to this binary directory.
  cmake_path(ABSOLUTE_PATH arg_SPEC NORMALIZE OUTPUT_VARIABLE spec)
  if(NOT EXISTS "${spec}")
    message(FATAL_ERROR "${where}: spec ${spec} does not exist")
  endif()
  set(out_dir "${CMAKE_CURRENT_BINARY_DIR}")
  if(arg_OUTPUT_DIR)
    cmake_path(ABSOLUTE_PATH arg_OUTPUT_DIR BASE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}" NORMALIZE OUTPUT_VARIABLE out_dir)
  endif()

  execute_process(
    COMMAND "${IREE_DISPATCH_PYTHON}" -c "${_IREE_DISPATCH_READ_SPEC}" "${spec}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE listing ERROR_VARIABLE err
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${where}: ${err}")
  endif()
  # A changed spec may name other sources or another module: configure again.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${spec}")
  string(REPLACE "\n" ";" listing "${listing}")
  list(POP_FRONT listing module)
  if(arg_SOURCES)
    set(sources "")
    foreach(source IN LISTS arg_SOURCES)
      cmake_path(ABSOLUTE_PATH source NORMALIZE)
      list(APPEND sources "${source}")
    endforeach()
  else()
    set(sources ${listing})
  endif()
  list(REMOVE_DUPLICATES sources)

  # Named as `iree-dispatch build` names them by default: after the program, else the module.
  set(program "")
  set(program_args "")
  set(base "${module}")
  if(arg_PROGRAM)
    cmake_path(ABSOLUTE_PATH arg_PROGRAM NORMALIZE OUTPUT_VARIABLE program)
    cmake_path(GET program STEM base)
    set(program_args --program "${program}")
  endif()
  set(vmfb "${out_dir}/${base}.vmfb")
  set(mlir "${out_dir}/${base}.mlir")
  set(depfile "${out_dir}/${base}.vmfb.d")
  list(JOIN arg_ARCHS "," archs)
  set(arch_args "")
  if(archs)
    set(arch_args --arch "${archs}")
  endif()
  set(object_args "")
  if(arg_OBJECTS)
    if(NOT arg_OBJECTS MATCHES "^(cubin|ptx|fatbin)$")
      message(FATAL_ERROR "${where}: OBJECTS ${arg_OBJECTS}: use cubin, ptx or fatbin")
    endif()
    set(object_args --objects "${arg_OBJECTS}")
  endif()
  if(arg_EMBED_OBJECTS)
    list(APPEND object_args --embed-objects)
  endif()

  # Modules of one spec in one folder share its `<module>.objects/` folder, which each build
  # replaces: they are built one after the other, and must agree on what goes in it.
  set(objects_dir "${out_dir}/${module}.objects")
  string(MD5 key "${objects_dir}")
  get_property(previous GLOBAL PROPERTY "_iree_dispatch_objects_${key}")
  set(after "")
  if(previous)
    list(GET previous 0 previous_target)
    list(GET previous 1 previous_vmfb)
    list(GET previous 2 previous_inputs)
    if(NOT previous_inputs STREQUAL "${spec}|${archs}|${arg_OBJECTS}")
      message(FATAL_ERROR
        "${where}: module '${module}' would write ${objects_dir}/, as target ${previous_target} does, "
        "from another spec or for other ARCHS or OBJECTS; give one of them its own OUTPUT_DIR")
    endif()
    set(after "${previous_vmfb}")
  endif()
  set_property(GLOBAL PROPERTY "_iree_dispatch_objects_${key}" "${arg_NAME};${vmfb};${spec}|${archs}|${arg_OBJECTS}")

  add_custom_command(
    OUTPUT "${vmfb}" "${mlir}"
    COMMAND "${CMAKE_COMMAND}" -E env ${_IREE_DISPATCH_BUILD_ENV}
            "${IREE_DISPATCH_PYTHON}" -m iree_dispatch.cli build "${spec}"
            -o "${vmfb}" --emit-mlir "${mlir}" --depfile "${depfile}" ${_IREE_DISPATCH_TOOLCHAIN_ARGS}
            ${arch_args} ${object_args} ${program_args}
    # Headers come from the depfile, written by the previous build.
    DEPENDS "${spec}" ${sources} ${program} ${after}
    DEPFILE "${depfile}"
    COMMENT "iree-dispatch: building ${base}.vmfb (${arg_NAME})"
    VERBATIM)
  set(all ALL)
  if(arg_EXCLUDE_FROM_ALL)
    set(all "")
  endif()
  add_custom_target(${arg_NAME} ${all} DEPENDS "${vmfb}" "${mlir}" SOURCES "${spec}" ${sources} ${program})
  if(after)
    # Make generators need the order between targets too, not only between files.
    add_dependencies(${arg_NAME} ${previous_target})
  endif()
  set_property(TARGET ${arg_NAME} APPEND PROPERTY ADDITIONAL_CLEAN_FILES "${objects_dir}" "${depfile}")

  if(arg_OUTPUT_VMFB)
    set(${arg_OUTPUT_VMFB} "${vmfb}" PARENT_SCOPE)
  endif()
  if(arg_OUTPUT_MLIR)
    set(${arg_OUTPUT_MLIR} "${mlir}" PARENT_SCOPE)
  endif()
endfunction()
