# What ftopt's headers need; shared by our own build and by ftoptConfig.cmake for users.
include(CMakeFindDependencyMacro)
# TorchConfig.cmake finds its c10 with find_library(c10 PATHS <its own lib folder>), which
# searches the system's folders first: where Debian's libtorch-dev is installed beside a pip
# wheel, a program that calls no c10 function itself would link Debian's libc10 and abort at
# start. Point it at the c10 beside the Torch package being used.
if(DEFINED Torch_DIR)
  get_filename_component(ftopt_torch_lib "${Torch_DIR}/../../../lib" ABSOLUTE)
  if(EXISTS "${ftopt_torch_lib}/libc10.so" AND NOT "${c10_LIBRARY}" STREQUAL "${ftopt_torch_lib}/libc10.so")
    set(c10_LIBRARY "${ftopt_torch_lib}/libc10.so" CACHE FILEPATH "LibTorch's c10, beside the Torch package used" FORCE)
  endif()
endif()
find_dependency(Torch)
# ftopt's own CPU kernels (the 8-bit optimizer step, NF4 dequantization, attention's small
# products) spread over LibTorch's intra-op threads with at::parallel_for, which is inline in
# ATen's headers: where LibTorch threads with OpenMP (ATen/Config.h, AT_PARALLEL_OPENMP; the pip
# wheel and Debian's both do), it runs on more than the calling thread only in code compiled with
# OpenMP. The flag links the OpenMP runtime LibTorch already loads (one libgomp.so.1 per process).
find_file(FTOPT_ATEN_CONFIG ATen/Config.h PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
if(FTOPT_ATEN_CONFIG)
  file(STRINGS ${FTOPT_ATEN_CONFIG} ftopt_aten_openmp REGEX "define AT_PARALLEL_OPENMP 1")
  if(ftopt_aten_openmp)
    find_dependency(OpenMP)
  endif()
endif()
find_dependency(Boost 1.71)          # Boost.Hana is header-only: Boost::headers
find_dependency(range-v3)
find_dependency(ZLIB)                # gzip-compressed IDX files (Fashion-MNIST ships them gzipped)
find_dependency(nlohmann_json 3)     # safetensors headers, adapter_config.json
find_dependency(libjpeg-turbo 2)     # the Pipeline's decode_jpeg: libjpeg-turbo::turbojpeg
find_dependency(ICU COMPONENTS uc)   # the tokenizers' Unicode classes and normalization: ICU::uc

