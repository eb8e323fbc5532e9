// Tests for include/ftopt/text/chat_template.hpp: SmolLM2-Instruct's chat template (the Jinja text
// of its GGUF's tokenizer.chat_template), rendered by hand here; transformers' rendering of it on
// the real file: tests/peer/llama.py.
#include <catch2/catch.hpp>

#include <ftopt/text/chat_template.hpp>
#include <ftopt/text/gguf_tokenizer.hpp>

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

TEST_CASE("chatml_default_system: the system prompt a ChatML template writes when there is none", "[text]") {
  // SmolLM2-Instruct's template as its GGUF holds it (a written-out newline after "system").
  const std::string smollm2 =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  CHECK(text::chatml_default_system(smollm2) == text::smollm2_system);
  // Qwen2.5's (the branches without tools, Jinja's \n escapes as the file has them): the first two
  // "<|im_start|>system" literals are followed by an expression, the third by the prompt.
  const std::string qwen =
      "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
      "        {{- messages[0]['content'] }}\n{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n"
      "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
      "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
      "assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n";
  CHECK(text::chatml_default_system(qwen) == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  CHECK(text::chatml_default_system(R"({{ '<|im_start|>system\nLine one\nsaid \"hi\"\tok<|im_end|>' }})") ==
        "Line one\nsaid \"hi\"\tok");
  // ChatML that writes no system prompt of its own
  CHECK(text::chatml_default_system("{{ '<|im_start|>' + message['role'] + '\\n' }}").empty());
  CHECK_THROWS_WITH(text::chatml_default_system("{{ bos_token }}<start_of_turn>user\n", "gemma.gguf's chat template"),
                    Catch::Contains("gemma.gguf's chat template is not a ChatML template"));
}

TEST_CASE("gemma_chat: Gemma 3's instruction template, its system prefix, trimmed turns and alternating roles",
          "[text]") {
  // The template's own output for these conversations, written out (tests/peer/families.py renders
  // the same with transformers' apply_chat_template).
  CHECK(text::gemma_chat({{"user", "Hi"}}) == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  CHECK(text::gemma_chat({{"system", "Be brief."}, {"user", "  Hi \n"}, {"assistant", "Hello\n"}}, false) ==
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n");
  CHECK(text::gemma_chat(std::vector<text::ChatMessage>{}, true) == "<bos><start_of_turn>model\n");
  CHECK_THROWS_WITH(text::gemma_chat({{"user", "a"}, {"user", "b"}}),
                    Catch::Contains("message 1 is a 'user' turn; Gemma 3's template takes user and assistant turns in "
                                    "turn"));
  CHECK_THROWS_WITH(text::gemma_chat({{"assistant", "a"}}), Catch::Contains("message 0 is a 'assistant' turn"));
  CHECK_THROWS_WITH(text::gemma_chat({{"user", "a"}, {"tool", "b"}}), Catch::Contains("message 1 is a 'tool' turn"));
}

TEST_CASE("ChatTemplate: by name or from the template a model ships, and the token that ends a turn", "[text]") {
  const auto gemma = text::ChatTemplate::named("gemma3");
  CHECK(gemma.end_of_turn() == "<end_of_turn>");
  CHECK(gemma.render({{"user", "Hi"}}) == text::gemma_chat({{"user", "Hi"}}));
  const auto chatml = text::ChatTemplate::named("chatml", "--chat-template", "Sys");
  CHECK(chatml.end_of_turn() == "<|im_end|>");
  CHECK(chatml.render({{"user", "Hi"}}) == text::chatml({{"user", "Hi"}}, true, "Sys"));
  const auto shipped = text::ChatTemplate::of("{{ '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}");
  CHECK(shipped.kind() == text::ChatTemplate::Kind::ChatMl);
  CHECK(shipped.render({{"user", "Hi"}}, false) == "<|im_start|>system\nYou are Qwen.<|im_end|>\n"
                                                   "<|im_start|>user\nHi<|im_end|>\n");
  CHECK(text::ChatTemplate::of("{{ bos_token }}{{ '<start_of_turn>' + role }}").kind() ==
        text::ChatTemplate::Kind::Gemma3);
  CHECK_THROWS_WITH(text::ChatTemplate::named("llama3", "--chat-template"),
                    Catch::Contains("--chat-template: no chat template named 'llama3'; ftopt renders chatml and gemma3"));
  CHECK_THROWS_WITH(text::ChatTemplate::of("{{ '[INST] ' + message['content'] + ' [/INST]' }}", "m.gguf's template"),
                    Catch::Contains("m.gguf's template is neither ChatML (<|im_start|>) nor Gemma's (<start_of_turn>)"));
}
