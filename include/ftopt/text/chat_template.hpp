#pragma once
/// text::chatml: a conversation in ChatML, the chat template of SmolLM2-Instruct (its GGUF's
/// tokenizer.chat_template) and of the Qwen2 family, written out as plain strings:
///   <|im_start|>ROLE\nCONTENT<|im_end|>\n   for each message, after a system message with
///   `default_system` when the first message is not one (SmolLM2's template adds its own), and
///   <|im_start|>assistant\n                 at the end with add_generation_prompt.
/// The role markers are added tokens of the vocabulary, so text::ByteLevelBpe keeps them whole.
///
/// text::chatml_default_system reads that system prompt from the template a model ships
/// (tokenizer.chat_template in its GGUF or tokenizer_config.json).
///
///   auto prompt = ftopt::text::chatml({{"user", "Which section of the BBC is this from? ..."}});
///   auto qwen = ftopt::text::chatml(messages, true, ftopt::text::chatml_default_system(file.string("tokenizer.chat_template")));

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ftopt/error.hpp>

namespace ftopt::text {

struct ChatMessage {
  std::string role;  ///< "system", "user" or "assistant"
  std::string content;
};

/// SmolLM2-Instruct's default system prompt (its chat template's).
inline constexpr const char* smollm2_system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

/// The system prompt a ChatML template writes when the conversation starts without one: the text
/// of a string literal between "<|im_start|>system" plus a newline (written out, or escaped as
/// \n) and "<|im_end|>", with no expression in between (SmolLM2's and Qwen2's templates; Jinja's
/// escapes \n, \t, \\, \' and \" undone). "" for a ChatML template without one; a template that
/// is not ChatML (no "<|im_start|>") is an error naming `where`.
inline std::string chatml_default_system(std::string_view chat_template, std::string_view where = "the chat template") {
  ftopt::check(chat_template.find("<|im_start|>") != std::string_view::npos, where,
                " is not a ChatML template (it writes no <|im_start|>); ftopt renders ChatML only");
  constexpr std::string_view start = "<|im_start|>system", end = "<|im_end|>";
  for (auto at = chat_template.find(start); at != std::string_view::npos; at = chat_template.find(start, at + 1)) {
    auto rest = chat_template.substr(at + start.size());
    if (rest.starts_with("\\n")) rest.remove_prefix(2);
    else if (rest.starts_with("\n")) rest.remove_prefix(1);
    else continue;
    const auto stop = rest.find(end);
    if (stop == std::string_view::npos) continue;
    const auto text = rest.substr(0, stop);
    std::string out;
    bool literal = true;  // an unescaped quote or a brace: the literal ends in an expression
    for (std::size_t i = 0; i < text.size() && literal; ++i) {
      if (text[i] == '\\' && i + 1 < text.size()) {
        const char c = text[++i];
        out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
      } else {
        literal = std::string_view("'\"{}").find(text[i]) == std::string_view::npos;
        out += text[i];
      }
    }
    if (literal) return out;
  }
  return "";
}

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
