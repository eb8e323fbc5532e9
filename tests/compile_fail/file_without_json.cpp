// Must not compile: a file function called where nlohmann's JSON is only declared (<ftopt.hpp>
// leaves <ftopt/json.hpp> out).
#include <ftopt.hpp>

int main() {
  ftopt::models::Mlp model({.in = 4, .hidden = {4}, .out = 2});
  ftopt::weights::save(*model, "mlp.safetensors");
}
