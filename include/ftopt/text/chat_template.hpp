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
/// text::gemma_chat: Gemma 3's instruction template (that of google/gemma-3-*-it), for base models
/// that ship none (Gemma 3 270M): <bos>, then <start_of_turn>ROLE\nCONTENT<end_of_turn>\n per
/// turn, "assistant" written "model", the content trimmed, a system message's text and a blank
/// line put before the first user turn's content; <start_of_turn>model\n with
/// add_generation_prompt. text::ChatTemplate picks one of the two by name ("chatml", "gemma3") or
/// from the template text a model ships, and knows the token that ends a turn.
///
///   auto prompt = ftopt::text::chatml({{"user", "Which section of the BBC is this from? ..."}});
///   auto qwen = ftopt::text::chatml(messages, true, ftopt::text::chatml_default_system(file.string("tokenizer.chat_template")));

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <utility>
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

/// Gemma 3's instruction template, as its Jinja renders a conversation of text: roles must
/// alternate user, assistant, user, ... after an optional system message (an error naming the
/// message that breaks the order, as the template raises); each content trimmed of leading and
/// trailing white space (ASCII: Jinja's trim strips Unicode's too).
inline std::string gemma_chat(std::span<const ChatMessage> messages, bool add_generation_prompt = true) {
  constexpr std::string_view space = " \t\n\r\f\v";
  auto trim = [&](std::string_view s) {
    const auto first = s.find_first_not_of(space);
    return first == std::string_view::npos ? std::string_view() : s.substr(first, s.find_last_not_of(space) - first + 1);
  };
  std::string out = "<bos>", prefix;
  if (!messages.empty() && messages.front().role == "system") {
    prefix = messages.front().content + "\n\n";
    messages = messages.subspan(1);
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    check((m.role == "user") == (i % 2 == 0) && (m.role == "user" || m.role == "assistant"),
          "text::gemma_chat: message ", i, " is a '", m.role, "' turn; Gemma 3's template takes user and assistant "
          "turns in turn, starting with user, after an optional system message");
    out += "<start_of_turn>" + std::string(m.role == "assistant" ? "model" : "user") + "\n" + (i == 0 ? prefix : "");
    out += trim(m.content);
    out += "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

inline std::string gemma_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) {
  return gemma_chat(std::span<const ChatMessage>(messages), add_generation_prompt);
}

/// The chat templates ftopt renders.
class ChatTemplate {
 public:
  enum class Kind { ChatMl, Gemma3 };
  static constexpr std::array<std::string_view, 2> names = {"chatml", "gemma3"};

  /// By name ("chatml", "gemma3"); another is an error naming it and `where`, with the list.
  static ChatTemplate named(std::string_view name, std::string_view where = "the chat template",
                            std::string default_system = "") {
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return ChatTemplate(static_cast<Kind>(i), std::move(default_system));
    fail(where, ": no chat template named '", name, "'; ftopt renders chatml and gemma3");
  }

  /// The one a model ships (tokenizer.chat_template): ChatML where it writes <|im_start|> (its
  /// default system prompt read from it), Gemma's where it writes <start_of_turn>; another is an
  /// error naming `where` and saying to choose one by name.
  static ChatTemplate of(std::string_view chat_template, std::string_view where = "the chat template") {
    if (chat_template.find("<|im_start|>") != std::string_view::npos)
      return ChatTemplate(Kind::ChatMl, chatml_default_system(chat_template, where));
    check(chat_template.find("<start_of_turn>") != std::string_view::npos, where, " is neither ChatML (<|im_start|>) "
          "nor Gemma's (<start_of_turn>), the templates ftopt renders; choose one by name");
    return ChatTemplate(Kind::Gemma3, "");
  }

  Kind kind() const { return kind_; }
  std::string_view name() const { return names[static_cast<std::size_t>(kind_)]; }
  /// The token that closes a turn, which a model's answer ends with.
  std::string_view end_of_turn() const { return kind_ == Kind::ChatMl ? "<|im_end|>" : "<end_of_turn>"; }

  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const {
    return kind_ == Kind::ChatMl ? chatml(messages, add_generation_prompt, default_system_)
                                 : gemma_chat(messages, add_generation_prompt);
  }
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const {
    return render(std::span<const ChatMessage>(messages), add_generation_prompt);
  }

 private:
  ChatTemplate(Kind kind, std::string default_system) : kind_(kind), default_system_(std::move(default_system)) {}
  Kind kind_;
  std::string default_system_;  ///< ChatML's, written when a conversation has no system message
};

} // namespace ftopt::text
