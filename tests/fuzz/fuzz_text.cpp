// libFuzzer target: the text corpus reader (loadTextCorpus, engine/src/data/text_data.cpp):
// UTF-8 decoding, the alphabet and the windows. The input is the corpus file; windows of 4
// characters (and of 40, charlstm's, when the text is long enough), stride 3 as race.cpp uses.
// Only devicerace::Error may escape; every token and label must be inside the vocabulary.
#include <cstdlib>

#include "devicerace/dataset.h"
#include "devicerace/errors.h"
#include "fuzz_util.h"

using namespace devicerace;

namespace {

void check(const Dataset& ds) {
    if (ds.vocabulary < 1 || static_cast<std::size_t>(ds.vocabulary) != ds.tokenText.size()) {
        std::abort();
    }
    for (const auto* split : {&ds.train, &ds.test}) {
        if (split->labels.size() != static_cast<std::size_t>(split->count) ||
            split->tokens.size() != static_cast<std::size_t>(split->count * split->shape.at(0))) {
            std::abort();
        }
        for (auto t : split->tokens) {
            if (t < 0 || t >= ds.vocabulary) {
                std::abort();
            }
        }
        for (auto t : split->labels) {
            if (t < 0 || t >= ds.classes) {
                std::abort();
            }
        }
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto file = fuzz::scratchDir() / "corpus.txt";
    fuzz::writeFile(file, fuzz::asView(data, size));
    for (int window : {4, 40}) {
        if (window == 40 && size < 800) {
            break;
        }
        try {
            check(*loadTextCorpus(file, window, 3, std::nullopt,
                                  size % 2 ? std::optional<std::int64_t>(2) : std::nullopt));
        } catch (const Error&) {
        }
    }
    return 0;
}
