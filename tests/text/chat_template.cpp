// Tests for include/ftopt/text/chat_template.hpp: SmolLM2-Instruct's chat template (the Jinja text
// of its GGUF's tokenizer.chat_template), rendered by hand here; transformers' rendering of it on
// the real file: tests/peer/llama.py.
#include <catch2/catch.hpp>

#include <ftopt/text/chat_template.hpp>

using namespace ftopt;

TEST_CASE("chatml: SmolLM2's template, with its default system prompt and the generation prompt", "[text]") {
  CHECK(text::chatml({{"user", "Hi"}}) ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(text::chatml({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}}, false) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello<|im_end|>\n");
  CHECK(text::chatml({{"user", "Hi"}}, true, "") == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}
