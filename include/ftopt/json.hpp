#pragma once
/// The JSON library ftopt's file functions read and write with: nlohmann::json, whole.
///
/// Include it in a source file that calls a file function: weights::load/save/load_file/
/// save_file (for safetensors), load_safetensors/save_safetensors, peft::save_adapter/
/// load_adapter/lora_config/ia3_config/vera_config, quant::save_int8/load_int8. Without it such a
/// call stops compiling with one sentence that names this header.
///
/// <ftopt.hpp> and the file headers declare nlohmann::json only (json_fwd.hpp): the whole
/// header compiles JSON's parser into every TU that includes it, whether or not the TU reads a
/// file, a measurable share of g++'s time and memory (scripts/tu_cost.sh; docs/build.md).

#include <nlohmann/json.hpp>
