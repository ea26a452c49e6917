# Native dependencies, each located through the Python environment that pip installed them into
# (requirements.txt pins them; docs/dependencies.md says why each source was chosen).
#
#   Python + pybind11  torch's bundled pybind11 (torch/include/pybind11), never pip's or Debian's
#   LibTorch           the torch==2.13.0 CPU wheel (torch/include, torch/lib)
#   Z3                 PyPI z3-solver (site-packages/z3/include, z3/lib/libz3.so)
#   oneDNN             PyPI onednn-devel-cpu-gomp 2023.2.0 (v3.2, GNU OpenMP runtime) in sys.prefix
find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)

function(_verifuse_py out code)
  execute_process(COMMAND "${Python_EXECUTABLE}" -c "${code}"
                  OUTPUT_VARIABLE value OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "verifuse: could not run python to locate a dependency: ${code}")
  endif()
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

# --- LibTorch -------------------------------------------------------------------------------------
_verifuse_py(TORCH_DIR "import torch, os; print(os.path.dirname(torch.__file__))")
_verifuse_py(TORCH_VERSION "import torch; print(torch.__version__)")
_verifuse_py(TORCH_CXX11_ABI "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))")
if(NOT TORCH_VERSION MATCHES "^2\\.13\\.0")
  message(WARNING "verifuse is pinned to torch==2.13.0; found ${TORCH_VERSION}")
endif()
message(STATUS "verifuse: torch ${TORCH_VERSION} at ${TORCH_DIR} (cxx11 abi ${TORCH_CXX11_ABI})")
add_library(verifuse_libtorch INTERFACE)
# NOTE: torch/include also carries oneDNN 3.12 headers (dnnl.hpp); only targets that link this
# interface see them, and kernels/ never does.
target_include_directories(verifuse_libtorch SYSTEM INTERFACE
  "${TORCH_DIR}/include" "${TORCH_DIR}/include/torch/csrc/api/include")
target_compile_definitions(verifuse_libtorch INTERFACE _GLIBCXX_USE_CXX11_ABI=${TORCH_CXX11_ABI})
target_link_libraries(verifuse_libtorch INTERFACE
  "${TORCH_DIR}/lib/libtorch_cpu.so" "${TORCH_DIR}/lib/libc10.so" "${TORCH_DIR}/lib/libtorch.so")
target_link_options(verifuse_libtorch INTERFACE "-Wl,-rpath,${TORCH_DIR}/lib")
# The tensor casters live in libtorch_python, which TorchConfig.cmake omits.
add_library(verifuse_libtorch_python INTERFACE)
target_link_libraries(verifuse_libtorch_python INTERFACE verifuse_libtorch
  "${TORCH_DIR}/lib/libtorch_python.so")

# --- Z3 -------------------------------------------------------------------------------------------
_verifuse_py(Z3_DIR "import z3, os; print(os.path.dirname(z3.__file__))")
_verifuse_py(Z3_VERSION "import z3; print(z3.get_version_string())")
find_library(VERIFUSE_Z3_LIB NAMES z3 PATHS "${Z3_DIR}/lib" NO_DEFAULT_PATH REQUIRED)
message(STATUS "verifuse: z3 ${Z3_VERSION} at ${Z3_DIR}")
add_library(verifuse_z3 INTERFACE)
# Listed before system dirs, so Debian's /usr/include/z3++.h (4.8.12) is never picked up.
target_include_directories(verifuse_z3 INTERFACE "${Z3_DIR}/include")
target_link_libraries(verifuse_z3 INTERFACE "${VERIFUSE_Z3_LIB}")
target_link_options(verifuse_z3 INTERFACE "-Wl,-rpath,${Z3_DIR}/lib")
target_compile_definitions(verifuse_z3 INTERFACE VERIFUSE_Z3_VERSION="${Z3_VERSION}")

# --- oneDNN ---------------------------------------------------------------------------------------
_verifuse_py(PY_PREFIX "import sys; print(sys.prefix)")
find_path(VERIFUSE_DNNL_INCLUDE dnnl.hpp PATHS "${PY_PREFIX}/include" NO_DEFAULT_PATH REQUIRED)
find_library(VERIFUSE_DNNL_LIB NAMES dnnl PATHS "${PY_PREFIX}/lib" NO_DEFAULT_PATH REQUIRED)
message(STATUS "verifuse: oneDNN ${VERIFUSE_DNNL_LIB}")
add_library(verifuse_dnnl INTERFACE)
target_include_directories(verifuse_dnnl SYSTEM INTERFACE "${VERIFUSE_DNNL_INCLUDE}")
target_link_libraries(verifuse_dnnl INTERFACE "${VERIFUSE_DNNL_LIB}")
target_link_options(verifuse_dnnl INTERFACE "-Wl,-rpath,${PY_PREFIX}/lib")

# --- pybind11 (torch's bundled copy) --------------------------------------------------------------
set(VERIFUSE_PYBIND11_INCLUDE "${TORCH_DIR}/include")
