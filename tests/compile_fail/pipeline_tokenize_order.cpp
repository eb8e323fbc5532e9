// Must not compile: tokenize() over image samples (it takes texts).
#include <ftopt/pipeline.hpp>
#include <ftopt/pipeline/text.hpp>

int main() {
  using namespace ftopt::pipeline;
  const ftopt::text::BertTokenizer tokenizer(ftopt::text::WordPiece({"[PAD]", "[UNK]", "[CLS]", "[SEP]"}));
  auto samples = from(at::zeros({4, 1, 2, 2}), at::arange(4)) | tokenize(tokenizer);
}
