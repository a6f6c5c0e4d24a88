# Finds the LibTorch bundled in the pinned PyPI torch wheel (.venv at the repository
# root), not Debian's libtorch-dev 1.13. See ../shared/design/LIBTORCH.md for the traps.
set(DEVICERACE_VENV "${PROJECT_SOURCE_DIR}/.venv" CACHE PATH "virtualenv holding the torch wheel")
set(DEVICERACE_TORCH_VERSION 2.11 CACHE STRING "LibTorch version to build against")

if(NOT Torch_DIR)
    find_program(DEVICERACE_PYTHON NAMES python3 python
        HINTS "${DEVICERACE_VENV}/bin" NO_DEFAULT_PATH)
    if(NOT DEVICERACE_PYTHON)
        find_program(DEVICERACE_PYTHON NAMES python3 python)
    endif()
    execute_process(
        COMMAND "${DEVICERACE_PYTHON}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
        OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
        RESULT_VARIABLE _torch_rc ERROR_QUIET)
    if(NOT _torch_rc EQUAL 0 OR NOT _torch_prefix)
        message(FATAL_ERROR "No torch wheel found through ${DEVICERACE_PYTHON}. Run scripts/setup first "
                            "(it installs torch==2.11.0 into ${DEVICERACE_VENV}).")
    endif()
    set(Torch_DIR "${_torch_prefix}/Torch")
    set(Python_EXECUTABLE "${DEVICERACE_PYTHON}")
endif()

# The wheel is a CUDA build: its CMake files enable the CUDA language and need a toolkit
# at configure time (no GPU or driver needed).
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
    set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
# CMake 3.25 cannot map C++20 onto CUDA; the GPU-probe try_run then fails (pytorch#104237).
set(CMAKE_CUDA_STANDARD 17)
if(NOT TORCH_CUDA_ARCH_LIST)
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
endif()
find_package(CUDAToolkit QUIET)
# The wheels ship no libcuda stub; torch loads the driver itself at run time.
if(CUDAToolkit_FOUND AND NOT TARGET CUDA::cuda_driver)
    add_library(CUDA::cuda_driver INTERFACE IMPORTED)
endif()

find_package(Torch ${DEVICERACE_TORCH_VERSION} REQUIRED CONFIG
    PATHS "${Torch_DIR}" NO_DEFAULT_PATH)
get_filename_component(DEVICERACE_TORCH_LIBDIR "${TORCH_INSTALL_PREFIX}/lib" ABSOLUTE)
message(STATUS "DeviceRace: LibTorch ${Torch_VERSION} from ${DEVICERACE_TORCH_LIBDIR}")

# Installs (and the .deb) carry the LibTorch and CUDA libraries the programs load into
# lib/devicerace, so they run where there is no torch wheel (packaging/CMakeLists.txt). Off:
# installed programs point at this build's wheel, as the build tree does.
option(DEVICERACE_BUNDLE_TORCH "Install the LibTorch/CUDA libraries into lib/devicerace" ON)

# Executables find the wheel's libraries through their RUNPATH; the wheel's own
# libraries find the nvidia/* packages through their DT_RPATH. Installed and bundled: the
# libraries sit beside the engine in lib/devicerace ($ORIGIN for the engine, $ORIGIN/../lib/
# devicerace for the programs), and the wheel's libraries find each other through their own
# $ORIGIN.
function(devicerace_torch_runpath target)
    set_property(TARGET ${target} APPEND PROPERTY BUILD_RPATH "${DEVICERACE_TORCH_LIBDIR}")
    if(DEVICERACE_BUNDLE_TORCH)
        set_property(TARGET ${target} APPEND PROPERTY INSTALL_RPATH "$ORIGIN")
    else()
        set_property(TARGET ${target} APPEND PROPERTY INSTALL_RPATH "${DEVICERACE_TORCH_LIBDIR}")
    endif()
    target_link_options(${target} PRIVATE "LINKER:--enable-new-dtags")
endfunction()
