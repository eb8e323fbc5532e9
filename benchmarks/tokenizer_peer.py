"""The Python side of bench_tokenizer: Hugging Face's tokenizers (Rust) on the BBC News articles,
timed here and driven line by line from the C++ benchmark so that both sides alternate.

    python tokenizer_peer.py MODEL_DIR CORPUS_DIR
Protocol (stdin -> stdout, one line each):
    setup -> ready ARTICLES IDS          (reads the articles as ftopt's reader does: UTF-8, a bad
                                          byte replaced by U+FFFD)
    rust -> SECONDS                      tokenizers.Tokenizer(tokenizer.json).encode_batch(articles),
                                          no truncation or padding, on one thread
    transformers -> SECONDS              BertTokenizerFast(articles)["input_ids"] (the same Rust
                                          underneath, plus transformers' Python around it)
    quit
"""
import glob
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"          # one thread, as ftopt's side (before tokenizers loads)
os.environ["TOKENIZERS_PARALLELISM"] = "false"


def main():
    model_dir, corpus = sys.argv[1], sys.argv[2]
    from tokenizers import Tokenizer
    from transformers import BertTokenizerFast
    rust = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    rust.no_truncation()
    rust.no_padding()
    fast = BertTokenizerFast.from_pretrained(model_dir)
    files = sorted(glob.glob(os.path.join(corpus, "*", "*.txt")))
    articles = [open(f, "rb").read().decode("utf-8", errors="replace") for f in files]
    for line in sys.stdin:
        command = line.strip()
        if command == "quit":
            return
        if command == "setup":
            ids = sum(len(e.ids) for e in rust.encode_batch(articles))
            print(f"ready {len(articles)} {ids}", flush=True)
        elif command == "rust":
            t0 = time.perf_counter()
            rust.encode_batch(articles)
            print(time.perf_counter() - t0, flush=True)
        elif command == "transformers":
            t0 = time.perf_counter()
            fast(articles)
            print(time.perf_counter() - t0, flush=True)
        else:
            print(f"unknown command {command!r}", flush=True)


if __name__ == "__main__":
    main()
