# What ftopt's headers need; shared by our own build and by ftoptConfig.cmake for users.
include(CMakeFindDependencyMacro)
find_dependency(Torch)
find_dependency(Boost 1.71)          # Boost.Hana is header-only: Boost::headers
find_dependency(range-v3)
find_dependency(ZLIB)                # gzip-compressed IDX files (Fashion-MNIST ships them gzipped)
find_dependency(nlohmann_json 3)     # safetensors headers, adapter_config.json
find_dependency(libjpeg-turbo 2)     # the Pipeline's decode_jpeg: libjpeg-turbo::turbojpeg

