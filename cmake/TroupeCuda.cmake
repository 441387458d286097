# Decides whether the CUDA part of kernels/ builds. CUDA is optional: on machines without a toolkit
# (or with -DTROUPE_CUDA=OFF) the project builds CPU-only and the GPU tests skip.
set(TROUPE_HAVE_CUDA OFF)
if(TROUPE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    # Ampere and Hopper (H100/H200) unless the user names others: set before enable_language, which
    # would otherwise cache the compiler's own default (sm_75 for CUDA 13; a cache holding that from
    # before is moved too).
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "75")
      set(CMAKE_CUDA_ARCHITECTURES 80 90 CACHE STRING "CUDA architectures" FORCE)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(TROUPE_HAVE_CUDA ON)
    message(STATUS "Troupe: CUDA ${CUDAToolkit_VERSION} found, building the CUDA kernels")
  else()
    message(STATUS "Troupe: no CUDA toolkit found, building CPU-only")
  endif()
else()
  message(STATUS "Troupe: CUDA disabled (TROUPE_CUDA=OFF)")
endif()
