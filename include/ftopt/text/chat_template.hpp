#pragma once
/// text::chatml: a conversation in ChatML, the chat template of SmolLM2-Instruct (its GGUF's
/// tokenizer.chat_template) and of the Qwen2 family, written out as plain strings:
///   <|im_start|>ROLE\nCONTENT<|im_end|>\n   for each message, after a system message with
///   `default_system` when the first message is not one (SmolLM2's template adds its own), and
///   <|im_start|>assistant\n                 at the end with add_generation_prompt.
/// The role markers are added tokens of the vocabulary, so text::ByteLevelBpe keeps them whole.
///
///   auto prompt = ftopt::text::chatml({{"user", "Which section of the BBC is this from? ..."}});

#include <span>
#include <string>
#include <vector>

namespace ftopt::text {

struct ChatMessage {
  std::string role;  ///< "system", "user" or "assistant"
  std::string content;
};

/// SmolLM2-Instruct's default system prompt (its chat template's).
inline constexpr const char* smollm2_system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

inline std::string chatml(std::span<const ChatMessage> messages, bool add_generation_prompt = true,
                          const std::string& default_system = smollm2_system) {
  std::string out;
  if (!messages.empty() && messages.front().role != "system" && !default_system.empty())
    out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}
inline std::string chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true,
                          const std::string& default_system = smollm2_system) {
  return chatml(std::span<const ChatMessage>(messages), add_generation_prompt, default_system);
}

} // namespace ftopt::text
